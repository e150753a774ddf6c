#!/usr/bin/env python3
"""scripts/hardware_limits.py and make_tables.py's `limits` table (a CPU test, docs_limits_table).

A synthetic ladder file whose clock fields all differ (start 1500 MHz, after each timing 1250, the
GPU's highest 1980, provenance.gpu_after 1100) and whose SM count is not the H200's (100), with a
forward at D = 128 (the exponential bound twice the tensor peak) and a backward at D = 64 (2.5× the
forward's bound): every cell is checked to the percent, so reading the wrong clock, a fixed SM
count, the forward's FLOPs per exponential for the backward, or the bounds swapped fails. Also: the
idle start clock, an unknown GPU and a file without an SM count are refused with a reason; the
constants reproduce the datasheet's 989 TFLOP/s; and the committed Part IV/V files count 4·D
(forward) and 10·D (backward) FLOPs per exponential, the convention the bound assumes.
"""
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import hardware_limits  # noqa: E402
import make_tables  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def refusal(fn, *args):
    try:
        fn(*args)
    except (SystemExit, hardware_limits.LimitError) as e:
        return str(e)
    return None


def gpu(**kw):
    g = {"name": "NVIDIA H200", "compute_capability": 90, "sm_count": 100, "sm_clock_mhz": 1500,
         "max_sm_clock_mhz": 1980, "cuda_runtime": 13000, "driver_version": "1"}
    g.update(kw)
    return {k: v for k, v in g.items() if v is not None}


def run(kind, d, causal, rows, after=1250):
    text = f"B=1 H=1 N=1024 D={d} {'causal' if causal else 'non-causal'}"
    return {"kind": kind, "shape": {"batch": 1, "heads": 1, "seqlen": 1024, "head_dim": d, "causal": causal,
                                    "dtype": "fp16"},
            "shape_text": text, "gpu_after": {"sm_clock_mhz": after}, "rows": rows}


def row(i, tflops=None, **kw):
    r = {"id": i, "status": "ok" if tflops else kw.pop("status", "skipped"), **kw}
    if tflops:
        r.update(tflops=tflops, error={"pass": kw.get("ok", True)})
    return r


def doc(runs, **g):
    return {"provenance": {"gpu": gpu(**g), "git_commit": "abc", "date": "2026-12-01T00:00:00Z",
                           "command_line": "ladder"},
            "gpu_after": {"sm_clock_mhz": 1100}, "runs": runs}


# At 1500 MHz and 100 SMs: tensor peak 4096·100·1.5e9 = 614.4 TFLOP/s; forward exp bound at D = 128:
# 16·100·1.5e9·512 = 1228.8; backward at D = 64: 16·100·1.5e9·640 = 1536. At 1250 MHz: 512 (peak).
fwd = run("attention", 128, False, [
    row("20/a", 307.2), row("21/b", status="skipped", duplicate_of="20/a"), row("22/c"),
    row("23/f", 153.6, ok=False), row("99/x", 184.32, peer=True), row("gemm-fp16", 491.52, ceiling=True)])
fwd_causal = run("attention", 128, True, [row("20/a", 245.76), row("21/b", 282.624), row("22/c"),
                                          row("23/f", 100.0), row("99/x", 200.0, peer=True),
                                          row("gemm-fp16", 491.52, ceiling=True)])
bwd = run("backward", 64, False, [row("25/a", 307.2), row("gemm-fp16", 491.52, ceiling=True)])

