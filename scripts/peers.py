#!/usr/bin/env python3
"""A cross-check of the ladder's peer rows: PyTorch's scaled_dot_product_attention with the
FlashAttention-2, cuDNN and memory-efficient backends, and FlashAttention-4 (flash_attn.cute, where
it is installed), on the ladder's benchmark grids, timed the way the harness times its steps:
warm-up, CUDA events around each repetition, the L2 flushed between repetitions, three interleaved
rounds, median with p20/p80 of all samples. Writes JSON with provenance.

The ladder's own cuDNN row (step 99) and GEMM ceiling are the peers of record: they run in the
ladder's process, on its inputs. This script is the independent check that they agree with what a
PyTorch user gets. Each call is captured once in a CUDA graph and the events bracket one graph
replay, so Python's dispatch (13-17% of the time at small sizes when timed eagerly) stays out of the
measurement; a backend that cannot be captured is timed eagerly and its row says so.

    python3 scripts/peers.py --out peers.json [--quick] [--dtype bf16] [--grid part4]
        [--pass bwd] [--backends sdpa-cudnn,fa4]
        [--ladder-lib build/round/lib/libladder_capi.so --ladder-variants 20/persistent,99/cudnn]
        [--ladder-lib old=OLD.so --ladder-lib new=NEW.so --ladder-pairs old:20/persistent_snake>new:21/snake]

With --ladder-lib, the ladder's own variants (through its C interface, common/apps/capi.cpp) are
timed here too, beside PyTorch's backends, on the same tensors and with the same method: a ratio
like "step 20 / PyTorch's cuDNN" then comes from one process and one way of timing. Several
libraries load side by side when labelled (LABEL=PATH; variants then LABEL:ID): each is loaded
RTLD_LOCAL, so each keeps its own registry of steps (two builds of the ladder, old and new, timed in
one run; --ladder-pairs OLD>NEW records which rows make_tables.py's compare table divides).

Every row's output is compared with the reference (PyTorch's cuDNN backend, else its default SDPA):
max |difference| relative to max |reference| above 2% (fp16) or 5% (bf16) marks the row FAIL and the
script exits 1 after writing the file, so a wrong call (a layout, a mask) cannot pass silently.

--pass bwd times the backward instead: dQ, dK, dV from dO, on the shapes of Part V (--grid bwd,
its default: B=4 H=8 N=8192 D=64 and B=2 H=16 N=8192 D=128, both masks). PyTorch's backends and
FlashAttention-4 run their forward once, untimed, and the timed call is autograd's backward of that
output (torch.autograd.grad with retain_graph, captured in a CUDA graph on the forward's stream, so
a replay is exactly the backend's backward kernels); the ladder's backward variants
(ladder_attention_backward) get the same Q, K, V, dO, PyTorch cuDNN's O and the fp32 log-sum-exp of
the scaled logits. TFLOP/s count 2.5x the forward's FLOPs (halved for causal), and each of dQ, dK,
dV is checked against PyTorch cuDNN's, with the forward's tolerance on the worst of the three.

--pass serve times Part VI's problems (issue 15: attention as models run it), bf16 by default, on
--grid decode (one query token against a long GQA cache: the issue's four shapes), gqa (prefill,
B=4 H=32 Hkv=8 N=4096/8192 D=128, both masks), varlen (a packed batch of --varlen-count lengths
drawn from 1..--varlen-max with --seed, keys = queries, both masks), paged (the decode shapes with
K/V in pages of 64 and 256 rows, the pages of each sequence shuffled in the pool), or serve (all
four, the default). Candidates: PyTorch's SDPA with enable_gqa under each --backends backend
(dense shapes only: SDPA takes no packed batch and no page table; on a paged shape it runs on the
contiguous K/V, its row marked kv_layout "contiguous"), FlashAttention-4's flash_attn_func (K/V
with fewer heads, [B, N, H, D]), flash_attn_varlen_func (cu_seqlens) and its paged form
(page_table, K/V pools [num_pages, page_size, Hkv, D], seqused_k), and the ladder's --ours
variants through ladder_attention_serving in the ladder's layouts (common/problem.hpp; K/V pool
[num_pages, Hkv, page_size, D]): each candidate its own contiguous copy of the same values. A
variant the library does not have, or one that refuses the shape, gets a row saying why (not a
failure). Every output is checked against an fp32-math reference on the same inputs (sampled
query rows of a long prefill: the first and last 32 and 64 between, of each sequence; causal
aligned to the end, FlashAttention's convention; SDPA's is_causal aligns to the top left, so its
causal rows are refused where Nq != Nk). Rows give GB/s, counting Q, K, V and O once (the pages in
use, not the block table), and that as a percentage of a 4 GiB device-to-device copy timed first
in the same run (its GB/s count the read and the write), beside TFLOP/s (exact causal pairs).

    python3 scripts/peers.py --pass serve --out serve.json [--grid decode]
        --ladder-lib build/round/lib/libladder_capi.so --ours 28/split_kv,29/paged
"""
import argparse
import ctypes
import datetime
import json
import os
import random
import statistics
import subprocess
import sys

try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    BACKENDS = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
except ImportError:  # the parts below that need no GPU (argument checks, CPU tests) still work
    torch = None
    BACKENDS = {}

BACKEND_NAMES = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "fa4")
# --pass bwd's default: PyTorch's FlashAttention-2 and cuDNN backends, and FlashAttention-4.
BACKWARD_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "fa4")
GRADIENTS = ("dq", "dk", "dv")
# max |out - reference| / max |reference| above this marks the row FAIL (a wrong layout or mask
# gives O(1); two correct kernels differ by a few units of the last place).
OUTPUT_TOLERANCE = {"fp16": 0.02, "bf16": 0.05}


