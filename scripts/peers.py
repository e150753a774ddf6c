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
Part VI's backward problems (peers_bwd.py): --grid bwd-gqa (B=2 Hq=32 Hkv=8 N=4096 D=128, both
masks) and --grid bwd-varlen (24 sequences, lengths drawn from 1..8192 with --seed; --seed 3 is the
issue's batch of 91 707 tokens; H=32 Hkv=8 D=128, causal). There SDPA runs with enable_gqa (GQA
only: it takes no packed batch, so its varlen rows say so and are not timed), FlashAttention-4 with
K/V of fewer heads (flash_attn_func) or cu_seqlens (flash_attn_varlen_func), the ladder's variants
through ladder_attention_backward_serving in the ladder's layouts; the reference is PyTorch's cuDNN
SDPA backward (else its default), of each sequence alone for varlen, and a varlen batch's TFLOP/s
count the sum over its sequences (a causal one halved).

    python3 scripts/peers.py --pass bwd --grid bwd-varlen --seed 3 --out bwd-varlen.json
        --ladder-lib build/round/lib/libladder_capi.so --ladder-variants 25/head_by_head

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

The script in rooms: peers_timing.py (CUDA graphs, interleaved passes, the repetition rule),
peers_ladder.py (the ladder's libraries through ctypes, variant ids, the calls), peers_checks.py
(outputs and gradients against the reference), peers_serve.py (--pass serve), peers_torch.py
(PyTorch where it is installed); this file keeps the grids, the forward and backward passes, the
provenance and main().
"""
import argparse
import datetime
import json
import os
import subprocess
import pathlib
import sys

# The modules beside this file, also when it is loaded by path (tests/gpu/capi_in_torch.py).
if str(pathlib.Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from peers_torch import BACKENDS, sdpa_kernel, torch  # noqa: E402,F401  (peers.torch: the CPU tests' switch)
from peers_checks import OUTPUT_TOLERANCE, gradients_check, output_check  # noqa: E402,F401
from peers_ladder import (LadderLibs, ladder_backward_call, ladder_call, parse_ladder_libs,  # noqa: E402,F401
                          ladder_serving_call, parse_pairs, parse_variant, row_name)
# describe and serve_shape too: tests/gpu/capi_in_torch.py calls them as peers.describe, peers.serve_shape.
from peers_serve import SERVE_BACKENDS, SERVE_GRIDS, describe, serve_main, serve_shape  # noqa: E402,F401
from peers_timing import L2Flush, as_graph, time_rounds  # noqa: E402
import peers_bwd  # noqa: E402  (its shapes are read through the module: the CPU tests replace them)
from peers_bwd import BWD_SERVING_GRIDS, BWD_VARLEN_COUNT, BWD_VARLEN_MAX, ServingBackwardShape  # noqa: E402
from peers_serve import load_fa4_varlen  # noqa: E402

FLUSH_TEXT = {"read": "2x L2 read, the L2 left clean", "write": "2x L2 zeroed, the L2 left dirty", "none": "none"}
BACKEND_NAMES = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "fa4", "fa4-deterministic")
# FlashAttention-4's backward with deterministic=True (its dQ semaphores): the yardstick of step 39.
FA4_BACKENDS = ("fa4", "fa4-deterministic")
# --pass bwd's default: PyTorch's FlashAttention-2 and cuDNN backends, and FlashAttention-4.
BACKWARD_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "fa4")


def grids(quick, grid="ladder", backward=False):
    """(batch, heads, seqlen, head_dim, causal): grid="ladder", the ladder's benchmark grids;
    "part4", the targets of Part IV (B=4 H=8 D=64 and 16k tokens H=16 D=128 at N = 4096, 8192, both
    masks, and FlashAttention-3's ablation shape B=4 H=16 N=8448 D=128); "part7", those and Part
    VII's two more targets (B=1 H=64 N=1024 D=128 non-causal, B=16 H=16 N=1024 D=64 causal); "series", Part III's
    workload (B=1 H=64 N=1024 D=128) before the ladder's grids and B=4 H=8 N=16384 D=64; "bwd", the
    backward's shapes of Part V (B=4 H=8 N=8192 D=64 and B=2 H=16 N=8192 D=128, both masks);
    "refactor", the old-against-new check of a refactor (every variant of two builds, so small: D=64 and
    D=128 at N=4096, both masks, B=4 H=8 and B=4 H=16; with --pass bwd B=2 H=8 N=4096, where step 23's
    N x N matrices still fit)."""
    if grid == "refactor" and backward:
        return [(2, 8, 4096, d, c) for d in (64, 128) for c in (False, True)][:1 if quick else 4]
    if grid == "refactor":
        if quick:
            return [(1, 2, 1024, 64, False)]
        return ([(4, 8, 4096, 64, c) for c in (False, True)] + [(4, 16, 4096, 128, c) for c in (False, True)])
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


def parse_args(argv):
    """The command line, checked: (args, backends, labels, variants, pairs); a bad one exits 2."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="two shapes only (a smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd", "serve"), default="fwd",
                    help="time the forward (O from Q, K, V), the backward (dQ, dK, dV from dO), or Part VI's "
                    "serving problems (GQA, decode, varlen, paged: GB/s and %% of a device copy)")
    ap.add_argument("--grid", choices=("ladder", "part4", "part7", "series", "bwd", "refactor", "serve")
                    + SERVE_GRIDS + BWD_SERVING_GRIDS, default=None,
                    help="the ladder's benchmark grid (the forward's default), Part IV's target shapes, "
                    "Part III's series, Part V's backward shapes (the backward's default), or a refactor's "
                    "old-against-new shapes; --pass bwd also " + ", ".join(BWD_SERVING_GRIDS) + " (Part VI's "
                    "backward: GQA, a seeded varlen batch); --pass serve: " + ", ".join(SERVE_GRIDS)
                    + " or serve (the first four, its default; decode-sizes: three small batches at "
                    "caches of 1k-128k keys, issue 26's figure)")
    ap.add_argument("--flush", choices=tuple(FLUSH_TEXT), default="read",
                    help="how the L2 is emptied before each repetition (the ladder's --flush): read "
                         "(a buffer of 2x L2 summed, the L2 left clean), write (it zeroed, the L2 left "
                         "dirty: the method before 2026-12-02), none")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved timing rounds per shape (alternately in order and reversed); more "
                    "rounds narrow a ratio between two candidates whose kernels are the same")
    ap.add_argument("--head-dim", type=int, choices=(64, 128), default=128,
                    help="--pass serve: the head dimension of the serving grids (their own is 128)")
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
    backward, serve = args.pass_ == "bwd", args.pass_ == "serve"
    if args.dtype is None:
        args.dtype = "bf16" if serve else "fp16"
    if args.grid is None:
        args.grid = "bwd" if backward else "serve" if serve else "ladder"
    if serve != (args.grid in ("serve",) + SERVE_GRIDS):
        ap.error(f"--grid {args.grid} " + ("is not one of --pass serve's: " + ", ".join(("serve",) + SERVE_GRIDS)
                                          if serve else "belongs to --pass serve"))
    if args.grid in BWD_SERVING_GRIDS and not backward:
        ap.error(f"--grid {args.grid} belongs to --pass bwd")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.varlen_count < 1 or args.varlen_max < 1:
        ap.error("--varlen-count and --varlen-max must be positive")
    if args.backends is None:
        args.backends = ",".join(BACKWARD_BACKENDS if backward else SERVE_BACKENDS if serve
                                 else [b for b in BACKEND_NAMES if b != "fa4-deterministic"])
    backends = [x for x in args.backends.split(",") if x]
    for b in backends:
        if b not in BACKEND_NAMES:
            ap.error(f"--backends: unknown '{b}' (known: {', '.join(BACKEND_NAMES)})")
    if "fa4-deterministic" in backends and (not backward or args.grid in BWD_SERVING_GRIDS):
        ap.error("--backends fa4-deterministic: a dense backward's peer (--pass bwd --grid bwd or part7)")
    labels = parse_ladder_libs(args.ladder_lib)
    variants = [parse_variant(x, labels) for x in args.ladder_variants.split(",") if x]
    pairs = parse_pairs(args.ladder_pairs, labels)
    for old, new in pairs:
        variants += [x for x in (old, new) if x not in variants]
    if variants and not labels:
        ap.error("--ladder-variants and --ladder-pairs need --ladder-lib")
    return args, backends, labels, variants, pairs


class ResultsFile:
    """The JSON file of a run, rewritten after every shape (a run cut short keeps what it timed);
    `gpu` is set once the GPU's provenance is read."""

    def __init__(self, args, argv, pairs, libs, fa4, fa4_version):
        self.args, self.argv, self.pairs, self.libs = args, argv, pairs, libs
        self.fa4, self.fa4_version, self.gpu = fa4, fa4_version, None

    def write(self, rows, final, method_prefix=""):
        args = self.args
        backward, serve = args.pass_ == "bwd", args.pass_ == "serve"
        provenance = {
            "gpu": self.gpu,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            **tree_provenance(),
            "command_line": " ".join(["scripts/peers.py"] + (self.argv if self.argv is not None else sys.argv[1:])),
            "fa4": ({"version": self.fa4_version} if self.fa4 is not None else {"skipped": self.fa4_version}),
            "ladder_libs": self.libs.paths if self.libs else {},
            # LADDER_LIB_COMMITS="old=349da4a,new=..." (scripts/round.sh sets it): each library's commit
            "ladder_lib_commits": dict(x.split("=", 1) for x in
                                       os.environ.get("LADDER_LIB_COMMITS", "").split(",") if "=" in x),
            "pass": args.pass_,
            "dtype": args.dtype,
            "method": method_prefix
                      + ("backward: the forward run once untimed, the timed call autograd's backward of its output "
                         "(dQ, dK, dV from dO), the ladder's from the same O and log-sum-exp; " if backward else "")
                      + "each call captured in a CUDA graph (else eager, per row's timing_method); CUDA events "
                      f"around one replay per repetition, L2 flushed between ({FLUSH_TEXT[args.flush]}), {args.rounds} interleaved "
                      "rounds (alternating direction) of >=5 reps / 100 ms after >=25 ms warm-up; median of all samples"}
        result = {"schema": "attention-ladder/peers/1", "pass": args.pass_, "provenance": provenance,
                  "complete": final, "rows": rows}
        if serve or args.grid in BWD_SERVING_GRIDS:
            result["grid"] = args.grid
        if serve and args.grid in ("serve", "varlen"):
            result["varlen"] = {"seed": args.seed, "count": args.varlen_count, "max": args.varlen_max}
        if args.grid == "bwd-varlen":
            result["varlen"] = {"seed": args.seed, "count": BWD_VARLEN_COUNT, "max": BWD_VARLEN_MAX}
        if self.pairs:
            result["pairs"] = [{"old": row_name(*o), "new": row_name(*nw)} for o, nw in self.pairs]
        with open(args.out + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(args.out + ".tmp", args.out)


def gemm_ceiling(flush, rounds):
    """The matrix-unit ceiling of the day, an fp16 8192^3 product timed the same way (its row)."""
    a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
    c = torch.empty(8192, 8192, dtype=torch.float16, device="cuda")
    fn, method = as_graph(lambda: torch.matmul(a, b, out=c))
    t = time_rounds([fn], flush, rounds=rounds)[0]
    return {"kind": "matmul", "name": "torch-fp16-matmul-8192", "flops": 2 * 8192**3, **t,
            "timing_method": method, "tflops": 2 * 8192**3 / (t["median_ms"] * 1e-3) / 1e12}


class Shape:
    """One problem of the grid: its inputs, and the reference every candidate is checked against
    (PyTorch's cuDNN backend, else its default; for the backward its dQ, dK, dV, and the O and
    log-sum-exp the ladder's backward takes)."""

    def __init__(self, shape, dtype, backward):
        self.bsz, self.heads, self.n, self.d, self.causal = shape
        self.backward = backward
        self.q, self.k, self.v = (torch.randn(self.bsz, self.heads, self.n, self.d, dtype=dtype, device="cuda")
                                  for _ in range(3))
        self.flops = (4 * self.bsz * self.heads * self.n * self.n * self.d / (2 if self.causal else 1)
                      * (2.5 if backward else 1))
        self.d_o = self.stream = self.o_fwd = self.lse = None
        if backward:
            self.d_o = torch.randn(self.bsz, self.heads, self.n, self.d, dtype=dtype, device="cuda")
            self.stream = torch.cuda.Stream()  # every backward's forward, and so its backward, runs here
        for name in ("sdpa-cudnn", "sdpa-default"):
            try:
                self.ref_name, self.ref = name, self.sdpa(self.q, self.k, self.v, name)
                if backward:
                    self.o_fwd = self.ref.contiguous()
                    call, box = autograd_backward(lambda *x, name=name: self.sdpa(*x, name), (self.q, self.k, self.v),
                                                  self.d_o, self.stream)
                    call()
                    torch.cuda.synchronize()
                    self.ref = tuple(g.clone() for g in box["grads"])
                break
            except Exception:
                if name == "sdpa-default":
                    raise
        if backward:
            self.lse = reference_lse(self.q, self.k, self.causal)

    def sdpa(self, q, k, v, name):
        """PyTorch's SDPA under backend `name` ("sdpa-default": PyTorch's own choice)."""
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if name == "sdpa-default":
            return sdpa(q, k, v, is_causal=self.causal)
        with sdpa_kernel([BACKENDS[name]]):
            return sdpa(q, k, v, is_causal=self.causal)

    def text(self, dtype):
        return (f"B={self.bsz} H={self.heads} N={self.n} D={self.d} causal={self.causal} {dtype}"
                + (" backward: " if self.backward else ": "))


def candidates(sh, args, backends, fa4, libs, variants):
    """(name, make) per candidate; make() -> (callable, function returning its O as [B, H, N, D], or
    its dQ, dK, dV). Part VI's backward shapes list their own (peers_bwd.py)."""
    if isinstance(sh, ServingBackwardShape):
        return sh.candidates(backends, fa4, load_fa4_varlen() if fa4 is not None else None, libs, variants,
                             args.dtype == "bf16")
    out = []
    for name in [b for b in backends if b in BACKENDS]:
        def make(name=name):
            box = {}
            if sh.backward:
                call, box = autograd_backward(lambda *x: sh.sdpa(*x, name), (sh.q, sh.k, sh.v), sh.d_o, sh.stream)
                return call, lambda: box["grads"]

            def call():
                box["out"] = sh.sdpa(sh.q, sh.k, sh.v, name)
            return call, lambda: box["out"]
        out.append((name, make))
    for name in [b for b in backends if b in FA4_BACKENDS] if fa4 is not None else []:
        def make_fa4(deterministic=name == "fa4-deterministic"):
            if sh.backward:  # FA4 on [B, N, H, D]: its inputs, dO and gradients transposed
                qt, kt, vt, d_ot = (x.transpose(1, 2).contiguous() for x in (sh.q, sh.k, sh.v, sh.d_o))
                extra = {"deterministic": True} if deterministic else {}

                def forward(q_, k_, v_):
                    res = fa4(q_, k_, v_, causal=sh.causal, **extra)
                    return res[0] if isinstance(res, (tuple, list)) else res
                call, box = autograd_backward(forward, (qt, kt, vt), d_ot, sh.stream)
                return call, lambda: tuple(g.transpose(1, 2) for g in box["grads"])
            call, box = fa4_call(fa4, sh.q, sh.k, sh.v, sh.causal)
            return call, lambda: box["out"].transpose(1, 2)
        out.append((name, make_fa4))
    bf16 = args.dtype == "bf16"
    for label, vid in variants:
        def make_ladder(label=label, vid=vid):
            if sh.backward:
                call, grads = ladder_backward_call(libs, label, vid, sh.q, sh.k, sh.v, sh.o_fwd, sh.d_o, sh.lse,
                                                   sh.causal, bf16)
                return call, lambda: grads
            call, o = ladder_call(libs, label, vid, sh.q, sh.k, sh.v, sh.causal, bf16)
            return call, lambda: o
        out.append((row_name(label, vid), make_ladder))
    return out


def time_shape(sh, args, backends, fa4, libs, variants, flush):
    """Every candidate on one shape: run once, checked against the reference, captured, then all
    timed in interleaved rounds; the rows, printed as they come."""
    base = {"kind": "attention", "pass": args.pass_, "batch": sh.bsz, "heads": sh.heads, "seqlen": sh.n,
            "head_dim": sh.d, "causal": sh.causal, "dtype": args.dtype, "flops": sh.flops,
            **(sh.row_fields() if isinstance(sh, ServingBackwardShape) else {})}
    rows, fns = [], []
    keep = []  # a graph replays into its outputs by address: they must outlive its timing
    for name, make in candidates(sh, args, backends, fa4, libs, variants):
        row = {**base, "name": name}
        try:
            call, output = make()
            keep.append(call)
            call()  # a peer that refuses the shape raises here; FA4 compiles here
            torch.cuda.synchronize()
            if name != sh.ref_name:
                row["reference"] = sh.ref_name
                (gradients_check if sh.backward else output_check)(row, output(), sh.ref, args.dtype)
            fn, row["timing_method"] = as_graph(call, sh.stream) if sh.backward else as_graph(call)
            fns.append(fn)
        except Exception as e:  # refused or failed: say why
            row["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        rows.append(row)
    timings = iter(time_rounds(fns, flush, rounds=args.rounds)) if fns else iter(())
    for row in rows:
        if "error" not in row:
            t = next(timings)
            row.update(t, tflops=sh.flops / (t["median_ms"] * 1e-3) / 1e12)
        check = (f", max|Δ| vs {row['reference']} {row['max_abs_diff']:.2e} {row['output_check']}"
                 if "output_check" in row else "")
        print(f"{row['name']:38s} " + sh.text(args.dtype)
              + (f"{row['tflops']:.1f} TFLOP/s ({row['timing_method']}){check}" if "tflops" in row
                 else row["error"]), flush=True)
    return rows


def report_failures(failed, dtype):
    for row in failed:
        print(f"FAIL: {row['name']} B={row['batch']} H={row['heads']} N={row['seqlen']} D={row['head_dim']} "
              f"causal={row['causal']}" + (f" Hkv={row['kv_heads']}" if "kv_heads" in row else "")
              + (f" varlen({len(row['q_lens'])} seqs)" if "q_lens" in row else "") + (f" ({row['worst_gradient']} the worst)" if "worst_gradient" in row else "")
              + f": max|Δ| {row['max_abs_diff']:.3g} vs {row['reference']} "
              f"({100 * row['rel_diff']:.1f}% of max|ref|, tolerance {100 * OUTPUT_TOLERANCE[dtype]:.0f}%)",
              file=sys.stderr)


def problems(args, dtype):
    """The grid's problems, each built (its inputs and reference) when the loop reaches it."""
    backward = args.pass_ == "bwd"
    if args.grid in BWD_SERVING_GRIDS:
        for s in peers_bwd.bwd_serving_shapes(args.grid, args.quick, args.seed):
            yield ServingBackwardShape(s, dtype, autograd_backward)
    else:
        for shape in grids(args.quick, args.grid, backward):
            yield Shape(shape, dtype, backward)


def main(argv=None):
    args, backends, labels, variants, pairs = parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("peers.py: needs PyTorch with a CUDA GPU (torch " + ("not installed" if torch is None else
              "finds no GPU") + ")", file=sys.stderr)
        return 3
    libs = LadderLibs(args.ladder_lib) if labels else None
    if args.pass_ == "serve" and libs:
        for label in labels:  # a library from before Part VI: its rows say so (call_serving raises)
            if libs.serving_fns.get(label) is None:
                print(f"{libs.paths[label]}: no ladder_attention_serving (built before Part VI): its rows are skipped",
                      flush=True)
    wants_fa4 = any(b in FA4_BACKENDS for b in backends)
    fa4, fa4_version = load_fa4() if wants_fa4 else (None, "not asked for")
    if wants_fa4 and fa4 is None:
        print(f"fa4: skipped, {fa4_version}", flush=True)
    torch.manual_seed(args.seed)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = L2Flush(l2, args.flush)
    out = ResultsFile(args, argv, pairs, libs, fa4, fa4_version)
    if args.pass_ == "serve":
        out.gpu = gpu_provenance()
        return serve_main(args, argv, backends, libs, variants, fa4, fa4_version, flush, out.gpu, out.write)

    rows = [gemm_ceiling(flush, args.rounds)]  # before the attention shapes, its 400 MB freed after
    out.gpu = gpu_provenance()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    failed = []
    for sh in problems(args, dtype):
        shape_rows = time_shape(sh, args, backends, fa4, libs, variants, flush)
        rows += shape_rows
        failed += [r for r in shape_rows if r.get("output_check") == "FAIL"]
        out.write(rows, False)
    out.write(rows, True)
    report_failures(failed, args.dtype)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
