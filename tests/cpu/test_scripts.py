#!/usr/bin/env python3
"""CPU checks of the round's scripts (no GPU, no PyTorch needed):
  - scripts/round.sh: --help works; a bad stage, dtype, step range or a missing OUT exit 2 before
    anything runs; the fa4 stage without .fa4/ is a no-op that says so, and finds an earlier call's
    install (ROUND_FA4_SITE); bwdpeers without binaries says so
  - scripts/peers.py: --ladder-lib labels and variant ids parse, and the mistakes are refused (one
    file under two labels, a variant of an unknown library); two copies of libladder_capi.so load in
    one process, each with its own registry (given the library's path as argv[1])
  - scripts/peers.py's main loop on a stand-in PyTorch (tests/cpu/fake_torch, numpy): every row
    checked against the cuDNN reference, FlashAttention-4's [B, N, H, D] layout (a wrong one FAILs
    and exits 1), a refusing backend's row, pairs of two labelled libraries in the JSON
  - scripts/peers.py --pass bwd on the stand-in: dQ, dK, dV of PyTorch's backends, FlashAttention-4
    and the ladder's backward (from the O and log-sum-exp the script gives it) checked against
    cuDNN's, FLOPs 2.5x the forward's; a wrong mask or layout FAILs; the real library's backward
    entry point answers for its own ids only
  - scripts/peers.py --pass bwd --grid bwd-gqa / bwd-varlen: the issue's grids (GQA, a seeded varlen batch
    of 24); on the stand-in, SDPA with enable_gqa, FA4's flash_attn_func / flash_attn_varlen_func
    backward and the ladder's ladder_attention_backward_serving each checked against the reference
    (per sequence for varlen), SDPA's varlen rows untimed and saying why; dK/dV without the group's
    sum and a batch attended as one sequence FAIL; the real library's entry point refuses bad arguments
  - scripts/peers.py --pass serve: the issue's grids (decode, GQA, seeded varlen, paged); on the
    stand-in, SDPA with enable_gqa, FA4's flash_attn_func / varlen / paged calls and the ladder's
    serving call each checked against the fp32 reference (causal aligned to the end), GB/s and % of
    the device copy; a wrong GQA head map or a page walk without the block table FAILs; the real
    library's ladder_attention_serving refuses bad arguments with a message; make_tables.py's
    servecheck table (GB/s and % of copy for decode and paged, TFLOP/s for prefill)
  - scripts/make_tables.py: the crosscheck table with FlashAttention-4's column and ratios, a FAIL
    row shown as FAIL, and the compare table's new/old ratios and its noise mark; the backward's
    crosscheck table (step 98's cuDNN row, the FA2 column)

  - hermetic: every check runs as on a machine without a GPU, PyTorch or FlashAttention-4, whatever
    this one has (on the H200, round.sh found FA4 and ran PyTorch): see NO_GPU below

    python3 tests/cpu/test_scripts.py [build/h200/lib/libladder_capi.so]
"""
import ctypes
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The switch that makes these checks hermetic (NO_GPU): a folder whose torch and flash_attn fail to
# import, first on the path of this process and of every child (an installed PyTorch or FA4 is
# shadowed; the stand-in runs put tests/cpu/fake_torch before it); CUDA_VISIBLE_DEVICES empty, so
# CUDA, here and in the children, sees no GPU; and, for the children (no_gpu_env), an nvidia-smi
# first on PATH that lists none and ROUND_FA4_SITE empty, so that round.sh adds no earlier install
# of FA4 (/tmp/site) to the path.
ABSENT = ROOT / "tests/cpu/fake_torch/absent"
FAKE_TORCH = ROOT / "tests/cpu/fake_torch"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ABSENT))
import make_tables  # noqa: E402
import peers  # noqa: E402
import peers_serve  # noqa: E402

failures = []
NO_GPU = {}  # the children's environment (os.environ and the switch), set by main()


def no_gpu_env(tmp):
    """os.environ with the switch: an nvidia-smi that answers as the real one does where it finds
    no GPU first on PATH, the absent torch and flash_attn alone on PYTHONPATH."""
    bin_dir = tmp / "no-gpu-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "PYTHONPATH": str(ABSENT),
            "CUDA_VISIBLE_DEVICES": "", "ROUND_FA4_SITE": ""}


def stand_in_env(**extra):
    """The switch with the stand-in torch and FA4 (tests/cpu/fake_torch) first on the path."""
    return {**NO_GPU, "PYTHONPATH": f"{FAKE_TORCH}:{ROOT / 'scripts'}:{ABSENT}", **extra}


def test_no_gpu_switch(tmp):
    # The switch itself, so that it cannot quietly stop holding: on a machine without PyTorch these
    # imports would fail anyway, so each must fail with the absent folder's own words.
    for module in ("torch", "flash_attn.cute"):
        r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                           env=NO_GPU, timeout=60)
        check(r.returncode != 0 and "made absent by tests/cpu/fake_torch/absent" in r.stderr,
              f"the switch: import {module} fails, shadowed by tests/cpu/fake_torch/absent")
    check(peers.torch is None, "the switch: peers.py, imported here, finds no torch")
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, env=NO_GPU, timeout=60)
    check(r.returncode != 0 and "GPU 0" not in r.stdout, "the switch: nvidia-smi lists no GPU")
    check(os.environ.get("CUDA_VISIBLE_DEVICES") == "" and NO_GPU.get("CUDA_VISIBLE_DEVICES") == "",
          "the switch: CUDA sees no GPU, here or in a child")


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def refused(fn, *args):
    try:
        fn(*args)
    except SystemExit as e:
        return str(e)
    return None


def round_sh(*args, env=None):
    return subprocess.run(["bash", str(ROOT / "scripts/round.sh"), *args], capture_output=True, text=True,
                          cwd=ROOT, env={**NO_GPU, **(env or {})}, timeout=60)


def test_round_sh(tmp):
    r = round_sh("--help")
    check(r.returncode == 0 and "--stages" in r.stdout and "compare" in r.stdout, "round.sh --help prints the stages")
    for bad, why in ((["--stages", "build,bogus", str(tmp / "o")], "unknown stage"),
                     (["--dtype", "fp32", str(tmp / "o")], "unknown dtype"),
                     (["--steps", "16-x", str(tmp / "o")], "--steps takes"),
                     (["--budget", "ten", str(tmp / "o")], "--budget"),
                     (["--stages", "fa4"], "OUT")):
        r = round_sh(*bad)
        check(r.returncode == 2 and why in r.stderr, f"round.sh {' '.join(bad[:2])}: exit 2 ({why})")
    check(not (tmp / "o").exists(), "round.sh wrote nothing for bad arguments")
    r = round_sh("--stages", "fa4", str(tmp / "fa4"), env={"FA4_DIR": str(tmp / "no-fa4")})
    summary = (tmp / "fa4" / "summary.txt").read_text() if (tmp / "fa4" / "summary.txt").exists() else ""
    check(r.returncode == 0 and "nothing to do" in summary, "round.sh --stages fa4 without .fa4/: a no-op that says so")
    check((tmp / "fa4" / "logs.tgz").exists(), "round.sh packs its logs")
    # An earlier call's install (ROUND_FA4_SITE, /tmp/site on the GPU machine) is found by the next
    # call: a stand-in site whose flash_attn.cute imports, with its version's metadata.
    site = tmp / "fa4-site"
    (site / "flash_attn" / "cute").mkdir(parents=True)
    (site / "flash_attn" / "__init__.py").write_text("")
    (site / "flash_attn" / "cute" / "__init__.py").write_text("")
    (site / "flash_attn_4-0.0.fake.dist-info").mkdir()
    (site / "flash_attn_4-0.0.fake.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flash-attn-4\nVersion: 0.0.fake\n")
    r = round_sh("--stages", "fa4", str(tmp / "fa4-site-out"), env={"FA4_DIR": str(tmp / "no-fa4"), "ROUND_FA4_SITE": str(site)})
    summary = (tmp / "fa4-site-out" / "summary.txt").read_text() if (tmp / "fa4-site-out" / "summary.txt").exists() else ""
    check(r.returncode == 0 and "flash_attn.cute imports (flash-attn-4 0.0.fake)" in summary,
          "round.sh --stages fa4: an earlier install in ROUND_FA4_SITE imports (as /tmp/site on the GPU machine)")
    r = round_sh("--help")
    check("bwdpeers" in r.stdout and "--pass bwd" in r.stdout, "round.sh --help names the bwdpeers stage")
    # bwdpeers on carried stand-in binaries (a `ladder` that only lists, an empty library): peers.py
    # --pass bwd runs once per dtype, and without PyTorch (the switch) exits 3, which the stage reports.
    fake = tmp / "fake-bin"
    fake.mkdir()
    (fake / "ladder").write_text("#!/bin/sh\necho '     98/cudnn   cuDNN backward (peer)  [sm_80+, fp16 and bf16]'\n"
                                 "echo '     24/fa2     FA2 backward (main)  [sm_80+, fp16]'\n"
                                 "echo '     24/other   FA2 backward, other  [sm_80+, fp16]'\n")
    (fake / "ladder").chmod(0o755)
    (fake / "libladder_capi.so").write_bytes(b"not loaded: peers.py stops before")
    r = round_sh("--stages", "bwdpeers", "--bin", str(fake), str(tmp / "bwd"))
    summary = (tmp / "bwd" / "summary.txt").read_text() if (tmp / "bwd" / "summary.txt").exists() else ""
    print(summary)
    check(r.returncode == 1 and "  bwdpeers: rc=3" in summary and "  bwdpeers-bf16: rc=3" in summary
          and "bwdpeers: rc=1" in summary, "round.sh --stages bwdpeers: peers.py --pass bwd per dtype, its exit reported")


