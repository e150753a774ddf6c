#!/usr/bin/env python3
"""scripts/split_cost_model.py: its copy of the split rule gives common/split_kv.hpp's counts
(tests/cpu/test_split_kv.cpp checks the same shapes there), and on the committed clean-flush sweep
the fit is close and the rule's count measures within 1% of the sweep's fastest at every shape
(what chapter 42 says)."""
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import split_cost_model as m  # noqa: E402

SWEEP = ROOT / "docs/results/h200/2026-12-02-r6-decode-sweep.tgz"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def rule_for(b, hq, nk, hkv=8, slots=264):
    sh = {"batch": b, "heads": hq, "kv_heads": hkv, "kv_seqlen": nk, "seqlen": 1, "head_dim": 128, "dtype": "bf16"}
    return m.rule_count(sh, slots)


check(rule_for(3, 40, 12345) == 11, f"B=3 Hq=40 Nk=12345: the rule's 11 splits, got {rule_for(3, 40, 12345)}")
check(rule_for(1, 64, 131072) == 32, f"B=1 Hq=64 Nk=131072: 32 splits, got {rule_for(1, 64, 131072)}")
check(rule_for(8, 32, 32768) == 4, f"B=8 Hq=32 Nk=32768: 4 splits, got {rule_for(8, 32, 32768)}")
check(rule_for(64, 32, 4096) == 1, f"B=64 Hq=32 Nk=4096: 1 split, got {rule_for(64, 32, 4096)}")
check(m.uneven(192, 264, 132) == 264 / 192 - 1 and m.uneven(96, 264, 132) == 0 and m.uneven(528, 264, 132) == 0,
      "uneven(): 192 CTAs in 264 slots 0.375, 96 (one an SM) 0, two full waves 0")

with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "model.json"
    rc = m.main([str(SWEEP), "--json", str(out)])
    check(rc == 0, f"split_cost_model.py exits 0 on {SWEEP.name}, got {rc}")
    if rc == 0:
        fit = json.load(open(out))
        check(fit["rms_rel_error"] < 0.05, f"the fit's rms relative error < 5%, got {fit['rms_rel_error']:.3f}")
        check(len(fit["shapes"]) == 4, f"four shapes in the sweep, got {len(fit['shapes'])}")
        for s in fit["shapes"]:
            t = s["measured_us"]
            ratio = t[str(s["rule"])] / t[str(s["fastest"])]
            check(ratio <= 1.01, f"{s['shape']}: the rule's count ({s['rule']}) within 1% of the fastest, got {ratio:.3f}")
    rc = m.main([str(SWEEP), "--variant", "no/such"])
    check(rc == 1, f"a variant the sweep lacks: exit 1, got {rc}")

print(f"test_split_cost_model: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
