#!/usr/bin/env python3
"""A cross-check of the ladder's peer rows: PyTorch's scaled_dot_product_attention with the
FlashAttention-2, cuDNN and memory-efficient backends on the ladder's benchmark grids, timed the way
the harness times its steps: warm-up, CUDA events around each repetition, the L2 flushed between
repetitions, three interleaved rounds, median with p20/p80 of all samples. Writes JSON with provenance.

The ladder's own cuDNN row (step 99) and GEMM ceiling are the peers of record: they run in the
ladder's process, on its inputs. This script is the independent check that they agree with what a
PyTorch user gets. Each call is captured once in a CUDA graph and the events bracket one graph
replay, so Python's dispatch (13-17% of the time at small sizes when timed eagerly) stays out of the
measurement; a backend that cannot be captured is timed eagerly and its row says so.

    python3 scripts/peers.py --out peers.json [--quick] [--dtype bf16]
        [--ladder-lib build/gpu/lib/libladder_capi.so --ladder-variants 20/persistent,99/cudnn]

With --ladder-lib, the ladder's own variants (through its C interface, common/apps/capi.cpp) are
timed here too, beside PyTorch's backends, on the same tensors and with the same method: a ratio
like "step 20 / PyTorch's cuDNN" then comes from one process and one way of timing. Their output is
compared with PyTorch's default SDPA (max |difference| in the row) as a sanity check.
"""
import argparse
import ctypes
import datetime
import json
import os
import statistics
import subprocess

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "sdpa-flash": SDPBackend.FLASH_ATTENTION,
    "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
}