def test_peers_args(tmp, capi):
    a, b = tmp / "a.so", tmp / "b.so"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    check(peers.parse_ladder_libs([str(a)]) == {"": str(a)}, "one unlabelled library")
    libs = peers.parse_ladder_libs([f"old={a}", f"new={b}"])
    check(list(libs) == ["old", "new"], "two labelled libraries, in order")
    os.link(a, tmp / "a-link.so")
    check("same file" in (refused(peers.parse_ladder_libs, [f"old={a}", f"new={tmp / 'a-link.so'}"]) or ""),
          "one file under two labels is refused (dlopen would share its registry)")
    check(refused(peers.parse_ladder_libs, [f"old={a}", f"old={b}"]) is not None, "a label given twice is refused")
    check(refused(peers.parse_ladder_libs, [str(a), f"new={b}"]) is not None, "several libraries must all be labelled")
    check(refused(peers.parse_ladder_libs, [f"old={tmp / 'missing.so'}"]) is not None, "a missing file is refused")
    check(peers.parse_variant("20/persistent", {"": "x"}) == ("", "20/persistent"), "an unqualified id, one library")
    check(peers.parse_variant("old:20/persistent_snake", libs) == ("old", "20/persistent_snake"), "a qualified id")
    check(refused(peers.parse_variant, "20/persistent", libs) is not None, "an unqualified id with two libraries is refused")
    check(refused(peers.parse_variant, "mid:20/persistent", libs) is not None, "an unknown label is refused")
    pairs = peers.parse_pairs("old:20/persistent_snake>new:21/snake,old:18/ws>new:18/ws", libs)
    check(pairs == [(("old", "20/persistent_snake"), ("new", "21/snake")), (("old", "18/ws"), ("new", "18/ws"))],
          "pairs parse as (old, new)")
    check(refused(peers.parse_pairs, "old:18/ws", libs) is not None, "a pair without '>' is refused")
    check(peers.row_name("old", "18/ws") == "ladder:old:18/ws" and peers.row_name("", "18/ws") == "ladder:18/ws",
          "row names: ladder:LABEL:ID, and ladder:ID for one library (the crosscheck table's)")
    check([s[:4] for s in peers.grids(False, "part4")][-1] == (4, 16, 8448, 128), "part4 ends with FA3's shape")
    check([s[3] for s in peers.grids(False, "refactor")] == [64, 64, 128, 128]
          and {s[2] for s in peers.grids(False, "refactor", True)} == {4096}
          and len(peers.grids(True, "refactor")) == 1, "refactor: D = 64 and 128, both masks; its own backward shapes")
    check(len(peers.grids(False, "part4")) == 9 and peers.grids(False, "series")[0] == (1, 64, 1024, 128, False),
          "the part4 and series grids")

    if not capi or not os.path.isfile(capi):
        print(f"skip two copies of libladder_capi.so: not built ({capi})")
        return
    try:
        ctypes.CDLL(capi, mode=os.RTLD_LOCAL)
    except OSError as e:  # its CUDA libraries are not on this machine's path
        print(f"skip two copies of libladder_capi.so: it does not load here ({e})")
        return
    copy = tmp / "copy-of-capi.so"
    shutil.copy(capi, copy)
    # Had the two copies shared one registry, the second's static registrars would have thrown
    # "two steps registered as number N" while loading (std::terminate): both load, both answer.
    libs = peers.LadderLibs([f"old={capi}", f"new={copy}"])
    for label in ("old", "new"):
        err = ctypes.create_string_buffer(512)
        rc = libs.call(label, "98/none", 1, 1, 128, 64, 0, 0, None, None, None, None, None, None, err, 512)
        check(rc == 1 and b"no attention variant 98/none" in err.value, f"{label}: an unknown id says so")
        # A registered id with a batch of 0: refused by the shape check, before any CUDA call.
        err = ctypes.create_string_buffer(512)
        rc = libs.call(label, "99/cudnn", 0, 1, 128, 64, 0, 0, None, None, None, None, None, None, err, 512)
        check(rc == 1 and b"must be positive" in err.value, f"{label}: 99/cudnn found in its own registry")
        # The backward's entry point: its own variants only, the same shape check before any CUDA call.
        nulls = [None] * 10
        err = ctypes.create_string_buffer(512)
        rc = libs.call_backward(label, "98/cudnn", 0, 1, 128, 64, 0, 0, *nulls, err, 512)
        check(rc == 1 and b"must be positive" in err.value, f"{label}: backward 98/cudnn found in its own registry")
        err = ctypes.create_string_buffer(512)
        rc = libs.call_backward(label, "99/cudnn", 1, 1, 128, 64, 0, 0, *nulls, err, 512)
        check(rc == 1 and b"no backward variant 99/cudnn" in err.value, f"{label}: a forward id is no backward variant")
        err = ctypes.create_string_buffer(512)
        rc = libs.call(label, "98/cudnn", 1, 1, 128, 64, 0, 0, None, None, None, None, None, None, err, 512)
        check(rc == 1 and b"no attention variant 98/cudnn" in err.value, f"{label}: a backward id is no forward variant")