with tempfile.TemporaryDirectory() as d:
    tmp = pathlib.Path(d)
    make_tables.DOCS = tmp
    (tmp / "l.json").write_text(json.dumps(doc([fwd, fwd_causal, bwd])))
    t = make_tables.render("limits l.json")
    print(t)
    check("| *bounds: tensor · exp (TFLOP/s)* | 614 · 1229 | 614 · 1229 |" in t,
          "forward D=128: the tensor peak and the exponential bound (2× it) at the start clock, 100 SMs")
    check("| 20/a | 307.2 (50% · 25%) | 245.8 (40% · 20%) |" in t,
          "a row's TFLOP/s as % of the tensor peak and % of the exp bound, per problem")
    check("| 21/b | = 20/a | 282.6 (46% · 23%) |" in t, "a duplicate cell names the kernel it is")
    check("22/c" not in t, "a variant that ran none of the problems is left out")
    check("153.6 (25% · 12%) FAIL" in t, "a row that failed its check says FAIL")
    check("| 99/x (peer) | 184.3 (30% · 15%) |" in t, "a peer row is marked")
    check("| gemm-fp16 (ceiling) | 491.5 (80% · —) |" in t, "the GEMM ceiling: % of the tensor peak, no exp bound")
    check("**backward D=64, fp16**: 100 SMs, peaks at 1500 MHz" in t and "| 614 · 1536 |" in t
          and "| 25/a | 307.2 (50% · 20%) |" in t,
          "backward D=64: its exp bound is 2.5× the forward's (10·D FLOPs per exponential)")
    check("| *SM clock after the timing* | 1250 MHz | 1250 MHz |" in t, "each problem's clock after its timing")
    check("SM clock 1500 MHz at start" in t, "the provenance line")
    t = make_tables.render("limits l.json ids=20/ clock=after")
    check("| 20/a | 307.2 (60% · 30%) |" in t and "peaks at 1250 MHz" in t and "99/x" not in t
          and "gemm-fp16 (ceiling)" in t, "clock=after: the peaks at each problem's clock after its timing; ids=")
    t = make_tables.render("limits l.json ids=20/ clock=max")
    check("| 20/a | 307.2 (38% · 19%) |" in t and "peaks at 1980 MHz" in t, "clock=max: the GPU's highest clock")
    why = refusal(make_tables.render, "limits l.json clock=boost")
    check(why is not None and "start, after, max" in why, "an unknown clock is refused")

    (tmp / "idle.json").write_text(json.dumps(doc([fwd], sm_clock_mhz=345)))
    why = refusal(make_tables.render, "limits idle.json")
    check(why is not None and "idle" in why and "clock=after" in why,
          "a start clock below the clock after a timing (an idle GPU at start) is refused, naming clock=after")
    check("307.2 (60% · 30%)" in make_tables.render("limits idle.json clock=after"), "... and clock=after then works")
    (tmp / "a100.json").write_text(json.dumps(doc([fwd], compute_capability=80, name="A100")))
    why = refusal(make_tables.render, "limits a100.json")
    check(why is not None and "PER_SM_PER_CLOCK" in why, "a GPU without known rates is refused, saying where to add them")
    (tmp / "nosm.json").write_text(json.dumps(doc([fwd], sm_count=None)))
    why = refusal(make_tables.render, "limits nosm.json")
    check(why is not None and "sm_count" in why, "a file without an SM count is refused")
    check("Not measured yet" in make_tables.render("limits missing.json"), "a file still to come")

# The constants against the datasheet and the arithmetic (H200: 132 SMs).
h200 = {"provenance": {"gpu": gpu(sm_count=132, sm_clock_mhz=1830)}, "runs": []}
b = hardware_limits.bounds(h200, {"kind": "attention", "shape": {"head_dim": 64}})
check(abs(b["tensor_peak_tflops"] - 989.4) < 0.1, f"4096 FLOP/clock/SM × 132 SMs × 1.83 GHz = 989 TFLOP/s ({b['tensor_peak_tflops']:.1f})")
h200["provenance"]["gpu"]["sm_clock_mhz"] = 1980
for d, want in ((64, 1070.5), (128, 2141.1)):
    b = hardware_limits.bounds(h200, {"kind": "attention", "shape": {"head_dim": d}})
    check(abs(b["exp_bound_tflops"] - want) < 0.1, f"exp bound at D={d}, 1.98 GHz: {b['exp_bound_tflops']:.1f} TFLOP/s")

# The committed files count the FLOPs the bound assumes per exponential: per counted pair
# (B·H·N², half of it causal), 4·D forward and 10·D backward.
checked = 0
for name in ("2026-12-01-r3-ladder-d64.json", "2026-12-01-r3-ladder-d128.json",
             "2026-12-01-p5r3-backward-d64.json", "2026-12-01-p5r3-backward-d128.json"):
    data = json.loads((ROOT / "docs/results/h200" / name).read_text())
    for r in data["runs"]:
        s = r["shape"]
        pairs = s["batch"] * s["heads"] * s["seqlen"] ** 2 / (2 if s["causal"] else 1)
        per = hardware_limits.FLOPS_PER_EXPONENTIAL_PER_D[r["kind"]] * s["head_dim"]
        for x in r["rows"]:
            if not x.get("ceiling") and "flops" in x:
                checked += 1
                if abs(x["flops"] - per * pairs) > 1e-9 * x["flops"]:
                    failures.append(f"{name} {r['shape_text']} {x['id']}: flops {x['flops']:.4g}, the bound assumes {per * pairs:.4g}")
check(checked > 50, f"the committed Part IV/V files count 4·D / 10·D FLOPs per exponential ({checked} rows)")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
