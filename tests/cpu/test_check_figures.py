#!/usr/bin/env python3
"""scripts/check_figures.py must fail on a wrong figure (a CPU test, docs_figures_checker).

Plants wrong figures next to right ones, on a synthetic results file and on the repository's own
annotated documents, and requires the checker to accept every right one and reject every wrong
one (including a figure that is off only by its last rounded digit, a range with one wrong end, a
ratio of one row across two files, and a wrong figure in a step's or a lab's README).
"""
import importlib.util
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_figures", ROOT / "scripts" / "check_figures.py")
cf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cf)

failures = []


def expect(ok, what, text, docs):
    problems = cf.check_text(text, docs)
    if ok and problems:
        failures.append(f"{what}: rejected a right figure: {problems}")
    if not ok and not problems:
        failures.append(f"{what}: accepted a wrong figure")


with tempfile.TemporaryDirectory() as tmp:
    docs = pathlib.Path(tmp)
    run = lambda causal, rows: {"kind": "attention", "shape": {"batch": 4, "heads": 8, "seqlen": 4096,
                                                                "head_dim": 64, "causal": causal},
                                "gpu_after": {"sm_clock_mhz": 1470}, "rows": rows}
    doc = {"provenance": {"gpu": {"max_sm_clock_mhz": 1980}},
           "runs": [run(False, [{"id": "20/a", "tflops": 440.849}, {"id": "99/cudnn", "tflops": 457.91}]),
                    run(True, [{"id": "20/a", "tflops": 366.6}, {"id": "99/cudnn", "tflops": 377.3}])]}
    (docs / "r.json").write_text(json.dumps(doc))
    # Part VI: a dense and a GQA problem of the same sizes, and a paged one beside a contiguous one.
    srun = lambda extra, rows: {"kind": "attention", "shape": {"batch": 1, "heads": 8, "seqlen": 1,
                                                               "head_dim": 128, "causal": False, **extra},
                                "rows": rows}
    (docs / "s.json").write_text(json.dumps({"runs": [
        srun({}, [{"id": "20/p", "gbps": 100.0}, {"id": "26/g", "gbps": 101.0}]),
        srun({"kv_heads": 2}, [{"id": "26/g", "gbps": 200.0}, {"id": "99/c", "gbps": 160.0}]),
        srun({"kv_heads": 2, "page_size": 64}, [{"id": "29/p", "gbps": 190.0}, {"id": "99/c", "gbps": 150.0}]),
        srun({"q_lens": [3, 5]}, [{"id": "27/v", "gbps": 90.0}]),
        {"kind": "attention", "shape": {"batch": 6, "heads": 8, "seqlen": 4, "head_dim": 128, "causal": False},
         "rows": [{"id": "20/p", "gbps": 120.0}]},
    ]}))
    # per=: a field over another field of the same record (an error in tolerances).
    (docs / "e.json").write_text(json.dumps({"runs": [
        run(False, [{"id": "30/a", "error": {"worst_row_error": 4.0e-4, "tolerance": 1.0e-4}},
                    {"id": "30/b", "error": {"worst_row_error": 5.0e-5, "tolerance": 1.0e-4}},
                    {"id": "30/z", "error": {"worst_row_error": 1.0e-4, "tolerance": 0.0}}])]}))
    # limits.CLOCK.F (scripts/hardware_limits.py): every clock field differs, 100 SMs (not 132), D = 128.
    # At 1500 MHz: tensor peak 614.4 TFLOP/s, exp bound 1228.8; at 1250 (after): 512; at 1980 (max): 811.
    lrun = lambda rows, after=1250: {"kind": "attention", "shape": {"batch": 1, "heads": 1, "seqlen": 1024,
                                                                    "head_dim": 128, "causal": False},
                                     "gpu_after": {"sm_clock_mhz": after}, "rows": rows}
    lgpu = {"compute_capability": 90, "sm_count": 100, "sm_clock_mhz": 1500, "max_sm_clock_mhz": 1980}
    lrows = [{"id": "20/a", "tflops": 307.2}, {"id": "22/b", "tflops": 368.64},
             {"id": "gemm-fp16", "tflops": 491.52, "ceiling": True}]
    (docs / "lim.json").write_text(json.dumps({"provenance": {"gpu": lgpu}, "gpu_after": {"sm_clock_mhz": 1100},
                                               "runs": [lrun(lrows)]}))
    (docs / "idle.json").write_text(json.dumps({"provenance": {"gpu": {**lgpu, "sm_clock_mhz": 345}},
                                                "runs": [lrun(lrows)]}))
    (docs / "log.txt").write_text("DRAM Throughput  %  59.72\nDRAM Throughput  %  6.51\n")
    # vs:file=: the same rows measured twice, in two files (B's 20/a is 10% faster, its cuDNN row 1% slower).
    (docs / "b.json").write_text(json.dumps({"runs": [
        run(False, [{"id": "20/a", "tflops": 400.772}, {"id": "99/cudnn", "tflops": 462.535}]),
        run(True, [{"id": "20/a", "tflops": 333.273}, {"id": "99/cudnn", "tflops": 381.111}])]}))
    m = lambda spec: f"<!-- figure: {spec} -->"
    one = m("r.json id=20/a causal=0 tflops")
    cases = [
        (True, "one value", one + "441 TFLOP/s"),
        (True, "one value, more digits", one + "440.8 TFLOP/s"),
        (False, "one value, wrong", one + "451 TFLOP/s"),
        (False, "one value, last digit off", one + "440.9 TFLOP/s"),
        (True, "bold", one + "**441** TFLOP/s"),
        (True, "a comma after the figure", one + "441, then"),
        (True, "thousands separator", m("r.json /provenance.gpu.max_sm_clock_mhz") + "1,980 MHz"),
        (False, "thousands separator, wrong", m("r.json /provenance.gpu.max_sm_clock_mhz") + "1,970 MHz"),
        (True, "range", m("r.json id=20/a tflops") + "367–441"),
        (False, "range, wrong end", m("r.json id=20/a tflops") + "367–451"),
        (False, "two values, one figure", m("r.json id=20/a tflops") + "441"),
        (True, "max", m("r.json id=20/a tflops max") + "441"),
        (True, "ratio", m("r.json id=20/a tflops vs:id=99/cudnn") + "0.96–0.97×"),
        (False, "ratio, wrong", m("r.json id=20/a tflops vs:id=99/cudnn") + "0.86–0.97×"),
        (True, "pct", m("r.json id=99/cudnn causal=0 tflops vs:id=20/a pct") + "+4%"),
        (True, "top level", m("r.json /provenance.gpu.max_sm_clock_mhz") + "1980 MHz"),
        (True, "per run", m("r.json id=20/a gpu_after.sm_clock_mhz max") + "1470 MHz"),
        (True, "glob", m("r*.json id=99/cudnn tflops") + "377–458"),
        (True, "grep", m(r"log.txt grep=DRAM\sThroughput\s+%\s+([\d.]+)") + "6.5–59.7%"),
        (False, "grep without a group", m(r"log.txt grep=DRAM\sThroughput\s+%\s+[\d.]+") + "6.5–59.7%"),
        (False, "grep cut by a space (the rest read as a filter)",
         m(r'log.txt grep=DRAM\sThroughput "x=1"\s+%\s+([\d.]+)') + "6.5–59.7%"),
        (False, "grep, wrong", m(r"log.txt grep=DRAM\sThroughput\s+%\s+([\d.]+)") + "6.5–60.7%"),
        (False, "no such file", m("missing.json id=20/a tflops") + "441"),
        (False, "no such row", m("r.json id=21/b tflops") + "441"),
        (False, "no figure after the marker", one + "about 441"),
        (True, "in a table cell", "| x | " + one + "441 |"),
        (True, "serving: same problem includes kv_heads", m("s.json id=26/g kv_heads=2 gbps vs:id=99/c") + "1.25×"),
        (True, "serving: '-' selects the property off", m("s.json id=26/g kv_heads=- gbps") + "101"),
        (True, "serving: vs across a property", m("s.json id=26/g kv_heads=2 gbps vs:id=20/p vs:kv_heads=-") + "2.00×"),
        (True, "serving: paged vs contiguous", m("s.json id=29/p gbps vs:id=26/g vs:page_size=-") + "0.95×"),
        (False, "serving: paged vs contiguous, wrong", m("s.json id=29/p gbps vs:id=26/g vs:page_size=-") + "0.85×"),
        (True, "serving: varlen vs a dense problem of other sizes",
         m("s.json id=27/v gbps vs:id=20/p vs:batch=6 vs:seqlen=4 vs:q_lens=-") + "0.75×"),
        (False, "serving: varlen vs a dense problem of other sizes, wrong",
         m("s.json id=27/v gbps vs:id=20/p vs:batch=6 vs:seqlen=4 vs:q_lens=-") + "0.90×"),
        (True, "serving: varlen vs dense, the sizes not named: the dense problem of the same sizes",
         m("s.json id=27/v gbps vs:id=20/p vs:q_lens=-") + "0.90×"),
        (False, "serving: two partners without the filter",
         m("s.json id=26/g kv_heads=2 gbps vs:id=20/p vs:kv_heads=2,-") + "2.00×"),
        (True, "per", m("e.json id=30/a error.worst_row_error per=error.tolerance") + "4.0×"),
        (False, "per, wrong", m("e.json id=30/a error.worst_row_error per=error.tolerance") + "4.1×"),
        (True, "per, range", m("e.json id=30/a,30/b error.worst_row_error per=error.tolerance") + "0.5–4×"),
        (True, "per with vs", m("e.json id=30/a error.worst_row_error per=error.tolerance vs:id=30/b") + "8.0×"),
        (False, "per by zero selects nothing", m("e.json id=30/z error.worst_row_error per=error.tolerance") + "1"),
        (True, "limits: % of the tensor peak at the start clock",
         m("lim.json id=20/a limits.start.pct_of_tensor_peak") + "50%"),
        (False, "limits: % of the tensor peak, wrong",
         m("lim.json id=20/a limits.start.pct_of_tensor_peak") + "51%"),
        (True, "limits: % of the exp bound (D = 128: half the % of the tensor peak)",
         m("lim.json id=20/a limits.start.pct_of_exp_bound") + "25%"),
        (False, "limits: % of the exp bound taken as % of the peak",
         m("lim.json id=20/a limits.start.pct_of_exp_bound") + "50%"),
        (True, "limits: % of the bound with no overlap (the sum)",
         m("lim.json id=20/a limits.start.pct_of_no_overlap_bound") + "75%"),
        (True, "limits: at the clock after the timing", m("lim.json id=20/a limits.after.pct_of_tensor_peak") + "60%"),
        (True, "limits: the peak at the highest clock", m("lim.json id=20/a limits.max.tensor_peak_tflops") + "811 TFLOP/s"),
        (True, "limits: a range over rows", m("lim.json id=2* limits.start.pct_of_tensor_peak") + "50–60%"),
        (True, "limits: the GEMM ceiling's % of the peak",
         m("lim.json id=gemm-fp16 limits.start.pct_of_tensor_peak") + "80%"),
        (False, "limits: the GEMM ceiling has no exp bound",
         m("lim.json id=gemm-fp16 limits.start.pct_of_exp_bound") + "40%"),
        (False, "limits: an idle start clock is an error, not a figure",
         m("idle.json id=20/a limits.start.pct_of_tensor_peak") + "217%"),
        (True, "limits: an idle start clock, the clock after the timing",
         m("idle.json id=20/a limits.after.pct_of_tensor_peak") + "60%"),
        (True, "vs:file: one row over the same row of another file",
         m("r.json id=20/a causal=0 tflops vs:file=b.json") + "1.10×"),
        (False, "vs:file: one row over the same row of another file, wrong",
         m("r.json id=20/a causal=0 tflops vs:file=b.json") + "1.20×"),
        (True, "vs:file: both problems, a range", m("r.json id=20/a tflops vs:file=b.json") + "1.10×"),
        (True, "vs:file: over another row of the other file (vs:id names the partner)",
         m("r.json id=20/a causal=0 tflops vs:file=b.json vs:id=99/cudnn") + "0.953×"),
        (False, "vs:file: the other file's cuDNN row taken as its 20/a row",
         m("r.json id=20/a causal=0 tflops vs:file=b.json vs:id=99/cudnn") + "1.10×"),
        (True, "vs:file: a glob, pct", m("r.json id=99/cudnn causal=0 tflops vs:file=b* pct") + "−1%"),
        (False, "vs:file: the partner is not looked for in the marker's own file",
         m("r.json id=20/a causal=0 tflops vs:file=e.json") + "1.00×"),
        (False, "vs:file: no such file", m("r.json id=20/a causal=0 tflops vs:file=missing.json") + "1.10×"),
        (False, "vs:file: with grep", m(r"log.txt grep=DRAM\sThroughput\s+%\s+([\d.]+) vs:file=b.json") + "1"),
        (False, "a | inside a marker in a table", "| x | " + m("r.json id=20/a|21/b causal=0 tflops") + "441 |"),
    ]
    for ok, what, text in cases:
        expect(ok, what, text, docs)