def grids(quick, grid="ladder"):
    """(batch, heads, seqlen, head_dim, causal): grid="ladder", the ladder's benchmark grids;
    "part4", the targets of Part IV (B=4 H=8 D=64 and 16k tokens H=16 D=128 at N = 4096, 8192, both
    masks, and FlashAttention-3's ablation shape B=4 H=16 N=8448 D=128); "part7", those and Part
    VII's two more targets (B=1 H=64 N=1024 D=128 non-causal, B=16 H=16 N=1024 D=64 causal); "series", Part III's
    workload (B=1 H=64 N=1024 D=128) before the ladder's grids and B=4 H=8 N=16384 D=64; "bwd", the
    backward's shapes of Part V (B=4 H=8 N=8192 D=64 and B=2 H=16 N=8192 D=128, both masks)."""
    if grid == "bwd":
        shapes = [(4, 8, 8192, 64, c) for c in (False, True)] + [(2, 16, 8192, 128, c) for c in (False, True)]
        return shapes[:2] if quick else shapes
    if grid in ("part4", "part7"):
        shapes = [(4, 8, n, 64, c) for c in (False, True) for n in (4096, 8192)]
        shapes += [(16384 // n, 16, n, 128, c) for c in (False, True) for n in (4096, 8192)]
        shapes += [(4, 16, 8448, 128, False)]
        if grid == "part7":  # issue 16's two more targets: the series' workload, short sequences
            shapes += [(1, 64, 1024, 128, False), (16, 16, 1024, 64, True)]
        return shapes
    shapes = []
    for causal in (False, True):
        for n in (1024, 2048, 4096, 8192):
            shapes.append((4, 8, n, 64, causal))
    for causal in (False, True):
        for n in (1024, 4096, 8192, 16384):
            shapes.append((16384 // n, 16, n, 128, causal))
    if grid == "series":
        return ([(1, 64, 1024, 128, c) for c in (False, True)] + shapes
                + [(4, 8, 16384, 64, c) for c in (False, True)])
    return shapes[:2] if quick else shapes


def percentile(sorted_values, p):
    pos = p * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def as_graph(fn, stream=None):
    """(callable that replays fn's kernels, "cuda-graph"), or (fn, "eager") if capture fails.
    `stream`: warm up and capture on that stream (a backward's: autograd runs each backward kernel
    on the stream of its forward, which must be the capturing one), else on fresh ones."""
    try:
        side = stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # library handles and workspaces are created outside the capture
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with (torch.cuda.graph(graph, stream=stream) if stream is not None else torch.cuda.graph(graph)):
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


class LadderLibs:
    """The ladder's C interfaces (libladder_capi.so), each loaded RTLD_LOCAL under a label.

    dlopen returns one handle per file (same device and inode), so two labels of one file would
    share one registry: that is refused. Within a process, a library loaded RTLD_LOCAL resolves its
    own symbols (the step registry, Registry::instance) before any other local library's; the few
    GNU-unique objects the libraries share (cuDNN frontend and CUB caches, the driver's
    tensor-map entry point) hold the same values in both builds."""

    def __init__(self, specs):
        self.paths = parse_ladder_libs(specs)
        self.fns = {}
        self.backward_fns = {}
        self.serving_fns = {}
        for label, path in self.paths.items():
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
            f = lib.ladder_attention
            f.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 6
                          + [ctypes.c_char_p, ctypes.c_int])
            f.restype = ctypes.c_int
            self.fns[label] = f
            # ladder_attention_backward: in libraries built from Part V on (an older one has none)
            b = getattr(lib, "ladder_attention_backward", None)
            if b is not None:
                b.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 10
                              + [ctypes.c_char_p, ctypes.c_int])
                b.restype = ctypes.c_int
            self.backward_fns[label] = b
            # ladder_attention_serving: in libraries built from Part VI on
            f = getattr(lib, "ladder_attention_serving", None)
            if f is not None:
                lens = ctypes.POINTER(ctypes.c_int)
                f.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 8 + [lens, lens]
                              + [ctypes.c_void_p] * 2 + [ctypes.c_int] + [ctypes.c_void_p] * 7
                              + [ctypes.c_char_p, ctypes.c_int])
                f.restype = ctypes.c_int
            self.serving_fns[label] = f

    def call(self, label, variant, *args):
        return self.fns[label](variant.encode(), *args)

    def call_backward(self, label, variant, *args):
        if self.backward_fns[label] is None:
            raise RuntimeError(f"{self.paths[label]} has no ladder_attention_backward (built before Part V)")
        return self.backward_fns[label](variant.encode(), *args)

    def call_serving(self, label, variant, *args):
        if self.serving_fns[label] is None:
            raise RuntimeError(f"{self.paths[label]} has no ladder_attention_serving (built before Part VI)")
        return self.serving_fns[label](variant.encode(), *args)


def parse_ladder_libs(specs):
    """--ladder-lib values, PATH or LABEL=PATH, as {label: path} ("" for the unlabelled one)."""
    libs, files = {}, {}
    for spec in specs or []:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = "", spec
        elif not label or not label.replace("_", "").replace("-", "").isalnum():
            raise SystemExit(f"--ladder-lib {spec}: a label is letters, digits, - or _ (old=PATH)")
        if label in libs:
            raise SystemExit(f"--ladder-lib: the label '{label or '(none)'}' is given twice")
        if not os.path.isfile(path):
            raise SystemExit(f"--ladder-lib {spec}: no file {path}")
        st = os.stat(path)
        if (st.st_dev, st.st_ino) in files:
            raise SystemExit(f"--ladder-lib {spec}: the same file as '{files[(st.st_dev, st.st_ino)]}'; "
                             "dlopen would give both one handle and one registry: copy it first")
        files[(st.st_dev, st.st_ino)] = label or path
        libs[label] = os.path.abspath(path)
    if "" in libs and len(libs) > 1:
        raise SystemExit("--ladder-lib: with several libraries, label each (old=PATH new=PATH)")
    return libs


def parse_variant(spec, labels):
    """'LABEL:NN/name' or 'NN/name' (the only library) as (label, 'NN/name')."""
    label, sep, vid = spec.rpartition(":")
    if not sep:
        if len(labels) != 1:
            raise SystemExit(f"variant {spec}: say which library (one of {', '.join(sorted(labels))}: LABEL:{spec})")
        label, vid = next(iter(labels)), spec
    if label not in labels:
        raise SystemExit(f"variant {spec}: no --ladder-lib labelled '{label}'")
    if "/" not in vid:
        raise SystemExit(f"variant {spec}: ids look like 20/persistent")
    return label, vid


def row_name(label, vid):
    return "ladder:" + (f"{label}:" if label else "") + vid


def parse_pairs(text, labels):
    """--ladder-pairs 'old:A>new:B,...' as [((label, id), (label, id))]."""
    pairs = []
    for item in [x for x in text.split(",") if x]:
        old, sep, new = item.partition(">")
        if not sep:
            raise SystemExit(f"--ladder-pairs {item}: write OLD>NEW, e.g. old:20/persistent_snake>new:21/snake")
        pairs.append((parse_variant(old, labels), parse_variant(new, labels)))
    return pairs


def ladder_call(libs, label, variant, q, k, v, causal, bf16):
    """A callable that runs `variant` of library `label` on q, k, v into its own O (returned)."""
    o = torch.empty_like(q)
    bsz, heads, n, d = q.shape
    lse = torch.empty(bsz, heads, n, dtype=torch.float32, device=q.device)
    err = ctypes.create_string_buffer(1024)

    def call():
        rc = libs.call(label, variant, bsz, heads, n, d, int(causal), int(bf16), q.data_ptr(), k.data_ptr(),
                       v.data_ptr(), o.data_ptr(), lse.data_ptr(), torch.cuda.current_stream().cuda_stream,
                       err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, o


def ladder_backward_call(libs, label, variant, q, k, v, o, d_o, lse, causal, bf16):
    """A callable that runs backward `variant` of library `label` into its own dQ, dK, dV (returned
    as a tuple), from q, k, v, the forward's o and lse, and d_o."""
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    bsz, heads, n, d = q.shape
    err = ctypes.create_string_buffer(1024)

    def call():
        rc = libs.call_backward(label, variant, bsz, heads, n, d, int(causal), int(bf16), q.data_ptr(),
                                k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(), lse.data_ptr(),
                                dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                torch.cuda.current_stream().cuda_stream, err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, (dq, dk, dv)


def reference_lse(q, k, causal, rows=1024):
    """The forward's log-sum-exp, [B, H, N] fp32: natural log of the sum of exp(q.k / sqrt(D)) over
    each row's visible keys, from fp32 products, `rows` queries at a time (a [B, H, rows, N] block
    of scores, 1 GiB at B*H = 32 and N = 8192)."""
    bsz, heads, n, d = q.shape
    lse = torch.empty(bsz, heads, n, dtype=torch.float32, device=q.device)
    kt = k.float().transpose(-1, -2)
    for i in range(0, n, rows):
        s = torch.matmul(q[:, :, i:i + rows].float(), kt) * d ** -0.5
        if causal:  # query i + r sees keys j <= i + r
            r = torch.arange(i, min(i + rows, n), device=q.device)[:, None]
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > r, float("-inf"))
        lse[:, :, i:i + rows] = torch.logsumexp(s, dim=-1)
    return lse


def autograd_backward(forward, inputs, d_o, stream):
    """The backward of forward(*inputs) as a callable returning nothing (its dQ, dK, dV go to the
    box returned with it): the forward runs once here, on `stream`, so that autograd puts the
    backward's kernels on `stream` too, the one as_graph then captures on."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    with torch.cuda.stream(stream):
        out = forward(*leaves)
    torch.cuda.synchronize()
    box = {}

    def call():
        box["grads"] = torch.autograd.grad(out, leaves, d_o, retain_graph=True)
    return call, box


def load_fa4():
    """FlashAttention-4's flash_attn_func and its version, or (None, why)."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # not installed (scripts/round.sh's fa4 stage), or it fails to import
        return None, f"flash_attn.cute not importable: {str(e).splitlines()[0][:200]}"
    try:
        import importlib.metadata
        version = importlib.metadata.version("flash-attn-4")
    except Exception:
        version = "unknown"
    return flash_attn_func, version


def fa4_call(fa4, q, k, v, causal):
    """FA4 on [B, N, H, D] contiguous copies of q, k, v; the callable, and O as [B, H, N, D] (a view
    of the output of the call that was made last before it is read)."""
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    box = {}

    def call():
        res = fa4(qt, kt, vt, causal=causal)
        box["out"] = res[0] if isinstance(res, (tuple, list)) else res
        return box["out"]
    return call, box


def output_check(row, out, ref, dtype_name):
    diff = float((out.float() - ref.float()).abs().max())
    scale = float(ref.float().abs().max()) or 1.0
    row["max_abs_diff"] = diff
    row["rel_diff"] = diff / scale
    row["output_check"] = "pass" if diff / scale <= OUTPUT_TOLERANCE[dtype_name] and diff == diff else "FAIL"


def gradients_check(row, grads, refs, dtype_name):
    """output_check for dQ, dK, dV: each one's figures under row["gradients"]; the row's max_abs_diff,
    rel_diff and output_check are the worst of the three (NaN anywhere fails)."""
    row["gradients"] = {}
    for name, out, ref in zip(GRADIENTS, grads, refs):
        one = {}
        output_check(one, out, ref, dtype_name)
        row["gradients"][name] = one
    worst = max(row["gradients"], key=lambda name: (row["gradients"][name]["rel_diff"]
                                                  if row["gradients"][name]["rel_diff"] == row["gradients"][name]["rel_diff"]
                                                  else 1e30))
    row["worst_gradient"] = worst
    row["max_abs_diff"] = max((g["max_abs_diff"] for g in row["gradients"].values()),
                              key=lambda x: x if x == x else 1e30)
    row["rel_diff"] = row["gradients"][worst]["rel_diff"]
    row["output_check"] = ("pass" if all(g["output_check"] == "pass" for g in row["gradients"].values())
                           else "FAIL")


# ---- --pass serve: Part VI's problems (GQA, decode, varlen, paged) -----------------------------
# PyTorch's FA2 and cuDNN backends and FlashAttention-4 by default.
SERVE_BACKENDS = ("sdpa-cudnn", "sdpa-flash", "fa4")
SERVE_GRIDS = ("decode", "gqa", "varlen", "paged")
# The issue's four decode shapes, (B, Hq, Hkv, N_kv), D = 128, one query token.
DECODE_SHAPES = ((8, 32, 8, 32768), (64, 32, 8, 4096), (1, 64, 8, 131072), (128, 32, 32, 2048))
PAGE_SIZES = (64, 256)
COPY_BYTES = 4 << 30  # the bandwidth ceiling's copy: 4 GiB read and 4 GiB written


def serve_shape(kind, batch, heads, kv_heads, seqlen, kv_seqlen, head_dim, causal, q_lens=None, page_size=0):
    """One problem of --pass serve: seqlen queries and kv_seqlen keys per sequence (varlen: q_lens,
    keys as many as queries, seqlen and kv_seqlen the longest), page_size 0 for contiguous K/V."""
    return {"kind": kind, "batch": batch, "heads": heads, "kv_heads": kv_heads, "seqlen": seqlen,
            "kv_seqlen": kv_seqlen, "head_dim": head_dim, "causal": causal, "q_lens": q_lens,
            "page_size": page_size}


def varlen_lengths(seed, count, longest):
    """count lengths drawn uniformly from 1..longest by a generator of its own (the same batch
    whatever else the run draws, and on every machine)."""
    rng = random.Random(seed)
    return [rng.randint(1, longest) for _ in range(count)]


def serve_shapes(quick, grid="serve", seed=0, varlen_count=16, varlen_max=8192):
    """The shapes of --pass serve's grids (one of SERVE_GRIDS, or "serve": all); quick keeps the
    first of each."""
    out = []
    for kind in (SERVE_GRIDS if grid == "serve" else (grid,)):
        if kind == "decode":  # Nq = 1 sees every key: causal or not is the same problem
            group = [serve_shape("decode", b, h, hkv, 1, nk, 128, False) for b, h, hkv, nk in DECODE_SHAPES]
        elif kind == "gqa":
            group = [serve_shape("gqa", 4, 32, 8, n, n, 128, c) for c in (False, True) for n in (4096, 8192)]
        elif kind == "varlen":
            lens = varlen_lengths(seed, varlen_count, varlen_max)
            group = [serve_shape("varlen", len(lens), h, hkv, max(lens), max(lens), 128, c, lens)
                     for h, hkv in ((32, 8), (16, 16)) for c in (False, True)]
        else:
            group = [serve_shape("paged", b, h, hkv, 1, nk, 128, False, page_size=p)
                     for p in PAGE_SIZES for b, h, hkv, nk in DECODE_SHAPES]
        out += group[:1] if quick else group
    return out


def sequence_lengths(s):
    """[(queries, keys)] of each sequence."""
    if s["q_lens"]:
        return [(n, n) for n in s["q_lens"]]
    return [(s["seqlen"], s["kv_seqlen"])] * s["batch"]


def serve_flops(s):
    """common/problem.hpp's count: 4·H·D per (query, key) pair that exists; a causal sequence with
    as many queries as keys counts half (the papers' convention), a decode one its exact pairs."""
    pairs = 0.0
    for nq, nk in sequence_lengths(s):
        if not s["causal"]:
            pairs += nq * nk
        elif nq == nk:
            pairs += nq * nk / 2.0
        else:
            pairs += nq * (nk - nq) + nq * (nq + 1) / 2.0
    return 4.0 * s["heads"] * pairs * s["head_dim"]


def serve_bytes(s, element_bytes=2):
    """Q, K, V read and O written once (common/problem.hpp's min_bytes): K/V the keys in use."""
    total_q = sum(nq for nq, _ in sequence_lengths(s))
    total_k = sum(nk for _, nk in sequence_lengths(s))
    return (2 * total_q * s["heads"] + 2 * total_k * s["kv_heads"]) * s["head_dim"] * element_bytes


def describe(s, dtype_name):
    what = f"{s['kind']} "
    if s["q_lens"]:
        what += f"varlen({s['batch']} seqs, {sum(s['q_lens'])} tokens, longest {s['seqlen']})"
    else:
        what += f"B={s['batch']} Nq={s['seqlen']} Nk={s['kv_seqlen']}"
    what += f" H={s['heads']} Hkv={s['kv_heads']} D={s['head_dim']} {'causal' if s['causal'] else 'non-causal'}"
    return what + (f" page={s['page_size']}" if s["page_size"] else "") + f" {dtype_name}"


def sampled_rows(n, edge=32, inner=64):
    """The query rows whose output is checked, as the harness samples them: all of a short sequence,
    else the first and last `edge` (the mask's corners, a ragged last tile) and `inner` drawn in
    between by a generator seeded with n. An fp32 reference of every row of a prefill of 16 sequences
    up to 8192 long would be minutes of fp32 GEMMs; a wrong layout or mask shows in any row."""
    if n <= 2 * edge + inner:
        return list(range(n))
    middle = random.Random(n).sample(range(edge, n - edge), inner)
    return list(range(edge)) + sorted(middle) + list(range(n - edge, n))


def serving_reference(q, k, v, causal, rows, budget=1 << 28):
    """O in fp32 math of the query rows `rows` (positions, a list) of q [B, H, Nq, D] with k, v
    [B, Hkv, Nk, D], as [B, H, len(rows), D]: Q head h reads K/V head h // (H / Hkv), causal aligned
    to the end (query i sees keys j <= Nk - Nq + i; common/problem.hpp). The queries of one K/V head
    are stacked, so K and V are widened to fp32 once, never repeated per Q head; the scores go a
    block of rows at a time, at most `budget` fp32 values."""
    bsz, heads, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = heads // hkv
    kt, vf = k.float().transpose(-1, -2), v.float()  # [B, Hkv, D, Nk], [B, Hkv, Nk, D]
    out = torch.empty(bsz, heads, len(rows), d, dtype=torch.float32, device=q.device)
    step = max(1, budget // (bsz * heads * nk))
    for i in range(0, len(rows), step):
        block = torch.tensor(rows[i:i + step], dtype=torch.int64, device=q.device)
        n = len(rows[i:i + step])
        # Q heads h = hk·G + g are adjacent: [B, H, n, D] is [B, Hkv, G·n, D], one GEMM per K/V head.
        s = torch.matmul(q[:, :, block].float().reshape(bsz, hkv, group * n, d), kt) * d ** -0.5
        if causal:
            last = block[:, None] + (nk - nq)
            s = s.reshape(bsz, hkv, group, n, nk).masked_fill(
                torch.arange(nk, device=q.device)[None, :] > last, float("-inf")).reshape(bsz, hkv, group * n, nk)
        out[:, :, i:i + n] = torch.matmul(torch.softmax(s, dim=-1), vf).reshape(bsz, heads, n, d)
    return out


def varlen_reference(q, k, v, cu, causal):
    """serving_reference of each sequence of a packed batch (q [total_q, H, D], k, v [total_k, Hkv,
    D], cu the host prefix sums of the lengths, keys = queries) at its sampled rows: (the packed
    indices of those rows, O [rows, H, D] fp32)."""
    index, parts = [], []
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        rows = sampled_rows(hi - lo)
        one = [x[lo:hi].transpose(0, 1)[None] for x in (q, k, v)]
        parts.append(serving_reference(*one, causal, rows)[0].transpose(0, 1))
        index += [lo + r for r in rows]
    out = torch.empty(len(index), q.shape[1], q.shape[2], dtype=torch.float32, device=q.device)
    at = 0
    for part in parts:
        out[at:at + part.shape[0]] = part
        at += part.shape[0]
    return index, out


def paged_pools(k, v, page_size):
    """K and V [B, Hkv, Nk, D] as page pools with the pages of every sequence shuffled: the ladder's
    [num_pages, Hkv, page_size, D] and FlashAttention's [num_pages, page_size, Hkv, D] (same pages,
    same places), and the block table [B, pages_per_seq] int32; a last page's rows past Nk are zero."""
    bsz, hkv, nk, d = k.shape
    pages = -(-nk // page_size)
    table = torch.randperm(bsz * pages, device=k.device)  # logical page b·pages + p lives at table[...]
    ours, theirs = [], []
    for x in (k, v):
        padded = torch.zeros(bsz, hkv, pages * page_size, d, dtype=x.dtype, device=x.device)
        padded[:, :, :nk] = x
        logical = padded.reshape(bsz, hkv, pages, page_size, d).permute(0, 2, 1, 3, 4).reshape(
            bsz * pages, hkv, page_size, d)
        pool = torch.empty_like(logical)
        pool[table] = logical
        ours.append(pool)
        pool = torch.empty(bsz * pages, page_size, hkv, d, dtype=x.dtype, device=x.device)
        pool[table] = logical.transpose(1, 2)
        theirs.append(pool)
        padded = logical = None
    return ours, theirs, table.reshape(bsz, pages).to(torch.int32).contiguous()


def ladder_serving_call(libs, label, variant, s, q, k, v, bf16, cu_q=None, cu_k=None, block_table=None):
    """A callable that runs `variant` of library `label` through ladder_attention_serving on q, k, v
    (the ladder's layouts for shape s: common/problem.hpp) into its own O (returned)."""
    o = torch.empty_like(q)
    if s["q_lens"]:
        lse = torch.empty(s["heads"], q.shape[0], dtype=torch.float32, device=q.device)
        lens = (ctypes.c_int * s["batch"])(*s["q_lens"])
    else:
        lse = torch.empty(s["batch"], s["heads"], s["seqlen"], dtype=torch.float32, device=q.device)
        lens = None
    err = ctypes.create_string_buffer(1024)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731

    def call():
        rc = libs.call_serving(label, variant, s["batch"], s["heads"], s["kv_heads"], s["seqlen"],
                               0 if s["q_lens"] else s["kv_seqlen"], s["head_dim"], int(s["causal"]),
                               int(bf16), lens, None, ptr(cu_q), ptr(cu_k), s["page_size"], ptr(block_table),
                               q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                               torch.cuda.current_stream().cuda_stream, err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, o


def load_fa4_varlen():
    """FlashAttention-4's flash_attn_varlen_func, or None."""
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception:
        return None
    return flash_attn_varlen_func


def first(res):
    return res[0] if isinstance(res, (tuple, list)) else res


def serve_candidates(s, q, k, v, backends, fa4, fa4_varlen, libs, variants, bf16):
    """[(name, kv_layout, make)] for shape s, make() -> (callable, function returning O in the
    reference's layout: [B, H, Nq, D], varlen [total_q, H, D]). q, k, v: [B, H, Nq, D] and
    [B, Hkv, Nk, D], or packed [total, H(kv), D] for varlen."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal, varlen, paged = s["causal"], bool(s["q_lens"]), s["page_size"] > 0
    out = []
    for name in [b for b in backends if b in BACKENDS]:
        def make(backend=BACKENDS[name]):
            if varlen:
                raise RuntimeError("SDPA takes no packed variable-length batch (cu_seqlens)")
            if causal and s["seqlen"] != s["kv_seqlen"]:
                raise RuntimeError("SDPA's is_causal aligns the mask to the top left, not to the end")
            box = {}

            def call():
                with sdpa_kernel([backend]):
                    box["out"] = sdpa(q, k, v, is_causal=causal, enable_gqa=s["kv_heads"] != s["heads"])
            return call, lambda: box["out"]
        out.append((name, "contiguous", make))
    if fa4 is not None:
        def make_fa4():
            box = {}
            if varlen:
                cu = torch.tensor(s["cu"], dtype=torch.int32, device=q.device)
                if fa4_varlen is None:
                    raise RuntimeError("flash_attn.cute has no flash_attn_varlen_func")

                def call():
                    box["out"] = first(fa4_varlen(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=s["seqlen"],
                                                  max_seqlen_k=s["kv_seqlen"], causal=causal))
                return call, lambda: box["out"]
            qt = q.transpose(1, 2).contiguous()
            if paged:  # FA4's paged form: pools [num_pages, page_size, Hkv, D], seqused_k the lengths
                if fa4_varlen is None:
                    raise RuntimeError("flash_attn.cute has no flash_attn_varlen_func")
                (kp, vp), table = s["fa4_pools"], s["block_table"]
                used = torch.full((s["batch"],), s["kv_seqlen"], dtype=torch.int32, device=q.device)

                def call():
                    box["out"] = first(fa4_varlen(qt, kp, vp, seqused_k=used, page_table=table,
                                                  max_seqlen_k=s["kv_seqlen"], causal=causal))
            else:
                kt, vt = (x.transpose(1, 2).contiguous() for x in (k, v))

                def call():
                    box["out"] = first(fa4(qt, kt, vt, causal=causal))
            return call, lambda: box["out"].transpose(1, 2)
        out.append(("fa4", "packed" if varlen else "paged" if paged else "contiguous", make_fa4))
    for label, vid in variants:
        def make_ladder(label=label, vid=vid):
            if varlen:
                cu = torch.tensor(s["cu"], dtype=torch.int32, device=q.device)
                call, o = ladder_serving_call(libs, label, vid, s, q, k, v, bf16, cu_q=cu, cu_k=cu)
            elif paged:
                (kp, vp), table = s["ladder_pools"], s["block_table"]
                call, o = ladder_serving_call(libs, label, vid, s, q, kp, vp, bf16, block_table=table)
            else:
                call, o = ladder_serving_call(libs, label, vid, s, q, k, v, bf16)
            return call, lambda: o
        out.append((row_name(label, vid), "packed" if varlen else "paged" if paged else "contiguous", make_ladder))
    return out


def serve_main(args, argv, backends, libs, variants, fa4, fa4_version, flush, gpu, write_file):
    """--pass serve: the device copy's ceiling, then every shape of the grid (rows as they come)."""
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4_varlen = load_fa4_varlen() if fa4 is not None else None
    rows = []

    def write(final=False):
        write_file(rows, final, "serve: Q, K, V in each candidate's layout (contiguous copies, same values), "
                   "O checked against an fp32-math reference; GB/s count Q, K, V, O once; ")

    # The bandwidth ceiling of the day: a device-to-device copy, timed the same way.
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    fn, method = as_graph(lambda: dst.copy_(src))
    t = time_rounds([fn], flush)[0]
    copy_gbps = 2 * COPY_BYTES / (t["median_ms"] * 1e-3) / 1e9
    rows.append({"kind": "copy", "name": "device-copy-4GiB", "bytes": 2 * COPY_BYTES, **t, "timing_method": method,
                 "gbps": copy_gbps})
    src = dst = fn = None
    print(f"{'device-to-device copy, 4 GiB':38s} {copy_gbps:.0f} GB/s (read + write; the ceiling below)", flush=True)

    failed = []
    for s in serve_shapes(args.quick, args.grid, args.seed, args.varlen_count, args.varlen_max):
        d, h, hkv = s["head_dim"], s["heads"], s["kv_heads"]
        if s["q_lens"]:
            total = sum(s["q_lens"])
            s["cu"] = [0]
            for n in s["q_lens"]:
                s["cu"].append(s["cu"][-1] + n)
            q = torch.randn(total, h, d, dtype=dtype, device="cuda")
            k, v = (torch.randn(total, hkv, d, dtype=dtype, device="cuda") for _ in range(2))
            index, ref = varlen_reference(q, k, v, s["cu"], s["causal"])
            index = torch.tensor(index, dtype=torch.int64, device="cuda")
            sample = lambda o: o[index]  # noqa: E731  the sampled rows of a packed O
        else:
            q = torch.randn(s["batch"], h, s["seqlen"], d, dtype=dtype, device="cuda")
            k, v = (torch.randn(s["batch"], hkv, s["kv_seqlen"], d, dtype=dtype, device="cuda") for _ in range(2))
            positions = sampled_rows(s["seqlen"])
            ref = serving_reference(q, k, v, s["causal"], positions)
            index = torch.tensor(positions, dtype=torch.int64, device="cuda")
            sample = lambda o: o[:, :, index]  # noqa: E731
            if s["page_size"]:
                s["ladder_pools"], s["fa4_pools"], s["block_table"] = paged_pools(k, v, s["page_size"])
        flops, nbytes = serve_flops(s), serve_bytes(s)
        base = {"kind": "attention", "pass": "serve", "shape_kind": s["kind"], "batch": s["batch"], "heads": h,
                "kv_heads": hkv, "seqlen": s["seqlen"], "kv_seqlen": s["kv_seqlen"], "head_dim": d,
                "causal": s["causal"], "dtype": args.dtype, "page_size": s["page_size"], "flops": flops,
                "bytes": nbytes, "reference": "fp32", "checked_rows": int(ref.shape[0] if s["q_lens"] else ref.shape[2])}
        if s["q_lens"]:
            base["q_lens"] = s["q_lens"]
        shape_rows, fns, keep = [], [], []
        for name, layout, make in serve_candidates(s, q, k, v, backends, fa4, fa4_varlen, libs, variants,
                                                   args.dtype == "bf16"):
            row = {**base, "name": name, "kv_layout": layout}
            try:
                call, output = make()
                keep.append(call)
                call()  # a peer that refuses the shape raises here; FA4 compiles here
                torch.cuda.synchronize()
                output_check(row, sample(output()), ref, args.dtype)
                fn, row["timing_method"] = as_graph(call)
                fns.append(fn)
            except Exception as e:  # refused, unknown to the library, or failed: say why
                row["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            shape_rows.append(row)
        timings = iter(time_rounds(fns, flush)) if fns else iter(())
        for row in shape_rows:
            if "error" not in row:
                t = next(timings)
                gbps = nbytes / (t["median_ms"] * 1e-3) / 1e9
                row.update(t, gbps=gbps, pct_of_copy=100 * gbps / copy_gbps,
                           tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
            rows.append(row)
            if row.get("output_check") == "FAIL":
                failed.append(row)
            what = f"{row['name']:38s} {describe(s, args.dtype)} [{row['kv_layout']}]: "
            if "error" in row:
                print(what + "skipped, " + row["error"], flush=True)
            else:
                print(what + f"{row['gbps']:.0f} GB/s ({row['pct_of_copy']:.0f}% of copy), {row['tflops']:.1f} TFLOP/s "
                      f"({row['timing_method']}), max|Δ| vs fp32 {row['max_abs_diff']:.2e} {row['output_check']}",
                      flush=True)
        q = k = v = ref = None
        for key in ("ladder_pools", "fa4_pools", "block_table"):
            s.pop(key, None)
        write()
    write(final=True)
    for row in failed:
        print(f"FAIL: {row['name']} {row['shape_kind']} B={row['batch']} H={row['heads']} Hkv={row['kv_heads']} "
              f"Nq={row['seqlen']} Nk={row['kv_seqlen']} causal={row['causal']} page={row['page_size']}: "
              f"max|Δ| {row['max_abs_diff']:.3g} vs fp32 ({100 * row['rel_diff']:.1f}% of max|ref|, "
              f"tolerance {100 * OUTPUT_TOLERANCE[args.dtype]:.0f}%)", file=sys.stderr)
    return 1 if failed else 0


def tree_provenance():
    """The code measured: commit, dirty (true|false|unknown) and the tracked files' hash, from
    scripts/round.sh's exports (scripts/tree_state.py run in the copy), else asked here."""
    if os.environ.get("LADDER_GIT_DIRTY") and os.environ.get("LADDER_TREE_HASH"):
        return {"git_commit": os.environ.get("LADDER_GIT_COMMIT", "unknown"),
                "git_dirty": os.environ["LADDER_GIT_DIRTY"], "tree_hash": os.environ["LADDER_TREE_HASH"]}
    import tree_state  # scripts/ is on sys.path: this file's folder
    st, _ = tree_state.state()
    return {"git_commit": os.environ.get("LADDER_GIT_COMMIT") or st["commit"], "git_dirty": st["dirty"],
            "tree_hash": st["tree_hash"]}


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="two shapes only (a smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd", "serve"), default="fwd",
                    help="time the forward (O from Q, K, V), the backward (dQ, dK, dV from dO), or Part VI's "
                    "serving problems (GQA, decode, varlen, paged: GB/s and %% of a device copy)")
    ap.add_argument("--grid", choices=("ladder", "part4", "part7", "series", "bwd", "serve") + SERVE_GRIDS, default=None,
                    help="the ladder's benchmark grid (the forward's default), Part IV's target shapes, "
                    "Part III's series, or Part V's backward shapes (the backward's default); --pass serve: "
                    + ", ".join(SERVE_GRIDS) + " or serve (all four, its default)")
    ap.add_argument("--varlen-count", type=int, default=16, help="--pass serve: sequences of the varlen batch")
    ap.add_argument("--varlen-max", type=int, default=8192,
                    help="--pass serve: the varlen lengths are drawn from 1..this (with --seed)")
    ap.add_argument("--backends", default=None,
                    help="comma-separated peers to time: " + ", ".join(BACKEND_NAMES)
                    + " (fa4 only where flash_attn.cute imports); default all for the forward, "
                    + ",".join(BACKWARD_BACKENDS) + " for the backward")
    ap.add_argument("--ladder-lib", action="append", default=[],
                    help="libladder_capi.so, or LABEL=PATH (repeatable): also time the ladder's variants here")
    ap.add_argument("--ladder-variants", "--ours", default="",
                    help="comma-separated variant ids (LABEL:ID with labelled libraries), e.g. 20/persistent,99/cudnn")
    ap.add_argument("--ladder-pairs", default="",
                    help="comma-separated OLD>NEW pairs of labelled ids, e.g. old:20/persistent_snake>new:21/snake")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default=None,
                    help="element type of Q, K, V (the GEMM ceiling stays fp16: same tensor-core rate); "
                    "default fp16, bf16 for --pass serve")
    args = ap.parse_args(argv)
    backward = args.pass_ == "bwd"
    serve = args.pass_ == "serve"
    if args.dtype is None:
        args.dtype = "bf16" if serve else "fp16"
    if args.grid is None:
        args.grid = "bwd" if backward else "serve" if serve else "ladder"
    if serve != (args.grid in ("serve",) + SERVE_GRIDS):
        ap.error(f"--grid {args.grid} " + ("is not one of --pass serve's: " + ", ".join(("serve",) + SERVE_GRIDS)
                                          if serve else "belongs to --pass serve"))
    if args.varlen_count < 1 or args.varlen_max < 1:
        ap.error("--varlen-count and --varlen-max must be positive")
    if args.backends is None:
        args.backends = ",".join(BACKWARD_BACKENDS if backward else SERVE_BACKENDS if serve else BACKEND_NAMES)
    backends = [x for x in args.backends.split(",") if x]
    for b in backends:
        if b not in BACKEND_NAMES:
            ap.error(f"--backends: unknown '{b}' (known: {', '.join(BACKEND_NAMES)})")
    labels = parse_ladder_libs(args.ladder_lib)
    variants = [parse_variant(x, labels) for x in args.ladder_variants.split(",") if x]
    pairs = parse_pairs(args.ladder_pairs, labels)
    for old, new in pairs:
        variants += [x for x in (old, new) if x not in variants]
    if variants and not labels:
        ap.error("--ladder-variants and --ladder-pairs need --ladder-lib")
    if torch is None or not torch.cuda.is_available():
        print("peers.py: needs PyTorch with a CUDA GPU (torch " + ("not installed" if torch is None else
              "finds no GPU") + ")", file=sys.stderr)
        return 3
    libs = LadderLibs(args.ladder_lib) if labels else None
    if serve and libs:
        for label in labels:  # a library from before Part VI: its rows say so (call_serving raises)
            if libs.serving_fns.get(label) is None:
                print(f"{libs.paths[label]}: no ladder_attention_serving (built before Part VI): its rows are skipped",
                      flush=True)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4, fa4_version = load_fa4() if "fa4" in backends else (None, "not asked for")
    if "fa4" in backends and fa4 is None:
        print(f"fa4: skipped, {fa4_version}", flush=True)

    torch.manual_seed(args.seed)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device="cuda")
    rows = []

    def write_file(rows, final, method_prefix=""):
        """The file so far: rewritten after every shape, so a round cut short keeps what it timed."""
        provenance = {
            "gpu": gpu,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **tree_provenance(),
            "command_line": " ".join(["scripts/peers.py"] + (argv if argv is not None else sys.argv[1:])),
            "fa4": ({"version": fa4_version} if fa4 is not None else {"skipped": fa4_version}),
            "ladder_libs": libs.paths if libs else {},
            # LADDER_LIB_COMMITS="old=349da4a,new=..." (scripts/round.sh sets it): each library's commit
            "ladder_lib_commits": dict(x.split("=", 1) for x in
                                       os.environ.get("LADDER_LIB_COMMITS", "").split(",") if "=" in x),
            "pass": args.pass_,
            "dtype": args.dtype,
            "method": method_prefix
                      + ("backward: the forward run once untimed, the timed call autograd's backward of its output "
                         "(dQ, dK, dV from dO), the ladder's from the same O and log-sum-exp; " if backward else "")
                      + "each call captured in a CUDA graph (else eager, per row's timing_method); CUDA events "
                      "around one replay per repetition, L2 flushed (2x L2 zeroed) between, 3 interleaved rounds "
                      "(alternating direction) of >=5 reps / 100 ms after >=25 ms warm-up; median of all samples"}
        result = {"schema": "attention-ladder/peers/1", "pass": args.pass_, "provenance": provenance,
                  "complete": final, "rows": rows}
        if serve:
            result["grid"] = args.grid
            if args.grid in ("serve", "varlen"):
                result["varlen"] = {"seed": args.seed, "count": args.varlen_count, "max": args.varlen_max}
        if pairs:
            result["pairs"] = [{"old": row_name(*o), "new": row_name(*nw)} for o, nw in pairs]
        with open(args.out + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".tmp", args.out)

    if serve:
        gpu = gpu_provenance()
        return serve_main(args, argv, backends, libs, variants, fa4, fa4_version, flush, gpu, write_file)

    # The matrix-unit ceiling of the day, measured the same way.
    a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    c = torch.empty(8192, 8192, dtype=torch.float16, device="cuda")
    fn, method = as_graph(lambda: torch.matmul(a, b, out=c))
    t = time_rounds([fn], flush)[0]
    rows.append({"kind": "matmul", "name": "torch-fp16-matmul-8192", "flops": 2 * 8192**3, **t,
                 "timing_method": method, "tflops": 2 * 8192**3 / (t["median_ms"] * 1e-3) / 1e12})
    a = b = c = None  # free the GEMM's 400 MB before the attention shapes

    gpu = gpu_provenance()

    def write(final=False):
        write_file(rows, final)

    failed = []
    for (bsz, heads, n, d, causal) in grids(args.quick, args.grid):
        q, k, v = (torch.randn(bsz, heads, n, d, dtype=dtype, device="cuda") for _ in range(3))
        flops = 4 * bsz * heads * n * n * d / (2 if causal else 1) * (2.5 if backward else 1)
        base = {"kind": "attention", "pass": args.pass_, "batch": bsz, "heads": heads, "seqlen": n,
                "head_dim": d, "causal": causal, "dtype": args.dtype, "flops": flops}
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def reference(q_, k_, v_, name):
            if name == "sdpa-default":
                return sdpa(q_, k_, v_, is_causal=causal)
            with sdpa_kernel([BACKENDS["sdpa-cudnn"]]):
                return sdpa(q_, k_, v_, is_causal=causal)
        if backward:
            d_o = torch.randn(bsz, heads, n, d, dtype=dtype, device="cuda")
            bwd_stream = torch.cuda.Stream()  # every backward's forward, and so its backward, runs here
        # The reference every row's output is checked against: PyTorch's cuDNN backend, else its
        # default; for the backward, its dQ, dK, dV, and the O and log-sum-exp the ladder's take.
        for ref_name in ("sdpa-cudnn", "sdpa-default"):
            try:
                ref = reference(q, k, v, ref_name)
                if backward:
                    o_fwd = ref.contiguous()
                    call, box = autograd_backward(lambda *x: reference(*x, ref_name), (q, k, v), d_o, bwd_stream)
                    call()
                    torch.cuda.synchronize()
                    ref = tuple(g.clone() for g in box["grads"])
                    call = box = None
                break
            except Exception:
                if ref_name == "sdpa-default":
                    raise
        if backward:
            lse = reference_lse(q, k, causal)
        shape_rows, fns = [], []
        keep = []  # a graph replays into its outputs by address: they must outlive its timing

        def add(name, make):
            """make() -> (callable, function returning its O as [B, H, N, D], or its dQ, dK, dV)."""
            row = {**base, "name": name}
            try:
                call, output = make()
                keep.append(call)
                call()  # a peer that refuses the shape raises here; FA4 compiles here
                torch.cuda.synchronize()
                if name != ref_name:
                    row["reference"] = ref_name
                    if backward:
                        gradients_check(row, output(), ref, args.dtype)
                    else:
                        output_check(row, output(), ref, args.dtype)
                fn, row["timing_method"] = as_graph(call, bwd_stream) if backward else as_graph(call)
                fns.append(fn)
            except Exception as e:  # refused or failed: say why
                row["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            shape_rows.append(row)

        for name in [b for b in backends if b in BACKENDS]:
            def make(backend=BACKENDS[name]):
                box = {}
                if backward:
                    def forward(q_, k_, v_):
                        with sdpa_kernel([backend]):
                            return sdpa(q_, k_, v_, is_causal=causal)
                    call, box = autograd_backward(forward, (q, k, v), d_o, bwd_stream)
                    return call, lambda: box["grads"]

                def call():
                    with sdpa_kernel([backend]):
                        box["out"] = sdpa(q, k, v, is_causal=causal)
                return call, lambda: box["out"]
            add(name, make)
        if fa4 is not None:
            def make_fa4():
                if backward:  # FA4 on [B, N, H, D]: its inputs, dO and gradients transposed
                    qt, kt, vt, d_ot = (x.transpose(1, 2).contiguous() for x in (q, k, v, d_o))

                    def forward(q_, k_, v_):
                        res = fa4(q_, k_, v_, causal=causal)
                        return res[0] if isinstance(res, (tuple, list)) else res
                    call, box = autograd_backward(forward, (qt, kt, vt), d_ot, bwd_stream)
                    return call, lambda: tuple(g.transpose(1, 2) for g in box["grads"])
                call, box = fa4_call(fa4, q, k, v, causal)
                return call, lambda: box["out"].transpose(1, 2)
            add("fa4", make_fa4)
        for label, vid in variants:
            def make_ladder(label=label, vid=vid):
                if backward:
                    call, grads = ladder_backward_call(libs, label, vid, q, k, v, o_fwd, d_o, lse, causal,
                                                       args.dtype == "bf16")
                    return call, lambda: grads
                call, o = ladder_call(libs, label, vid, q, k, v, causal, args.dtype == "bf16")
                return call, lambda: o
            add(row_name(label, vid), make_ladder)

        timings = iter(time_rounds(fns, flush)) if fns else iter(())
        for row in shape_rows:
            if "error" not in row:
                t = next(timings)
                row.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
            rows.append(row)
            if row.get("output_check") == "FAIL":
                failed.append(row)
            check = (f", max|Δ| vs {row['reference']} {row['max_abs_diff']:.2e} {row['output_check']}"
                     if "output_check" in row else "")
            print(f"{row['name']:38s} B={bsz} H={heads} N={n} D={d} causal={causal} {args.dtype}"
                  + (" backward: " if backward else ": ")
                  + (f"{row['tflops']:.1f} TFLOP/s ({row['timing_method']}){check}" if "tflops" in row
                     else row["error"]), flush=True)
        write()

    write(final=True)
    for row in failed:
        print(f"FAIL: {row['name']} B={row['batch']} H={row['heads']} N={row['seqlen']} D={row['head_dim']} "
              f"causal={row['causal']}" + (f" ({row['worst_gradient']} the worst)" if "worst_gradient" in row else "")
              + f": max|Δ| {row['max_abs_diff']:.3g} vs {row['reference']} "
              f"({100 * row['rel_diff']:.1f}% of max|ref|, tolerance {100 * OUTPUT_TOLERANCE[args.dtype]:.0f}%)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
