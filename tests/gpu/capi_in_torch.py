#!/usr/bin/env python3
"""libladder_capi.so inside a PyTorch process, loaded the way scripts/peers.py loads it: torch is
imported first (its own cuDNN, cuDNN frontend, CUDA runtime and CCCL are loaded), the library is
opened with ctypes, PyTorch's cuDNN SDPA runs, then the ladder's cuDNN peer (99/cudnn,
99/cudnn_lse) and a step kernel run on PyTorch's tensors, on PyTorch's stream, eagerly and replayed
from a CUDA graph (peers.py's as_graph). Each output is checked against SDPA in fp32:
its error may be at most twice that of PyTorch's own fp16/bf16 SDPA, plus one unit in the last
place, and no NaN (O is poisoned with NaN before each call). Also B=1 H=70000 N=64 D=64 for the
variants that run it (a refusal, cuDNN's included, is printed as a skip with its reason).

The backward variants (--backward-variants, default 98/cudnn) through ladder_attention_backward
likewise: from Q, K, V, dO, PyTorch's O and the log-sum-exp peers.py computes, dQ, dK and dV
(poisoned with NaN) are checked against autograd's fp32 SDPA backward, each at most twice the error
of PyTorch's own fp16/bf16 backward plus one unit in the last place of the largest gradient, on
ragged shapes (N = 1, 77, 1000), eagerly and replayed from a CUDA graph.

The backward's Part VI entry point, ladder_attention_backward_serving (--backward-serving-variants,
default the main variants of steps 37 and 38), on one GQA problem (B=2 H=8 Hkv=2 N=1000 D=128) and
one varlen batch (lengths 1, 17, 127, 128, 129, 1000, H=8 Hkv=2, D=128), causal and not, through
peers_bwd's call: dQ, dK, dV against autograd's fp32 SDPA (enable_gqa; each sequence alone) with the
backward's tolerance, eagerly and from a CUDA graph; a variant this build lacks, or one that does not
serve the shape, is a skip.

Part VI's entry point, ladder_attention_serving (--serving-variants, default the cuDNN peer and the
main variants of steps 26-29), on one GQA decode shape (B=3 H=8 Hkv=2, 1 and 7 queries against
4097 keys, causal aligned to the end, D=128) and one varlen batch (lengths 1, 17, 127, 128, 129,
1000 packed with cu_seqlens, H=8 Hkv=2, causal and not, D=128), through peers.ladder_serving_call,
checked against PyTorch's SDPA in fp32 (enable_gqa; the end-aligned mask given explicitly; the
varlen batch one sequence at a time) with the same tolerance. A variant this build lacks, or one
that does not serve the shape, is printed as a skip with its reason.

    python3 tests/gpu/capi_in_torch.py --lib build/gpu/lib/libladder_capi.so

Exit 0: passed; 1: failed; 77: skipped (torch not importable, or no GPU). The checks run in a
child process: if it dies on a signal (the SIGSEGV of issue 13), this prints the child's Python
traceback (faulthandler), which libcudnn*/libcudart*/libnvrtc* files the loader mapped
(LD_DEBUG=libs) and, where gdb is installed, a native backtrace.
"""
import argparse
import importlib.util
import os
import pathlib
import shutil
import signal
import subprocess
import sys

SKIP = 77
ROOT = pathlib.Path(__file__).resolve().parents[2]
STEP_VARIANT = "06/h200"  # a lesson that runs on every GPU the cuDNN rows run on (sm_80+)