FAKE_MAIN = """
import sys
import peers
import torch
peers.grids = lambda quick, grid="ladder", backward=False: [(1, 2, 40, 16, False), (1, 2, 40, 16, True)]


class FakeLibs:  # the two labelled libraries, without loading them
    def __init__(self, specs):
        self.paths = peers.parse_ladder_libs(specs)


def fake_call(libs, label, vid, q, k, v, causal, bf16):
    if (label, vid) == ("new", "18/ws"):
        raise RuntimeError("no attention variant 18/ws in this library (see `ladder --list`)")
    o = torch.empty_like(q)

    def call():
        o.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
    return call, o


# A ladder backward from O and the log-sum-exp it is given, as a kernel does (P = exp(S - lse));
# 24/no_mask forgets the causal mask.
def fake_backward_call(libs, label, vid, q, k, v, o, d_o, lse, causal, bf16):
    import numpy as np
    grads = tuple(torch.empty_like(x) for x in (q, k, v))

    def call():
        scale = 1 / np.sqrt(q.shape[-1])
        s = q.a @ np.swapaxes(k.a, -1, -2) * scale
        if causal and vid != "24/no_mask":
            n = s.shape[-1]
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
        p = np.exp(s - lse.a[..., None])
        dp = d_o.a @ np.swapaxes(v.a, -1, -2)
        ds = p * (dp - (d_o.a * o.a).sum(-1, keepdims=True))
        for g, x in zip(grads, (ds @ k.a * scale, np.swapaxes(ds, -1, -2) @ q.a * scale, np.swapaxes(p, -1, -2) @ d_o.a)):
            g.a[...] = x
    return call, grads


peers.LadderLibs, peers.ladder_call, peers.ladder_backward_call = FakeLibs, fake_call, fake_backward_call
sys.exit(peers.main(sys.argv[1:]))
"""


def run_fake_peers(tmp, name, fa4_mode, *extra):
    out = tmp / f"{name}.json"
    env = stand_in_env(FAKE_FA4=fa4_mode, LADDER_LIB_COMMITS="old=349da4a,new=abc")
    r = subprocess.run([sys.executable, "-c", FAKE_MAIN, "--out", str(out), *extra], capture_output=True, text=True,
                       env=env, timeout=120)
    data = json.loads(out.read_text()) if out.exists() else {"rows": []}
    return r, data, {(x["name"], x.get("causal")): x for x in data["rows"]}


def test_peers_main(tmp):
    try:
        import numpy  # noqa: F401  (the stand-in torch computes with it)
    except ImportError:
        print("skip peers.py's main loop on the stand-in torch: numpy is not installed")
        return
    a, b = tmp / "old.so", tmp / "new.so"
    a.write_bytes(b"old")
    b.write_bytes(b"new")
    r, data, rows = run_fake_peers(tmp, "fake-run", "good", "--ladder-lib", f"old={a}", "--ladder-lib", f"new={b}",
                                   "--ladder-pairs", "old:20/persistent_snake>new:21/snake,old:18/ws>new:18/ws")
    print(r.stdout[-1500:], r.stderr[-1500:])
    check(r.returncode == 0 and data.get("complete") is True, "peers.py main loop (stand-in torch): exit 0, file complete")
    fa4 = rows.get(("fa4", True), {})
    check(fa4.get("output_check") == "pass" and fa4.get("reference") == "sdpa-cudnn" and fa4.get("rel_diff", 1) < 1e-5,
          "FA4 on [B, N, H, D] copies, checked against cuDNN's output")
    check(rows.get(("sdpa-flash", False), {}).get("output_check") == "pass", "PyTorch's flash backend checked too")
    check("output_check" not in rows.get(("sdpa-cudnn", False), {"output_check": 1}), "the reference is not checked against itself")
    check(rows.get(("sdpa-efficient", False), {}).get("error") == "No available kernel. Aborting execution.",
          "a backend that refuses: its row says why (first line)")
    check(rows.get(("ladder:new:21/snake", True), {}).get("output_check") == "pass" and "tflops" in rows.get(
        ("ladder:old:20/persistent_snake", True), {}), "both labelled libraries' rows timed and checked")
    check("no attention variant" in rows.get(("ladder:new:18/ws", False), {}).get("error", ""),
          "a variant missing from one library: its row says so")
    check(data.get("pairs") == [{"old": "ladder:old:20/persistent_snake", "new": "ladder:new:21/snake"},
                                {"old": "ladder:old:18/ws", "new": "ladder:new:18/ws"}], "the pairs in the file")
    check(data["provenance"]["fa4"].get("version") and data["provenance"]["ladder_lib_commits"] == {"old": "349da4a", "new": "abc"},
          "provenance: FA4's version, each library's commit")
    (tmp / "fake-compare.json").write_text(json.dumps(data))
    make_tables.DOCS = tmp
    t = make_tables.render("compare fake-compare.json")
    check("| 20/persistent_snake → 21/snake | 1.00×" in t, "the compare table reads the file peers.py wrote")

    r, data, rows = run_fake_peers(tmp, "wrong-fa4", "wrong", "--backends", "sdpa-cudnn,fa4")
    check(r.returncode == 1 and rows.get(("fa4", False), {}).get("output_check") == "FAIL" and "FAIL: fa4" in r.stderr,
          "FA4 called with the wrong layout: FAIL, exit 1")
    check(data.get("complete") is True and ("sdpa-cudnn", False) in rows, "... and the file is still written")
    r, data, rows = run_fake_peers(tmp, "no-fa4", "missing", "--backends", "sdpa-cudnn,fa4")
    check(r.returncode == 0 and not any(n == "fa4" for n, _ in rows) and "not importable" in
          data["provenance"]["fa4"].get("skipped", ""), "without FA4: no rows, the reason in the provenance")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/peers.py"), "--out", str(tmp / "x.json"), "--backends", "fa5"],
                       capture_output=True, text=True, env=NO_GPU, timeout=60)
    check(r.returncode == 2 and "unknown 'fa5'" in r.stderr, "an unknown backend: exit 2")


LSE_CHECK = """
import numpy as np
import peers
import torch
q, k = torch.randn(2, 3, 40, 16), torch.randn(2, 3, 40, 16)
for causal in (False, True):
    s = q.a @ np.swapaxes(k.a, -1, -2) / 4.0
    if causal:
        s = np.where(np.tril(np.ones((40, 40), dtype=bool)), s, -np.inf)
    want = np.log(np.exp(s).sum(-1))
    got = peers.reference_lse(q, k, causal, rows=7).a
    print("ok" if got.shape == (2, 3, 40) and np.allclose(got, want, atol=1e-5) else f"wrong {causal}")
"""