# Markers in a step's or a lab's README are checked too, their FILE relative to docs/ like a chapter's.
with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    docs = root / "docs"
    (docs / "results").mkdir(parents=True)
    (docs / "results" / "x.json").write_text(json.dumps({"rows": [{"name": "a", "tflops": 123.4}]}))
    right = "<!-- figure: results/x.json name=a tflops -->123 TFLOP/s\n"
    wrong = "<!-- figure: results/x.json name=a tflops -->133 TFLOP/s\n"
    for sub in ("steps/00_x", "labs/L01_x"):
        (root / sub).mkdir(parents=True)
    (docs / "00_x.md").write_text(right)
    (root / "steps" / "00_x" / "README.md").write_text("a step\n\n" + right)
    (root / "labs" / "L01_x" / "README.md").write_text(right)
    total, problems = cf.check_tree(docs)
    if total != 3 or problems:
        failures.append(f"READMEs: 3 right markers, found {total} marker(s), problems {problems}")
    for sub in ("steps/00_x", "labs/L01_x"):
        readme_path = root / sub / "README.md"
        readme_path.write_text("a step\n\n" + wrong)
        total, problems = cf.check_tree(docs)
        where = [(p.relative_to(root).as_posix(), line) for p, line, _, _ in problems]
        if where != [(f"{sub}/README.md", 3)]:
            failures.append(f"{sub}/README.md: a wrong figure must be reported at line 3, found {where}")
        readme_path.write_text(right)

# The repository's own annotated documents pass, and a figure planted in a copy of one fails.
real_docs = ROOT / "docs"
readme = (ROOT / "README.md").read_text()
expect(True, "README.md as committed", readme, real_docs)
marker_at = readme.find("<!-- figure:")
if marker_at < 0:
    failures.append("README.md has no figure marker to plant a wrong figure after")
else:
    end = readme.index("-->", marker_at) + 3
    figure = cf.FIGURE.match(readme[end:]).group(1)
    wrong = str(cf.number(figure) * 1.1 + 1)
    expect(False, "README.md with a planted figure", readme[:end] + wrong + readme[end + len(figure):], real_docs)

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