def grids(quick, grid="ladder"):
    """(batch, heads, seqlen, head_dim, causal) in the order scripts/gpu-round.sh benchmarks them;
    grid="part4": the targets of Part IV (B=4 H=8 D=64 and 16k tokens H=16 D=128 at N = 4096, 8192,
    both masks, and FlashAttention-3's ablation shape)."""
    if grid == "part4":
        shapes = [(4, 8, n, 64, c) for c in (False, True) for n in (4096, 8192)]
        shapes += [(16384 // n, 16, n, 128, c) for c in (False, True) for n in (4096, 8192)]
        return shapes + [(4, 16, 8448, 128, False)]
    shapes = []
    for causal in (False, True):
        for n in (1024, 2048, 4096, 8192):
            shapes.append((4, 8, n, 64, causal))
    for causal in (False, True):
        for n in (1024, 4096, 8192, 16384):
            shapes.append((16384 // n, 16, n, 128, causal))
    return shapes[:2] if quick else shapes


def percentile(sorted_values, p):
    pos = p * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def as_graph(fn):
    """(callable that replays fn's kernels, "cuda-graph"), or (fn, "eager") if capture fails."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # library handles and workspaces are created outside the capture
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
        return graph.replay, "cuda-graph"
    except Exception:  # not capturable: time it eagerly, and say so
        torch.cuda.synchronize()
        return fn, "eager"


def time_rounds(fns, flush, rounds=3, **kw):
    """Times each callable `rounds` times, interleaved, alternately in order and in reverse (as the
    ladder does, so a drift of the clocks cannot favour the first); returns a summary per callable."""
    per = [[] for _ in fns]
    medians = [[] for _ in fns]
    for r in range(rounds):
        order = list(enumerate(fns))
        if r % 2 == 1:
            order.reverse()
        for i, fn in order:
            t = time_fn(fn, flush, **kw)
            per[i] += t["samples_ms"]
            medians[i].append(t["median_ms"])
    out = []
    for samples, meds in zip(per, medians):
        s = sorted(samples)
        out.append({"median_ms": statistics.median(s), "p20_ms": percentile(s, 0.2),
                    "p80_ms": percentile(s, 0.8), "samples_ms": samples, "round_medians_ms": meds})
    return out


def time_fn(fn, flush, warmup_ms=25.0, min_reps=5, max_reps=50, target_ms=100.0):
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    # Warm-up for at least warmup_ms and two calls.
    spent, calls = 0.0, 0
    while calls < 2 or spent < warmup_ms:
        start.record()
        fn()
        end.record()
        end.synchronize()
        spent += start.elapsed_time(end)
        calls += 1
    samples = []
    while len(samples) < max_reps and (len(samples) < min_reps or sum(samples) < target_ms):
        flush.zero_()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    s = sorted(samples)
    return {"median_ms": statistics.median(s), "p20_ms": percentile(s, 0.2),
            "p80_ms": percentile(s, 0.8), "samples_ms": samples}


def ladder_library(path):
    """ladder_attention from the ladder's C interface (libladder_capi.so)."""
    lib = ctypes.CDLL(path)
    f = lib.ladder_attention
    f.argtypes = [ctypes.c_char_p] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 6 + [ctypes.c_char_p, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


def ladder_call(f, variant, q, k, v, causal, bf16):
    """A callable that runs `variant` on q, k, v into its own O (returned with it)."""
    o = torch.empty_like(q)
    bsz, heads, n, d = q.shape
    lse = torch.empty(bsz, heads, n, dtype=torch.float32, device=q.device)
    err = ctypes.create_string_buffer(1024)

    def call():
        rc = f(variant.encode(), bsz, heads, n, d, int(causal), int(bf16), q.data_ptr(), k.data_ptr(),
               v.data_ptr(), o.data_ptr(), lse.data_ptr(), torch.cuda.current_stream().cuda_stream,
               err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, o


def gpu_provenance():
    props = torch.cuda.get_device_properties(0)
    info = {"name": props.name, "sm_count": props.multi_processor_count,
            "compute_capability": props.major * 10 + props.minor,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True)
        driver, sm, mem, max_sm = [x.strip() for x in q.stdout.strip().split(",")]
        info.update(driver_version=driver, sm_clock_mhz=int(sm), mem_clock_mhz=int(mem),
                    max_sm_clock_mhz=int(max_sm))
    except Exception as e:  # nvidia-smi missing: record why
        info["nvidia_smi_error"] = str(e)
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="two shapes only (a smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grid", choices=("ladder", "part4"), default="ladder",
                    help="the ladder's benchmark grid, or Part IV's target shapes")
    ap.add_argument("--ladder-lib", help="libladder_capi.so: also time the ladder's variants here")
    ap.add_argument("--ladder-variants", default="",
                    help="comma-separated variant ids for --ladder-lib (e.g. 20/persistent,99/cudnn)")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16",
                    help="element type of Q, K, V (the GEMM ceiling stays fp16: same tensor-core rate)")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    ladder_fn = ladder_library(args.ladder_lib) if args.ladder_lib else None
    ladder_variants = [x for x in args.ladder_variants.split(",") if x] if ladder_fn else []

    torch.manual_seed(args.seed)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    rows = []

    # The matrix-unit ceiling of the day, measured the same way.
    a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    c = torch.empty(8192, 8192, dtype=torch.float16, device="cuda")
    fn, method = as_graph(lambda: torch.matmul(a, b, out=c))
    t = time_rounds([fn], flush)[0]
    rows.append({"kind": "matmul", "name": "torch-fp16-matmul-8192", "flops": 2 * 8192**3, **t,
                 "timing_method": method, "tflops": 2 * 8192**3 / (t["median_ms"] * 1e-3) / 1e12})
    del a, b, c

    for (bsz, heads, n, d, causal) in grids(args.quick, args.grid):
        q, k, v = (torch.randn(bsz, heads, n, d, dtype=dtype, device="cuda") for _ in range(3))
        flops = 4 * bsz * heads * n * n * d / (2 if causal else 1)
        shape_rows, fns = [], []
        for name, backend in BACKENDS.items():
            row = {"kind": "attention", "name": name, "batch": bsz, "heads": heads, "seqlen": n,
                   "head_dim": d, "causal": causal, "dtype": args.dtype, "flops": flops}
            try:
                def call(backend=backend):
                    with sdpa_kernel([backend]):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                call()  # a backend that refuses the shape raises here
                fn, row["timing_method"] = as_graph(call)
                fns.append(fn)
            except Exception as e:  # say why
                row["error"] = str(e).splitlines()[0][:300]
            shape_rows.append(row)
        reference = None
        keep = []  # a graph replays into O and the LSE by address: they must outlive its timing
        for variant in ladder_variants:
            row = {"kind": "attention", "name": "ladder:" + variant, "batch": bsz, "heads": heads,
                   "seqlen": n, "head_dim": d, "causal": causal, "dtype": args.dtype, "flops": flops}
            try:
                call, o = ladder_call(ladder_fn, variant, q, k, v, causal, args.dtype == "bf16")
                keep.append(call)
                call()
                if reference is None:
                    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.cuda.synchronize()
                row["max_abs_diff_vs_sdpa"] = float((o.float() - reference.float()).abs().max())
                fn, row["timing_method"] = as_graph(call)
                fns.append(fn)
            except Exception as e:  # the variant refuses this shape, or failed: say why
                row["error"] = str(e).splitlines()[0][:300]
            shape_rows.append(row)
        timings = iter(time_rounds(fns, flush)) if fns else iter(())
        for row in shape_rows:
            if "error" not in row:
                t = next(timings)
                row.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
            rows.append(row)
            print(f"{row['name']:15s} B={bsz} H={heads} N={n} D={d} causal={causal} {args.dtype}: "
                  + (f"{row['tflops']:.1f} TFLOP/s ({row['timing_method']})" if "tflops" in row
                     else row["error"]), flush=True)
        del q, k, v

    result = {"schema": "attention-ladder/peers/1",
              "provenance": {"gpu": gpu_provenance(),
                             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                             "git_commit": os.environ.get("LADDER_GIT_COMMIT", "unknown"),
                             "method": "each call captured in a CUDA graph (else eager, per row's "
                                       "timing_method); CUDA events around one replay per repetition, "
                                       "L2 flushed (2x L2 zeroed) between, 3 interleaved rounds (alternating direction) of "
                                       ">=5 reps / 100 ms after >=25 ms warm-up; median of all samples"},
              "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