def test_peers_backward(tmp):
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("skip peers.py --pass bwd on the stand-in torch: numpy is not installed")
        return
    check(peers.grids(False, "bwd") == [(4, 8, 8192, 64, False), (4, 8, 8192, 64, True),
                                         (2, 16, 8192, 128, False), (2, 16, 8192, 128, True)],
          "the backward's grid: Part V's four shapes, both masks")
    # The log-sum-exp the ladder's backward gets, in blocks of rows that do not divide N.
    r = subprocess.run([sys.executable, "-c", LSE_CHECK], capture_output=True, text=True, timeout=60,
                       env=stand_in_env())
    check(r.returncode == 0 and r.stdout.split() == ["ok", "ok"],
          "reference_lse: the log-sum-exp of the scaled logits, causal and not, in blocks of 7 rows"
          + (" " + r.stderr[-300:] if r.returncode else ""))
    a = tmp / "lib.so"
    a.write_bytes(b"lib")
    r, data, rows = run_fake_peers(tmp, "fake-bwd", "good", "--pass", "bwd", "--ladder-lib", str(a),
                                   "--ladder-variants", "98/cudnn")
    print(r.stdout[-1500:], r.stderr[-1500:])
    check(r.returncode == 0 and data.get("complete") is True and data.get("pass") == "bwd"
          and data["provenance"].get("pass") == "bwd", "peers.py --pass bwd (stand-in torch): exit 0, the file says bwd")
    check(sorted({n for n, c in rows if c is not None}) == ["fa4", "ladder:98/cudnn", "sdpa-cudnn", "sdpa-flash"],
          "the backward's rows: FA2 and cuDNN backends, FA4, the ladder's variant (no efficient backend)")
    for c in (False, True):
        for name in ("sdpa-flash", "fa4", "ladder:98/cudnn"):
            row = rows.get((name, c), {})
            g = row.get("gradients", {})
            check(row.get("output_check") == "pass" and sorted(g) == ["dk", "dq", "dv"]
                  and all(x["rel_diff"] < 1e-4 for x in g.values()) and row.get("pass") == "bwd",
                  f"backward {name} causal={c}: dQ, dK, dV each checked against cuDNN's, and pass")
        flops = 2.5 * 4 * 1 * 2 * 40 * 40 * 16 / (2 if c else 1)
        check(all(rows[(n, c)].get("flops") == flops for n in ("sdpa-cudnn", "ladder:98/cudnn")),
              f"backward causal={c}: FLOPs 2.5x the forward's")
    check("reference" not in rows.get(("sdpa-cudnn", False), {"reference": 1}), "the backward's reference is not checked against itself")

    r, data, rows = run_fake_peers(tmp, "fake-bwd-wrong", "wrong", "--pass", "bwd", "--ladder-lib", str(a),
                                   "--ladder-variants", "24/no_mask")
    check(r.returncode == 1 and "FAIL: ladder:24/no_mask" in r.stderr and "FAIL: fa4" in r.stderr
          and " the worst): max|Δ|" in r.stderr,
          "backward: a variant without the causal mask and FA4 in the wrong layout FAIL, exit 1")
    check(rows.get(("ladder:24/no_mask", False), {}).get("output_check") == "pass"
          and rows.get(("ladder:24/no_mask", True), {}).get("output_check") == "FAIL",
          "backward: the variant without the mask passes without one and fails causal")
    check(data.get("complete") is True, "... and the file is still written")
    r, data, rows = run_fake_peers(tmp, "fake-bwd-det", "needs-deterministic", "--pass", "bwd",
                                   "--backends", "sdpa-cudnn,fa4,fa4-deterministic")
    check(r.returncode == 1 and all(rows.get(("fa4-deterministic", c), {}).get("output_check") == "pass"
                                    for c in (False, True))
          and rows.get(("fa4", False), {}).get("output_check") == "FAIL",
          "--backends fa4-deterministic: FA4 called with deterministic=True (a stand-in that needs it passes; "
          "plain fa4 beside it does not)")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/peers.py"), "--out", str(tmp / "x.json"), "--backends",
                        "fa4-deterministic"], capture_output=True, text=True, env=NO_GPU, timeout=60)
    check(r.returncode == 2 and "a dense backward's peer" in r.stderr, "fa4-deterministic in a forward pass: exit 2")
    make_tables.DOCS = tmp
    t = make_tables.render("crosscheck fake-bwd.json ids=98/cudnn")
    check(t.startswith("Backward (dQ, dK, dV") and "| 1 | 2 | 40 | 16 | causal |" in t,
          "the crosscheck table reads peers.py's backward file")

FAKE_SERVE = """
import sys
import numpy as np
import peers
import peers_serve
import torch
from torch.nn.functional import attention
S = peers_serve.serve_shape
peers_serve.COPY_BYTES = 1 << 16
peers_serve.serve_shapes = lambda quick, grid, seed, count, longest, head_dim=128: [
    S("decode", 2, 4, 2, 1, 40, 16, False), S("decode", 2, 4, 2, 3, 40, 16, True),
    S("gqa", 1, 4, 2, 24, 24, 16, True), S("gqa", 1, 4, 2, 200, 200, 16, True),
    S("varlen", 4, 4, 2, 150, 150, 16, True, [1, 17, 150, 5]),
    S("paged", 2, 4, 2, 1, 40, 16, False, page_size=16)]


class FakeLibs:
    def __init__(self, specs):
        self.paths = peers.parse_ladder_libs(specs)
        self.serving_fns = {label: object() for label in self.paths}


# The ladder through ladder_attention_serving, on its own layouts: 26/head_mod maps Q head h to K/V
# head h % Hkv (not h // group), 29/in_order reads the pages in order, not through the block table.
def fake_serving_call(libs, label, vid, s, q, k, v, bf16, cu_q=None, cu_k=None, block_table=None):
    if vid == "28/missing":
        raise RuntimeError("no attention variant 28/missing in this library (see `ladder --list`)")
    o = torch.empty_like(q)
    h, hkv = s["heads"], s["kv_heads"]

    def one(qa, ka, va):  # [1, H, Nq, D] against [1, Hkv, Nk, D]
        if vid == "26/head_mod":
            ka, va = ka[:, np.arange(h) % hkv], va[:, np.arange(h) % hkv]
        return attention(qa, ka, va, s["causal"], end_aligned=True)[0]

    def call():
        if s["q_lens"]:
            cu = cu_q.a.astype(int)
            for b in range(s["batch"]):
                lo, hi = cu[b], cu[b + 1]
                t = lambda x: np.swapaxes(x.a[lo:hi], 0, 1)[None]  # noqa: E731
                o.a[lo:hi] = np.swapaxes(one(t(q), t(k), t(v))[0], 0, 1)
        elif s["page_size"]:
            table, pages = block_table.a.astype(int), block_table.shape[1]
            for b in range(s["batch"]):
                idx = np.arange(b * pages, (b + 1) * pages) if vid == "29/in_order" else table[b]
                rows = lambda pool: np.swapaxes(pool.a[idx], 0, 1).reshape(hkv, -1, s["head_dim"])[:, :s["kv_seqlen"]]  # noqa: E731
                o.a[b] = one(q.a[b:b + 1], rows(k)[None], rows(v)[None])[0]
        else:
            o.a[...] = one(q.a, k.a, v.a)
    return call, o


peers.LadderLibs, peers_serve.ladder_serving_call = FakeLibs, fake_serving_call
sys.exit(peers.main(sys.argv[1:]))
"""


def run_fake_serve(tmp, name, fa4_mode, *extra):
    out = tmp / f"{name}.json"
    r = subprocess.run([sys.executable, "-c", FAKE_SERVE, "--out", str(out), "--pass", "serve", *extra],
                       capture_output=True, text=True, env=stand_in_env(FAKE_FA4=fa4_mode), timeout=120)
    data = json.loads(out.read_text()) if out.exists() else {"rows": []}
    rows = {}
    for x in data["rows"]:
        rows[(x["name"], x.get("shape_kind"), x.get("seqlen"), x.get("page_size"))] = x  # (name, kind, Nq, page)
    return r, data, rows


