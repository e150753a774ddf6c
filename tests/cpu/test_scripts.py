#!/usr/bin/env python3
"""CPU checks of the round's scripts (no GPU, no PyTorch needed):
  - scripts/round.sh: --help works; a bad stage, dtype, step range or a missing OUT exit 2 before
    anything runs; the fa4 stage without .fa4/ is a no-op that says so; bwdpeers without binaries
    says so
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
  - scripts/make_tables.py: the crosscheck table with FlashAttention-4's column and ratios, a FAIL
    row shown as FAIL, and the compare table's new/old ratios and its noise mark; the backward's
    crosscheck table (step 98's cuDNN row, the FA2 column)

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
sys.path.insert(0, str(ROOT / "scripts"))
import make_tables  # noqa: E402
import peers  # noqa: E402

failures = []


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
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=60)


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
    r = round_sh("--help")
    check("bwdpeers" in r.stdout and "--pass bwd" in r.stdout, "round.sh --help names the bwdpeers stage")
    # bwdpeers on carried stand-in binaries (a `ladder` that only lists, an empty library): peers.py
    # --pass bwd runs once per dtype, and without PyTorch exits 3, which the stage reports.
    fake = tmp / "fake-bin"
    fake.mkdir()
    (fake / "ladder").write_text("#!/bin/sh\necho '     98/cudnn   cuDNN backward (peer)  [sm_80+, fp16 and bf16]'\n"
                                 "echo '     24/fa2     FA2 backward (main)  [sm_80+, fp16]'\n"
                                 "echo '     24/other   FA2 backward, other  [sm_80+, fp16]'\n")
    (fake / "ladder").chmod(0o755)
    (fake / "libladder_capi.so").write_bytes(b"not loaded: peers.py stops before")
    r = round_sh("--stages", "bwdpeers", "--bin", str(fake), str(tmp / "bwd"), env={"PYTHONPATH": ""})
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
peers.grids = lambda quick, grid="ladder": [(1, 2, 40, 16, False), (1, 2, 40, 16, True)]


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
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests/cpu/fake_torch'}:{ROOT / 'scripts'}", "FAKE_FA4": fa4_mode,
           "LADDER_LIB_COMMITS": "old=349da4a,new=abc"}
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
                       capture_output=True, text=True, timeout=60)
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
                       env={**os.environ, "PYTHONPATH": f"{ROOT / 'tests/cpu/fake_torch'}:{ROOT / 'scripts'}"})
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
    make_tables.DOCS = tmp
    t = make_tables.render("crosscheck fake-bwd.json ids=98/cudnn")
    check(t.startswith("Backward (dQ, dK, dV") and "| 1 | 2 | 40 | 16 | causal |" in t,
          "the crosscheck table reads peers.py's backward file")


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


def main():
    capi = sys.argv[1] if len(sys.argv) > 1 else ""
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        test_round_sh(tmp)
        test_peers_args(tmp, capi)
        test_peers_main(tmp)
        test_peers_backward(tmp)
        test_tables(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