def load_peers():
    """scripts/peers.py as a module: its LadderLibraries/ladder_call/as_graph are what is tested."""
    spec = importlib.util.spec_from_file_location("peers", ROOT / "scripts" / "peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_backward(torch, peers, f, variants, failures):
    """The backward variants on ragged shapes; returns how many checks ran (failures appended)."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    shapes = [(2, 3, 1000, 64, False), (2, 3, 1000, 64, True), (1, 2, 77, 128, True), (1, 1, 1, 64, False),
              (1, 1, 1, 128, True)]
    ran = 0
    for dtype in (torch.float16, torch.bfloat16):
        ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
        for (b, h, n, d, causal) in shapes:
            q, k, v, d_o = (torch.randn(b, h, n, d, dtype=dtype, device="cuda") for _ in range(4))

            def grads(inputs, grad):
                leaves = [x.detach().clone().requires_grad_() for x in inputs]
                return torch.autograd.grad(sdpa(*leaves, is_causal=causal), leaves, grad)
            ref = grads([x.float() for x in (q, k, v)], d_o.float())
            low = grads([q, k, v], d_o)
            torch_err = [float((lo.float() - r).abs().max()) for lo, r in zip(low, ref)]
            floor = ulp * max(float(r.abs().max()) for r in ref)
            o = sdpa(q, k, v, is_causal=causal)
            lse = peers.reference_lse(q, k, causal)
            for variant in variants:
                what = "%s backward B=%d H=%d N=%d D=%d %s %s" % (variant, b, h, n, d,
                                                                  "causal" if causal else "non-causal",
                                                                  str(dtype).split(".")[-1])
                call, out = peers.ladder_backward_call(f, "", variant, q, k, v, o, d_o, lse, causal,
                                                       dtype == torch.bfloat16)
                for g in out:
                    g.fill_(float("nan"))
                try:
                    call()
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    message = str(e)
                    refusal = ("does not run" in message or "cuDNN has no engine" in message
                               or (variant.startswith(("98/", "99/")) and "no attention variant" in message))
                    print(("SKIP  " if refusal else "FAIL  ") + what + ": " + message[:400], flush=True)
                    if not refusal:
                        failures.append(what)
                    continue
                for how in ("eager", "graph"):
                    if how == "graph":
                        for g in out:
                            g.fill_(float("nan"))
                        replay, how = peers.as_graph(call)
                        replay()
                        torch.cuda.synchronize()
                    for name, g, r, te in zip(("dQ", "dK", "dV"), out, ref, torch_err):
                        finite = bool(torch.isfinite(g).all())
                        err = float((g.float() - r).abs().max()) if finite else float("nan")
                        tol = 2 * te + floor
                        ok = finite and err <= tol
                        ran += 1
                        print("%s  %s (%s): max|%s - fp32| = %.3g, tolerance %.3g (2 x PyTorch's %.3g + 1 ulp)"
                              % ("ok  " if ok else "FAIL", what, how, name, err, tol, te), flush=True)
                        if not ok:
                            failures.append("%s %s %s" % (what, name, how))
    return ran


def check_backward_serving(torch, peers, f, variants, failures):
    """ladder_attention_backward_serving on a GQA problem and a varlen batch; returns how many checks ran."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    bwd = peers.peers_bwd
    heads, kv_heads, d, ran = 8, 2, 128, 0

    def grads(q, k, v, d_o, causal):  # [1 or B, H(kv), n, D]: O and autograd's dQ, dK, dV
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        out = sdpa(*leaves, is_causal=causal, enable_gqa=True)
        return out.detach(), torch.autograd.grad(out, leaves, d_o)

    for dtype in (torch.float16, torch.bfloat16):
        ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
        lens = [1, 17, 127, 128, 129, 1000]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        for causal in (False, True):
            for kind in ("gqa", "varlen"):
                if kind == "gqa":
                    s = peers.serve_shape("gqa", 2, heads, kv_heads, 1000, 1000, d, causal)
                    q, d_o = (torch.randn(2, heads, 1000, d, dtype=dtype, device="cuda") for _ in range(2))
                    k, v = (torch.randn(2, kv_heads, 1000, d, dtype=dtype, device="cuda") for _ in range(2))
                    o, low = grads(q, k, v, d_o, causal)
                    ref = grads(*(x.float() for x in (q, k, v, d_o)), causal)[1]
                    lse, cu_t = bwd.reference_lse(q, k, causal), None
                else:
                    s = peers.serve_shape("varlen", len(lens), heads, kv_heads, max(lens), max(lens), d, causal, lens)
                    q, d_o = (torch.randn(cu[-1], heads, d, dtype=dtype, device="cuda") for _ in range(2))
                    k, v = (torch.randn(cu[-1], kv_heads, d, dtype=dtype, device="cuda") for _ in range(2))
                    o = torch.empty_like(q)
                    lse = torch.empty(heads, cu[-1], dtype=torch.float32, device="cuda")
                    low, ref = [[torch.empty_like(x, dtype=t) for x in (q, k, v)] for t in (dtype, torch.float32)]
                    for lo, hi in zip(cu[:-1], cu[1:]):
                        one = [x[lo:hi].transpose(0, 1)[None].contiguous() for x in (q, k, v, d_o)]
                        o_b, low_b = grads(*one, causal)
                        ref_b = grads(*(x.float() for x in one), causal)[1]
                        o[lo:hi] = o_b[0].transpose(0, 1)
                        lse[:, lo:hi] = bwd.reference_lse(one[0], one[1], causal)[0]
                        for dst, src in zip(low + ref, list(low_b) + list(ref_b)):
                            dst[lo:hi] = src[0].transpose(0, 1)
                    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
                torch_err = [float((lo_.float() - r).abs().max()) for lo_, r in zip(low, ref)]
                floor = ulp * max(float(r.abs().max()) for r in ref)
                for variant in variants:
                    what = "%s backward %s" % (variant, peers.describe(s, str(dtype).split(".")[-1]))
                    call, out = bwd.ladder_backward_serving_call(f, "", variant, s, q, k, v, o, d_o, lse,
                                                                 dtype == torch.bfloat16, cu_t)
                    for how in ("eager", "graph"):
                        for g in out:
                            g.fill_(float("nan"))
                        try:
                            if how == "eager":
                                call()
                            else:
                                replay, how = peers.as_graph(call)
                                replay()
                            torch.cuda.synchronize()
                        except RuntimeError as e:
                            message = str(e)
                            skip = any(x in message for x in ("does not run", "no backward variant"))
                            print(("SKIP  " if skip else "FAIL  ") + what + ": " + message[:400], flush=True)
                            if not skip:
                                failures.append(what)
                            break
                        for name, g, r, te in zip(("dQ", "dK", "dV"), out, ref, torch_err):
                            finite = bool(torch.isfinite(g).all())
                            err = float((g.float() - r).abs().max()) if finite else float("nan")
                            tol = 2 * te + floor
                            ok = finite and err <= tol
                            ran += 1
                            print("%s  %s (%s): max|%s - fp32| = %.3g, tolerance %.3g (2 x PyTorch's %.3g + 1 ulp)"
                                  % ("ok  " if ok else "FAIL", what, how, name, err, tol, te), flush=True)
                            if not ok:
                                failures.append("%s %s %s" % (what, name, how))
    return ran


def check_serving(torch, peers, f, variants, failures):
    """ladder_attention_serving on a GQA decode and a varlen batch; returns how many checks ran."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    heads, kv_heads, d = 8, 2, 128
    ran = 0

    def attend(q, k, v, causal):  # [1 or B, H, Nq, D] against [., Hkv, Nk, D]; causal aligned to the end
        nq, nk = q.shape[2], k.shape[2]
        mask = None
        if causal:
            mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq)
        return sdpa(q, k, v, attn_mask=mask, enable_gqa=True)

    for dtype in (torch.float16, torch.bfloat16):
        ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
        problems = []
        for nq, causal in ((1, False), (7, True)):  # decode: 3 sequences of 4097 keys
            s = peers.serve_shape("decode", 3, heads, kv_heads, nq, 4097, d, causal)
            q = torch.randn(3, heads, nq, d, dtype=dtype, device="cuda")
            k, v = (torch.randn(3, kv_heads, 4097, d, dtype=dtype, device="cuda") for _ in range(2))
            ref = attend(q.float(), k.float(), v.float(), causal)
            low = attend(q, k, v, causal)
            problems.append((s, q, k, v, {}, ref, low))
        lens = [1, 17, 127, 128, 129, 1000]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        for causal in (False, True):
            s = peers.serve_shape("varlen", len(lens), heads, kv_heads, max(lens), max(lens), d, causal, lens)
            q = torch.randn(cu[-1], heads, d, dtype=dtype, device="cuda")
            k, v = (torch.randn(cu[-1], kv_heads, d, dtype=dtype, device="cuda") for _ in range(2))
            per = lambda x, b: x[cu[b]:cu[b + 1]].transpose(0, 1)[None]  # noqa: E731  [1, H, n, D]
            ref = torch.cat([attend(*(per(x, b).float() for x in (q, k, v)), causal)[0].transpose(0, 1)
                             for b in range(len(lens))])
            low = torch.cat([attend(*(per(x, b) for x in (q, k, v)), causal)[0].transpose(0, 1) for b in range(len(lens))])
            cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
            problems.append((s, q, k, v, {"cu_q": cu_t, "cu_k": cu_t}, ref, low))
        for s, q, k, v, extra, ref, low in problems:
            torch_err = float((low.float() - ref).abs().max())
            for variant in variants:
                what = "%s %s" % (variant, peers.describe(s, str(dtype).split(".")[-1]))
                call, o = peers.ladder_serving_call(f, "", variant, s, q, k, v, dtype == torch.bfloat16, **extra)
                o.fill_(float("nan"))
                try:
                    call()
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    message = str(e)
                    skip = any(x in message for x in ("does not run", "cuDNN has no engine", "no attention variant"))
                    print(("SKIP  " if skip else "FAIL  ") + what + ": " + message[:400], flush=True)
                    if not skip:
                        failures.append(what)
                    continue
                for how in ("eager", "graph"):
                    if how == "graph":
                        o.fill_(float("nan"))
                        replay, how = peers.as_graph(call)
                        replay()
                        torch.cuda.synchronize()
                    finite = bool(torch.isfinite(o).all())
                    err = float((o.float() - ref).abs().max()) if finite else float("nan")
                    tol = 2 * torch_err + ulp * float(ref.abs().max())
                    ok = finite and err <= tol
                    ran += 1
                    print("%s  %s (%s): max|O - SDPA fp32| = %.3g, tolerance %.3g (2 x PyTorch's %.3g + 1 ulp)"
                          % ("ok  " if ok else "FAIL", what, how, err, tol, torch_err), flush=True)
                    if not ok:
                        failures.append(what + " " + how)
    return ran


def child(lib, variants, backward_variants, serving_variants, backward_serving_variants):
    import torch  # first, as in peers.py
    peers = load_peers()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa = torch.nn.functional.scaled_dot_product_attention
    f = peers.LadderLibs([lib])  # ctypes right after torch, before any CUDA work, as peers.py
    print("loaded %s" % lib, flush=True)

    torch.manual_seed(0)
    a = torch.randn(1024, 1024, dtype=torch.float16, device="cuda")
    torch.matmul(a, a)  # peers.py times PyTorch's cuBLAS GEMM next
    q, k, v = (torch.randn(2, 3, 256, 64, dtype=torch.float16, device="cuda") for _ in range(3))
    try:  # PyTorch's cuDNN first: its handle and graphs exist before ours, as in peers.py
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            sdpa(q, k, v)
        torch.cuda.synchronize()
        print("PyTorch's cuDNN SDPA ran first (cuDNN %s)" % torch.backends.cudnn.version(), flush=True)
    except Exception as e:  # noqa: BLE001 (a GPU without cuDNN attention: the rest still runs)
        print("note: PyTorch's cuDNN SDPA did not run (%s)" % str(e).splitlines()[0], flush=True)

    shapes = [(2, 3, 1000, 64, False), (2, 3, 1000, 64, True), (1, 2, 77, 128, True),
              (1, 70000, 64, 64, False), (1, 70000, 64, 64, True)]
    failures, ran = [], 0
    for dtype in (torch.float16, torch.bfloat16):
        ulp = 2.0 ** (-10 if dtype == torch.float16 else -7)
        for (b, h, n, d, causal) in shapes:
            if h > 65535 and dtype == torch.bfloat16:
                continue  # one dtype is enough for the wide case
            q, k, v = (torch.randn(b, h, n, d, dtype=dtype, device="cuda") for _ in range(3))
            # PyTorch's own kernels put the heads on a grid dimension of at most 65535 ("invalid
            # argument" at H = 70000): its reference and its error are computed in chunks of heads.
            chunks = [slice(i, min(i + 32768, h)) for i in range(0, h, 32768)]
            ref = torch.cat([sdpa(q[:, c].float(), k[:, c].float(), v[:, c].float(), is_causal=causal)
                             for c in chunks], dim=1)
            torch_err = max(float((sdpa(q[:, c], k[:, c], v[:, c], is_causal=causal).float() - ref[:, c]).abs().max())
                            for c in chunks)
            for variant in variants:
                what = "%s B=%d H=%d N=%d D=%d %s %s" % (variant, b, h, n, d,
                                                         "causal" if causal else "non-causal",
                                                         str(dtype).split(".")[-1])
                call, o = peers.ladder_call(f, "", variant, q, k, v, causal, dtype == torch.bfloat16)
                o.fill_(float("nan"))
                try:
                    call()  # the first call (where the crash was)
                    torch.cuda.synchronize()
                except RuntimeError as e:  # the variant refused (its reason), or failed
                    message = str(e)
                    refusal = ("does not run" in message or "cuDNN has no engine" in message
                               or (variant.startswith(("98/", "99/")) and "no attention variant" in message))
                    print(("SKIP  " if refusal else "FAIL  ") + what + ": " + message[:400], flush=True)
                    if not refusal:
                        failures.append(what)
                    continue
                for how in ("eager", "graph"):
                    if how == "graph":
                        o.fill_(float("nan"))
                        replay, method = peers.as_graph(call)
                        replay()
                        torch.cuda.synchronize()
                        how = method
                    finite = bool(torch.isfinite(o).all())
                    err = float((o.float() - ref).abs().max()) if finite else float("nan")
                    tol = 2 * torch_err + ulp * float(ref.abs().max())
                    ok = finite and err <= tol
                    ran += 1
                    print("%s  %s (%s): max|O - SDPA fp32| = %.3g, tolerance %.3g (2 x PyTorch's %.3g + 1 ulp)"
                          % ("ok  " if ok else "FAIL", what, how, err, tol, torch_err), flush=True)
                    if not ok:
                        failures.append(what + " " + how)
            del q, k, v, ref
    if backward_variants:
        ran += check_backward(torch, peers, f, backward_variants, failures)
    if serving_variants:
        ran += check_serving(torch, peers, f, serving_variants, failures)
    if backward_serving_variants:
        ran += check_backward_serving(torch, peers, f, backward_serving_variants, failures)
    if failures:
        print("FAILED: %d of the checks: %s" % (len(failures), "; ".join(failures)))
        return 1
    if ran == 0:
        print("FAILED: nothing ran (every variant refused every shape)")
        return 1
    print("passed: %d checks" % ran)
    return 0


def diagnose(cmd, env):
    """After a crash: what the loader mapped, and a native backtrace if gdb is here."""
    print("\n---- diagnosis: the libraries the dynamic loader mapped (LD_DEBUG=libs) ----", flush=True)
    run = subprocess.run(cmd, env=dict(env, LD_DEBUG="libs"), capture_output=True, text=True)
    seen = set()
    for line in run.stderr.splitlines():
        if "calling init:" in line and any(x in line for x in ("cudnn", "cudart", "nvrtc", "cublas", "ladder", "libcuda")):
            path = line.split("calling init:")[-1].strip()
            if path not in seen:
                seen.add(path)
                print("  " + path)
    if shutil.which("gdb"):
        print("\n---- diagnosis: native backtrace (gdb -batch) ----", flush=True)
        gdb = subprocess.run(["gdb", "-batch", "-ex", "run", "-ex", "bt 40", "-ex", "info sharedlibrary"]
                             + ["--args"] + cmd, env=env, capture_output=True, text=True)
        keep = [l for l in gdb.stdout.splitlines() if l.startswith("#") or "cudnn" in l or "ladder" in l
                or "signal" in l.lower()]
        print("\n".join(keep[:120]))
    else:
        print("(gdb is not installed: no native backtrace; `apt-get install gdb` gives one)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="libladder_capi.so")
    ap.add_argument("--variants", default="99/cudnn,99/cudnn_lse," + STEP_VARIANT)
    ap.add_argument("--backward-variants", default="98/cudnn", help="backward variants (empty: none)")
    ap.add_argument("--serving-variants", default="99/cudnn,26/group_order,28/split_kv,29/split_kv",
                    help="variants for ladder_attention_serving (empty: none); those this build lacks are skipped")
    ap.add_argument("--backward-serving-variants", default="37/group_in_cta,38/packed",
                    help="backward variants for ladder_attention_backward_serving (empty: none); those this "
                    "build lacks are skipped")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    variants = [x for x in args.variants.split(",") if x]
    backward_variants = [x for x in args.backward_variants.split(",") if x]
    serving_variants = [x for x in args.serving_variants.split(",") if x]
    backward_serving_variants = [x for x in args.backward_serving_variants.split(",") if x]
    if args.child:
        return child(args.lib, variants, backward_variants, serving_variants, backward_serving_variants)

    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print("SKIPPED: torch is not importable (%s); this test needs PyTorch with CUDA" % e)
        return SKIP
    if not torch.cuda.is_available():
        print("SKIPPED: torch %s sees no CUDA GPU" % torch.__version__)
        return SKIP
    if not os.path.exists(args.lib):
        print("FAILED: %s does not exist (build the ladder_capi target)" % args.lib)
        return 1
    cmd = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--child",
           "--lib", os.path.abspath(args.lib), "--variants", ",".join(variants),
           "--backward-variants", ",".join(backward_variants), "--serving-variants", ",".join(serving_variants),
           "--backward-serving-variants", ",".join(backward_serving_variants)]
    rc = subprocess.run(cmd).returncode
    if rc < 0:
        print("\nFAILED: the process that loaded %s died on %s" % (args.lib, signal.Signals(-rc).name))
        diagnose(cmd, os.environ)
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