def test_peers_serve(tmp, capi):
    # The grids of the issue, whatever the stand-ins below replace.
    shapes = peers_serve.serve_shapes(False)
    decode = [(x["batch"], x["heads"], x["kv_heads"], x["kv_seqlen"]) for x in shapes if x["kind"] == "decode"]
    check(decode == [(8, 32, 8, 32768), (64, 32, 8, 4096), (1, 64, 8, 131072), (128, 32, 32, 2048)]
          and all(x["seqlen"] == 1 and x["head_dim"] == 128 for x in shapes if x["kind"] == "decode"),
          "serve grid: the issue's four decode shapes, one query token, D=128")
    gqa = [(x["batch"], x["heads"], x["kv_heads"], x["seqlen"], x["causal"]) for x in shapes if x["kind"] == "gqa"]
    check(sorted(gqa) == sorted((4, 32, 8, n, c) for n in (4096, 8192) for c in (False, True)),
          "serve grid: GQA prefill B=4 H=32 Hkv=8 N=4096/8192, both masks")
    varlen = [x for x in shapes if x["kind"] == "varlen"]
    lens = varlen[0]["q_lens"]
    check(len(lens) == 16 and all(1 <= n <= 8192 for n in lens) and len(set(lens)) > 1
          and lens == peers_serve.serve_shapes(False, "varlen", 0)[0]["q_lens"]
          and lens != peers_serve.serve_shapes(False, "varlen", 1)[0]["q_lens"]
          and {x["causal"] for x in varlen} == {False, True},
          "serve grid: varlen lengths drawn from 1..8192, the same for a seed, another for another seed")
    check(sorted({x["page_size"] for x in shapes if x["kind"] == "paged"}) == [64, 256]
          and len([x for x in shapes if x["kind"] == "paged"]) == 8, "serve grid: paged decode at pages of 64 and 256")
    check({x["head_dim"] for x in peers_serve.serve_shapes(False, "serve", 0, 16, 8192, 64)} == {64}
          and {x["head_dim"] for x in peers_serve.serve_shapes(False)} == {128},
          "serve: --head-dim sets every grid's D (128 by default)")
    check([x["kind"] for x in peers_serve.serve_shapes(True)] == ["decode", "gqa", "varlen", "paged"],
          "serve --quick: the first shape of each kind")
    sizes = peers_serve.serve_shapes(False, "decode-sizes", 0)
    check(len(sizes) == 27 and all(x["kind"] == "decode" and x["seqlen"] == 1 for x in sizes)
          and (3, 40, 8, 12345) in [(x["batch"], x["heads"], x["kv_heads"], x["kv_seqlen"]) for x in sizes]
          and sorted({x["kv_seqlen"] for x in sizes})[::8] == [1024, 131072]
          and not any(x["kv_seqlen"] == 1024 for x in shapes),
          "serve --grid decode-sizes: three small batches at 1k-128k keys (the B=3 Hq=40 Nk=12345 one among "
          "them), and not part of --grid serve")
    s = peers_serve.serve_shape("decode", 2, 8, 2, 3, 10, 64, True)
    check(peers_serve.serve_flops(s) == 4 * 8 * 64 * 2 * (3 * 7 + 6) and peers_serve.serve_bytes(s) == (2 * 2 * 3 * 8 + 2 * 2 * 10 * 2) * 64 * 2,
          "serve: FLOPs over the exact causal pairs of a decode, bytes Q + K + V + O once (K/V with Hkv heads)")
    s = peers_serve.serve_shape("varlen", 2, 4, 4, 5, 5, 8, True, [5, 3])
    check(peers_serve.serve_flops(s) == 4 * 4 * 8 * (25 / 2 + 9 / 2), "serve: a causal varlen batch counts half of each sequence")
    for bad, why in ((["--grid", "decode"], "belongs to --pass serve"), (["--pass", "serve", "--grid", "part4"], "is not one of"),
                     (["--pass", "serve", "--varlen-count", "0"], "must be positive")):
        r = subprocess.run([sys.executable, str(ROOT / "scripts/peers.py"), "--out", str(tmp / "x.json"), *bad],
                           capture_output=True, text=True, env=NO_GPU, timeout=60)
        check(r.returncode == 2 and why in r.stderr, f"peers.py {' '.join(bad)}: exit 2 ({why})")

    try:
        import numpy  # noqa: F401
    except ImportError:
        print("skip peers.py --pass serve on the stand-in torch: numpy is not installed")
        return
    a = tmp / "serve-lib.so"
    a.write_bytes(b"lib")
    r, data, rows = run_fake_serve(tmp, "fake-serve", "good", "--ladder-lib", str(a),
                                   "--ours", "28/split_kv,28/missing")
    print(r.stdout[-3000:], r.stderr[-1500:])
    check(r.returncode == 0 and data.get("complete") is True and data.get("pass") == "serve"
          and data["provenance"].get("dtype") == "bf16", "peers.py --pass serve (stand-in torch): exit 0, bf16 by default")
    copy = [x for x in data["rows"] if x["kind"] == "copy"]
    check(len(copy) == 1 and copy[0]["bytes"] == 2 << 16 and copy[0]["gbps"] > 0, "serve: the device copy's row first")
    for kind, nq, page in (("decode", 1, 0), ("decode", 3, 0), ("gqa", 24, 0), ("gqa", 200, 0), ("varlen", 150, 0),
                           ("paged", 1, 16)):
        for name in ("fa4", "ladder:28/split_kv"):
            row = rows.get((name, kind, nq, page), {})
            check(row.get("output_check") == "pass" and row.get("rel_diff", 1) < 1e-5 and row.get("reference") == "fp32"
                  and row.get("gbps", 0) > 0 and abs(row["pct_of_copy"] - 100 * row["gbps"] / copy[0]["gbps"]) < 1e-6,
                  f"serve {kind} Nq={nq} page={page}: {name} checked against the fp32 reference, GB/s and % of copy")
        check("no attention variant 28/missing" in rows.get(("ladder:28/missing", kind, nq, page), {}).get("error", ""),
              f"serve {kind}: a variant the library lacks gets a row saying so, not a failure")
    for name in ("sdpa-cudnn", "sdpa-flash"):
        check(rows.get((name, "decode", 1, 0), {}).get("output_check") == "pass"
              and rows.get((name, "gqa", 24, 0), {}).get("output_check") == "pass",
              f"serve: SDPA {name} with enable_gqa on decode and GQA prefill")
        check("top left" in rows.get((name, "decode", 3, 0), {}).get("error", ""),
              f"serve: SDPA {name} causal with Nq < Nk refused (its mask is aligned to the top left)")
        check("variable-length" in rows.get((name, "varlen", 150, 0), {}).get("error", ""),
              f"serve: SDPA {name} has no varlen row")
        check(rows.get((name, "paged", 1, 16), {}).get("kv_layout") == "contiguous"
              and rows[(name, "paged", 1, 16)].get("output_check") == "pass",
              f"serve: SDPA {name} on a paged shape runs the contiguous K/V and says so")
    row = rows.get(("ladder:28/split_kv", "varlen", 150, 0), {})
    check(row.get("q_lens") == [1, 17, 150, 5] and row.get("kv_layout") == "packed"
          and row.get("bytes") == (2 * 173 * 4 + 2 * 173 * 2) * 16 * 2 and row.get("checked_rows") == 1 + 17 + 128 + 5,
          "serve varlen row: its lengths, packed, bytes; every row of a short sequence checked, 128 of a long one")
    rows200 = peers_serve.sampled_rows(200)
    check(len(rows200) == 128 == len(set(rows200)) and rows200[:32] == list(range(32)) and rows200[-32:] == list(range(168, 200))
          and rows.get(("fa4", "gqa", 200, 0), {}).get("checked_rows") == 128 and peers_serve.sampled_rows(100) == list(range(100)),
          "serve: a long prefill checks 128 sampled rows (the first and last 32, 64 between), a short one all")
    check(rows.get(("fa4", "paged", 1, 16), {}).get("kv_layout") == "paged", "serve: FA4's paged row")
    (tmp / "fake-serve-copy.json").write_text(json.dumps(data))
    make_tables.DOCS = tmp
    t = make_tables.render("servecheck fake-serve-copy.json kind=decode ids=28/split_kv,28/missing")
    print(t)
    check(t.startswith("decode: GB/s") and "| PyTorch cuDNN | PyTorch FA2 | FA4 | 28/split_kv | % of copy | × cuDNN | × FA4 |" in t
          and "| 2 | 4 | 2 | 3 | 40 | 16 | causal | — | — |" in t and "| 1.00× | 1.00× | — | — | — | — |" in t,
          "servecheck decode: GB/s, % of copy, ratios; SDPA's refused causal decode and a missing variant read —")
    t = make_tables.render("servecheck fake-serve-copy.json kind=varlen ids=28/split_kv")
    check(t.startswith("varlen: TFLOP/s") and "| 4 (4 seqs, 173 tokens) | 4 | 2 | varlen | varlen | 16 | causal |" in t
          and "% of copy" not in t, "servecheck varlen: TFLOP/s, the batch's sequences and tokens")
    t = make_tables.render("servecheck fake-serve-copy.json kind=paged ids=28/split_kv")
    check("| page |" in t and "contiguous K/V" in t, "servecheck paged: the page column, SDPA's contiguous rows said so")

    r, data, rows = run_fake_serve(tmp, "fake-serve-wrong", "sm90", "--ladder-lib", str(a),
                                   "--ours", "26/head_mod,29/in_order", "--backends", "fa4")
    check(r.returncode == 1 and "FAIL: ladder:26/head_mod" in r.stderr and "FAIL: ladder:29/in_order" in r.stderr,
          "serve: a wrong GQA head mapping and a page walk without the block table FAIL, exit 1")
    check(rows.get(("ladder:26/head_mod", "gqa", 24, 0), {}).get("output_check") == "FAIL"
          and rows.get(("ladder:26/head_mod", "gqa", 200, 0), {}).get("output_check") == "FAIL"
          and rows.get(("ladder:29/in_order", "paged", 1, 16), {}).get("output_check") == "FAIL"
          and rows.get(("ladder:29/in_order", "decode", 1, 0), {}).get("output_check") == "pass",
          "serve: ... on the shapes where the mistake matters only")
    check("not supported on SM 9.0" in rows.get(("fa4", "paged", 1, 16), {}).get("error", "")
          and data.get("complete") is True, "serve: FA4 refusing the page table (sm_90): its row says why")

    if not capi or not os.path.isfile(capi):
        print(f"skip ladder_attention_serving's refusals: libladder_capi.so not built ({capi})")
        return
    try:
        libs = peers.LadderLibs([capi])
    except OSError as e:
        print(f"skip ladder_attention_serving's refusals: the library does not load here ({e})")
        return
    lens = (ctypes.c_int * 2)(3, 5)

    def serving(vid, batch=2, heads=4, kv_heads=2, seqlen=1, kv_seqlen=128, q_lens=None, cu=None, page=0, table=None):
        err = ctypes.create_string_buffer(512)
        rc = libs.call_serving("", vid, batch, heads, kv_heads, seqlen, kv_seqlen, 64, 0, 0, q_lens, None, cu, cu,
                               page, table, *([None] * 6), err, 512)
        return rc, err.value.decode()
    for what, args, want in (
            ("an unknown id", ("28/none",), "no attention variant 28/none"),
            ("a backward id", ("98/cudnn",), "no attention variant 98/cudnn"),
            ("varlen without cu_seqlens", ("99/cudnn",), None),
            ("K/V heads that do not divide", ("99/cudnn",), "divide"),
            ("cu_seqlens without lengths", ("99/cudnn",), "without q_lens"),
            ("a page size without a block table", ("99/cudnn",), "block_table"),
            ("a batch of 0", ("99/cudnn",), "must be positive")):
        kw = {"varlen without cu_seqlens": dict(q_lens=lens), "K/V heads that do not divide": dict(kv_heads=3),
              "cu_seqlens without lengths": dict(cu=1), "a page size without a block table": dict(page=64),
              "a batch of 0": dict(batch=0)}.get(what, {})
        rc, msg = serving(*args, **kw)
        want = want or "needs the device cu_seqlens_q and cu_seqlens_k"
        check(rc == 1 and want in msg, f"ladder_attention_serving, {what}: 1 and a message ({msg[:90]})")


FAKE_BWD_SERVE = """
import sys
import numpy as np
import peers
import peers_bwd
import peers_serve
import torch
S = peers_serve.serve_shape
peers_bwd.bwd_serving_shapes = lambda grid, quick=False, seed=0: {
    "bwd-gqa": [S("gqa", 1, 4, 2, 40, 40, 16, c) for c in (False, True)],
    "bwd-varlen": [S("varlen", 4, 4, 2, 30, 30, 16, True, [1, 17, 30, 5])]}[grid]


class FakeLibs:
    def __init__(self, specs):
        self.paths = peers.parse_ladder_libs(specs)


# One sequence's backward from O and the log-sum-exp, as a kernel does: q, o, d_o [H, n, D], k, v
# [Hkv, n, D], lse [H, n]. 25/no_group_sum keeps the first query head's share of dK, dV only.
def attend(q, k, v, o, d_o, lse, causal, vid):
    hkv, group = k.shape[0], q.shape[0] // k.shape[0]
    kr, vr = np.repeat(k, group, 0), np.repeat(v, group, 0)
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(kr, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    p = np.exp(s - lse[..., None])
    ds = p * (d_o @ np.swapaxes(vr, -1, -2) - (d_o * o).sum(-1, keepdims=True))
    fold = lambda x: x.reshape(hkv, group, *x.shape[1:])  # noqa: E731
    take = (lambda x: fold(x)[:, 0]) if vid == "25/no_group_sum" else (lambda x: fold(x).sum(1))  # noqa: E731
    return ds @ kr * scale, take(np.swapaxes(ds, -1, -2) @ q * scale), take(np.swapaxes(p, -1, -2) @ d_o)


# The ladder through ladder_attention_backward_serving; 25/varlen_as_dense ignores cu_seqlens (the
# packed batch attended as one sequence).
def fake_backward_serving_call(libs, label, vid, s, q, k, v, o, d_o, lse, bf16, cu=None):
    if vid == "25/missing":
        raise RuntimeError("no backward variant 25/missing in this library (see `ladder --list`)")
    grads = tuple(torch.empty_like(x) for x in (q, k, v))

    def call():
        if s["q_lens"]:
            c = cu.a.astype(int) if vid != "25/varlen_as_dense" else np.array([0, q.shape[0]])
            for lo, hi in zip(c[:-1], c[1:]):
                t = lambda x: np.swapaxes(x.a[lo:hi], 0, 1)  # noqa: E731
                res = attend(t(q), t(k), t(v), t(o), t(d_o), lse.a[:, lo:hi], s["causal"], vid)
                for g, r in zip(grads, res):
                    g.a[lo:hi] = np.swapaxes(r, 0, 1)
        else:
            for b in range(s["batch"]):
                res = attend(q.a[b], k.a[b], v.a[b], o.a[b], d_o.a[b], lse.a[b], s["causal"], vid)
                for g, r in zip(grads, res):
                    g.a[b] = r
    return call, grads


peers.LadderLibs, peers_bwd.ladder_backward_serving_call = FakeLibs, fake_backward_serving_call
sys.exit(peers.main(sys.argv[1:]))
"""

GQA_LSE_CHECK = """
import numpy as np
import peers_bwd
import torch
q, k = torch.randn(2, 6, 40, 16), torch.randn(2, 2, 40, 16)
for causal in (False, True):
    s = q.a @ np.swapaxes(np.repeat(k.a, 3, 1), -1, -2) / 4.0
    if causal:
        s = np.where(np.tril(np.ones((40, 40), dtype=bool)), s, -np.inf)
    want = np.log(np.exp(s).sum(-1))
    got = peers_bwd.reference_lse(q, k, causal, rows=7).a
    print("ok" if got.shape == (2, 6, 40) and np.allclose(got, want, atol=1e-5) else f"wrong {causal}")
"""


def run_fake_bwd_serve(tmp, name, fa4_mode, *extra):
    out = tmp / f"{name}.json"
    r = subprocess.run([sys.executable, "-c", FAKE_BWD_SERVE, "--out", str(out), "--pass", "bwd", *extra],
                       capture_output=True, text=True, env=stand_in_env(FAKE_FA4=fa4_mode), timeout=120)
    data = json.loads(out.read_text()) if out.exists() else {"rows": []}
    return r, data, {(x["name"], x.get("shape_kind"), x.get("causal")): x for x in data["rows"]}


def test_peers_backward_serving(tmp, capi):
    """--pass bwd --grid bwd-gqa / bwd-varlen: the issue's grids, and on the stand-in torch every
    candidate's dQ, dK, dV checked (a missing group sum or a batch attended as one sequence FAILs)."""
    import peers_bwd
    gqa = peers_bwd.bwd_serving_shapes("bwd-gqa")
    check([(x["batch"], x["heads"], x["kv_heads"], x["seqlen"], x["head_dim"], x["causal"]) for x in gqa]
          == [(2, 32, 8, 4096, 128, False), (2, 32, 8, 4096, 128, True)], "bwd-gqa: B=2 Hq=32 Hkv=8 N=4096 D=128, both masks")
    var = peers_bwd.bwd_serving_shapes("bwd-varlen", seed=3)
    lens = var[0]["q_lens"]
    check(len(var) == 1 and len(lens) == 24 and all(1 <= n <= 8192 for n in lens) and sum(lens) == 91707
          and var[0]["causal"] and (var[0]["heads"], var[0]["kv_heads"], var[0]["head_dim"]) == (32, 8, 128)
          and var[0]["seqlen"] == max(lens) and lens != peers_bwd.bwd_serving_shapes("bwd-varlen", seed=4)[0]["q_lens"],
          "bwd-varlen: 24 lengths from 1..8192 drawn with the seed (seed 3: the issue's 91707 tokens), H=32 Hkv=8, causal")
    r = subprocess.run([sys.executable, str(ROOT / "scripts/peers.py"), "--out", str(tmp / "x.json"), "--grid", "bwd-gqa"],
                       capture_output=True, text=True, env=NO_GPU, timeout=60)
    check(r.returncode == 2 and "belongs to --pass bwd" in r.stderr, "peers.py --grid bwd-gqa without --pass bwd: exit 2")
    try:
        import numpy  # noqa: F401
    except ImportError:
        print("skip peers.py --pass bwd --grid bwd-gqa/bwd-varlen on the stand-in torch: numpy is not installed")
        return
    r = subprocess.run([sys.executable, "-c", GQA_LSE_CHECK], capture_output=True, text=True, timeout=60, env=stand_in_env())
    check(r.returncode == 0 and r.stdout.split() == ["ok", "ok"],
          "peers_bwd.reference_lse: GQA's log-sum-exp (K of fewer heads), causal and not" + (" " + r.stderr[-300:] if r.returncode else ""))
    a = tmp / "bwd-serve-lib.so"
    a.write_bytes(b"lib")
    for grid in ("bwd-gqa", "bwd-varlen"):
        r, data, rows = run_fake_bwd_serve(tmp, f"fake-{grid}", "good", "--grid", grid, "--ladder-lib", str(a),
                                           "--ladder-variants", "25/good,25/missing")
        print(r.stdout[-2000:], r.stderr[-1500:])
        kind = grid[4:]
        check(r.returncode == 0 and data.get("complete") is True and data.get("grid") == grid and data.get("pass") == "bwd",
              f"peers.py --pass bwd --grid {grid} (stand-in torch): exit 0, the file says which grid")
        masks = (False, True) if kind == "gqa" else (True,)
        for c in masks:
            names = ["fa4", "ladder:25/good"] + (["sdpa-flash"] if kind == "gqa" else [])
            for name in names:
                row = rows.get((name, kind, c), {})
                g = row.get("gradients", {})
                check(row.get("output_check") == "pass" and sorted(g) == ["dk", "dq", "dv"]
                      and all(x["rel_diff"] < 1e-4 for x in g.values()) and row.get("kv_heads") == 2 and "tflops" in row,
                      f"{grid} causal={c}: {name}'s dQ, dK, dV each checked against the reference, and timed")
            check("no backward variant 25/missing" in rows.get(("ladder:25/missing", kind, c), {}).get("error", ""),
                  f"{grid}: a variant the library lacks gets a row saying so")
        if kind == "gqa":
            check("reference" not in rows.get(("sdpa-cudnn", "gqa", False), {"reference": 1})
                  and rows.get(("fa4", "gqa", True), {}).get("reference") == "sdpa-cudnn",
                  "bwd-gqa: PyTorch's cuDNN SDPA (enable_gqa) is the reference")
            check(all(rows[("ladder:25/good", "gqa", c)]["flops"] == 2.5 * 4 * 4 * 40 * 40 * 16 / (2 if c else 1)
                      for c in (False, True)), "bwd-gqa: FLOPs 2.5x the forward's, causal halved")
        else:
            row = rows.get(("ladder:25/good", "varlen", True), {})
            check(row.get("q_lens") == [1, 17, 30, 5] and row.get("reference") == "sdpa-cudnn-per-sequence"
                  and row.get("flops") == 2.5 * 4 * 4 * 16 * sum(n * n / 2 for n in (1, 17, 30, 5)),
                  "bwd-varlen: the reference is each sequence's SDPA, TFLOP/s of the sum over sequences (causal halves)")
            for name in ("sdpa-flash", "sdpa-cudnn"):
                x = rows.get((name, "varlen", True), {})
                check("no packed variable-length" in x.get("error", "") and "tflops" not in x,
                      f"bwd-varlen: {name} is not timed, and its row says why")
            check(data.get("varlen") == {"seed": 0, "count": 24, "max": 8192}, "bwd-varlen: the draw in the file")
    r, data, rows = run_fake_bwd_serve(tmp, "fake-bwd-gqa-wrong", "good", "--grid", "bwd-gqa", "--ladder-lib", str(a),
                                       "--ladder-variants", "25/no_group_sum,25/varlen_as_dense")
    check(r.returncode == 1 and "FAIL: ladder:25/no_group_sum" in r.stderr and "Hkv=2" in r.stderr
          and rows.get(("ladder:25/varlen_as_dense", "gqa", True), {}).get("output_check") == "pass",
          "bwd-gqa: dK, dV without the group's sum FAIL, exit 1 (a dense GQA problem has no cu_seqlens to ignore)")
    r, data, rows = run_fake_bwd_serve(tmp, "fake-bwd-varlen-wrong", "missing", "--grid", "bwd-varlen", "--ladder-lib",
                                       str(a), "--ladder-variants", "25/no_group_sum,25/varlen_as_dense")
    check(r.returncode == 1 and rows.get(("ladder:25/varlen_as_dense", "varlen", True), {}).get("output_check") == "FAIL"
          and rows.get(("ladder:25/no_group_sum", "varlen", True), {}).get("output_check") == "FAIL"
          and not any(n == "fa4" for n, _, _ in rows) and data.get("complete") is True,
          "bwd-varlen: a batch attended as one sequence FAILs; without FA4 no FA4 rows, the file still complete")

    if not capi or not os.path.isfile(capi):
        print(f"skip ladder_attention_backward_serving's refusals: libladder_capi.so not built ({capi})")
        return
    try:
        libs = peers.LadderLibs([capi])
    except OSError as e:
        print(f"skip ladder_attention_backward_serving's refusals: the library does not load here ({e})")
        return
    lens2 = (ctypes.c_int * 2)(3, 5)

    def backward_serving(vid, batch=2, heads=4, kv_heads=2, q_lens=None, cu=None):
        err = ctypes.create_string_buffer(512)
        rc = libs.call_backward_serving("", vid, batch, heads, kv_heads, 128, 64, 1, 0, q_lens, cu, *([None] * 10),
                                        err, 512)
        return rc, err.value.decode()
    for what, vid, kw, want in (
            ("an unknown id", "25/none", {}, "no backward variant 25/none"),
            ("a forward id", "99/cudnn", {}, "no backward variant 99/cudnn"),
            ("K/V heads that do not divide", "98/cudnn", dict(kv_heads=3), "divide"),
            ("lengths without cu_seqlens_q", "98/cudnn", dict(q_lens=lens2), "needs the device cu_seqlens_q"),
            ("cu_seqlens_q without lengths", "98/cudnn", dict(cu=1), "without q_lens"),
            ("a batch of 0", "98/cudnn", dict(batch=0), "must be positive")):
        rc, msg = backward_serving(vid, **kw)
        check(rc == 1 and want in msg, f"ladder_attention_backward_serving, {what}: 1 and a message ({msg[:90]})")


def peer_row(name, key, tflops=None, check_=None, rounds=None, error=None):
    b, h, n, d, c = key
    r = {"kind": "attention", "name": name, "batch": b, "heads": h, "seqlen": n, "head_dim": d, "causal": c,
         "dtype": "fp16"}
    if error:
        r["error"] = error
        return r
    r.update(tflops=tflops, median_ms=1.0 / tflops)
    if rounds:
        r["round_medians_ms"] = rounds
    if check_:
        r.update(output_check=check_, reference="sdpa-cudnn", max_abs_diff=1e-3)
    return r


def test_tables(tmp):
    k1, k2 = (4, 8, 4096, 64, False), (4, 8, 4096, 64, True)
    prov = {"gpu": {"name": "NVIDIA H200", "driver_version": "1", "torch": "2", "cudnn": 91900, "sm_clock_mhz": 1980},
            "git_commit": "abc", "date": "2026-12-01T09:00:00Z", "fa4": {"version": "4.0.0b36"},
            "ladder_libs": {"old": "/x/base/build/lib/libladder_capi.so", "new": "/x/new/build/lib/libladder_capi.so"},
            "ladder_lib_commits": {"old": "349da4a", "new": "abc"}}
    cross = {"provenance": prov, "rows": [
        {"kind": "matmul", "name": "torch-fp16-matmul-8192"},
        peer_row("sdpa-cudnn", k1, 400.0), peer_row("fa4", k1, 500.0, "pass"),
        peer_row("ladder:99/cudnn", k1, 410.0, "pass"), peer_row("ladder:21/snake", k1, 440.0, "pass"),
        peer_row("sdpa-cudnn", k2, 300.0), peer_row("fa4", k2, 350.0, "pass"),
        peer_row("ladder:21/snake", k2, 330.0, "FAIL")]}
    compare = {"provenance": prov, "pairs": [{"old": "ladder:old:20/persistent_snake", "new": "ladder:new:21/snake"},
                                             {"old": "ladder:old:18/ws", "new": "ladder:new:18/ws"}],
               "rows": [peer_row("ladder:old:20/persistent_snake", k1, 400.0, "pass", [1.0, 1.0, 1.0]),
                        peer_row("ladder:new:21/snake", k1, 440.0, "pass", [0.9, 0.9, 0.9]),
                        peer_row("ladder:old:20/persistent_snake", k2, 300.0, "pass", [1.0, 1.0, 1.0]),
                        peer_row("ladder:new:21/snake", k2, 303.0, "pass", [0.98, 1.02, 0.99]),
                        peer_row("ladder:old:18/ws", k1, 200.0, "pass"),
                        peer_row("ladder:new:18/ws", k1, error="no attention variant 18/ws in this library")]}
    (tmp / "cross.json").write_text(json.dumps(cross))
    (tmp / "compare.json").write_text(json.dumps(compare))
    make_tables.DOCS = tmp
    t = make_tables.render("crosscheck cross.json ids=21/snake")
    print(t)
    check("| FA4 | FA4 × cuDNN |" in t and "× FA4 |" in t, "crosscheck: FA4's column and the × FA4 ratio")
    check("| 500.0 | 1.25× | 440.0 | 1.10× | 0.88× |" in t, "crosscheck: FA4 / cuDNN, variant / cuDNN, variant / FA4")
    check("| FAIL | — | — |" in t and "FAIL:" in t, "crosscheck: a row whose output check failed reads FAIL")
    check("FlashAttention-4 4.0.0b36" in t, "crosscheck: FA4's version in the footer")
    bwd = {"pass": "bwd", "provenance": prov, "rows": [
        peer_row("sdpa-cudnn", k1, 400.0), peer_row("sdpa-flash", k1, 250.0, "pass"),
        peer_row("ladder:98/cudnn", k1, 410.0, "pass"), peer_row("ladder:99/cudnn", k1, 999.0, "pass"),
        peer_row("fa4", k1, 500.0, "pass"), peer_row("ladder:24/fa2", k1, 300.0, "pass"),
        peer_row("sdpa-cudnn", k2, 300.0), peer_row("ladder:24/fa2", k2, 200.0, "FAIL")]}
    (tmp / "bwd.json").write_text(json.dumps(bwd))
    t = make_tables.render("crosscheck bwd.json ids=24/fa2")
    print(t)
    check("| PyTorch cuDNN | PyTorch FA2 | ladder's cuDNN | FA4 |" in t
          and "| 4 | 8 | 4096 | 64 | none | 400.0 | 250.0 | 410.0 | 500.0 | 1.25× | 300.0 | 0.75× | 0.60× |" in t,
          "backward crosscheck: the FA2 column, step 98's cuDNN row (not 99's), the ratios")
    check("| 24/fa2 | × cuDNN | × FA4 | × FA2 |" in t and "| 0.75× | 0.60× | 1.20× |" in t,
          "backward crosscheck: each variant's ratio to PyTorch's FA2 backend (the mma.sync target)")
    check("| causal | 300.0 | — | — |" in t and "(dQ, dK or dV)" in t and "--pass bwd" in t,
          "backward crosscheck: a FAIL row, the footer's command")
    t = make_tables.render("compare compare.json")
    print(t)
    check("| 20/persistent_snake → 21/snake | 1.10× (400→440) | 1.01×≈ (300→303) |" in t,
          "compare: new/old per shape, ≈ when the rounds disagree")
    check("18/ws → 18/ws (no attention variant 18/ws" in t and "| 18/ws → 18/ws |" not in t,
          "compare: a pair no shape of which both sides ran is left out of the table, saying why")
    check("old built from `349da4a`, new built from `abc`" in t, "compare: each library's commit")
    t = make_tables.render("compare compare.json ids=18/")
    check("21/snake" not in t and "18/ws" in t, "compare: ids= keeps the pairs of those new ids")
    check("Not measured yet" in make_tables.render("compare missing.json"), "compare: a file still to come")
    compare["complete"] = False
    (tmp / "compare.json").write_text(json.dumps(compare))
    check("stopped before its last shape" in make_tables.render("compare compare.json"), "compare: a file cut short says so")

    # fp8accuracy: one row per (inputs, D, N, mask), the rotation's ratio computed from the two RMSEs.
    def rec(variant, rmse, kind="outliers", d=128):
        return {"variant": variant, "input": kind, "d": d, "n": 1024, "causal": False, "rmse": rmse, "rel_rmse": rmse * 5}
    acc = {"provenance": {"numpy": "2.0", "date": "2026-12-03T00:00:00", "seed": 0, "heads": 2,
                          "command": "/usr/bin/python3 scripts/fp8_accuracy.py"},
           "inputs": {"normal": "N(0,1)", "outliers": "N(0,1)+outliers"},
           "records": [rec("fp8", 0.02), rec("fp8_rotated", 0.005), rec("bf16", 0.001), rec("fp16", 0.0001),
                       rec("fp8", 0.03, d=64), rec("fp8_rotated", 0.01, d=64), rec("bf16", 0.002, d=64)]}
    (tmp / "acc.json").write_text(json.dumps(acc))
    t = make_tables.render("fp8accuracy acc.json d=128")
    check("| outliers | 128 | 1024 | none | 2.00e-02 | 5.00e-03 | 0.25 | 1.00e-03 | 0.100 |" in t,
          "fp8accuracy: the row and the rotation's ratio")
    check("| 64 |" not in t, "fp8accuracy: d= keeps one head dimension")
    check("Not measured yet" in make_tables.render("fp8accuracy missing.json"), "fp8accuracy: a file still to come")


def main():
    capi = sys.argv[1] if len(sys.argv) > 1 else ""
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        NO_GPU.update(no_gpu_env(tmp))
        test_no_gpu_switch(tmp)
        test_round_sh(tmp)
        test_peers_args(tmp, capi)
        test_peers_main(tmp)
        test_peers_backward(tmp)
        test_peers_backward_serving(tmp, capi)
        test_peers_serve(tmp, capi)
        test_tables(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
