#!/usr/bin/env python3
"""scripts/racecheck_filter.py on sample racecheck logs (a CPU test, ctest racecheck_filter).

The samples are written in compute-sanitizer's formats (CUDA 12 and 13: "Error: Race reported
between Write access at KERNEL+0xOFF in FILE:LINE / and Read access at ... [N hazards]"; the hazard
records of --racecheck-report hazard; the older "WARN: ... at 0xOFF in FILE:LINE:FUNCTION"), with
the line numbers the filter itself finds in the sources (bulk_load's lines in tma.cuh, the marked
reads of step 25), so that the test follows edits of those files. The filter must leave out the
proven report and only it: the same report from another kernel, another read line, another write
line, a WAW, a report without source lines, one pair of a report that is not the pattern, an error
of the sanitizer's, or a report it cannot parse must all remain (exit 1); unreadable input exits 2.
"""
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "racecheck_filter.py"
sys.path.insert(0, str(ROOT / "scripts"))
import racecheck_filter  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


pattern = racecheck_filter.find_pattern(ROOT)
WRITE_LINE = pattern.write_lines.start + 2  # inside bulk_load's body (its asm statement)
READ_LINES = sorted(pattern.read_lines)
check(len(READ_LINES) == 2, f"the two marked reads of step 25 (lse and D) are found: {READ_LINES}")
check(len(pattern.write_lines) >= 3, f"bulk_load's lines are found: {pattern.write_lines}")
OUTSIDE_WRITE = pattern.write_lines.start - 3  # a line of tma.cuh above bulk_load
OTHER_READ = READ_LINES[0] - 1  # an unmarked line of step 25

KERNEL = ("void <unnamed>::hopper_backward_kernel<<unnamed>::Tile<64, __half, 2, 128>, false>(CUtensorMap, "
          "CUtensorMap, CUtensorMap, CUtensorMap, const float *, const float *, float *, __half *, __half *, int, "
          "int, float, float, bool)")
TMA = "/work/main/common/device/hopper/tma.cuh"
STEP = "/work/main/steps/25_hopper_backward/hopper_backward.cu"
P = "========= "


def race(head, *others, severity="Error"):
    """An analysis report: the first access and the others it races with, each (kind, loc, hazards)."""
    kind, loc = head
    lines = [f"{P}{severity}: Race reported between {kind} access at {loc}"]
    for kind, loc, hazards in others:
        lines.append(f"{P}    and {kind} access at {loc} [{hazards} hazards]")
    lines.append("=========")
    return lines


def at(function, offset, file=None, line=None):
    return f"{function}+{offset}" + (f" in {file}:{line}" if file else "")


def hazard(kind, first, second, value="Current Value : 0, Incoming Value : 1"):
    (k1, loc1), (k2, loc2) = first, second
    lines = [f"{P}Error: Potential {kind} hazard detected at __shared__ 0x31c00 in block (0,1,0) :",
             f"{P}    {k1} Thread (160,0,0) at {loc1}", f"{P}    {k2} Thread (0,0,0) at {loc2}"]
    if value:
        lines.append(f"{P}    {value}")
    lines.append("=========")
    return lines


def log(*blocks, summary=None, program=("25/head_by_head  pass",)):
    lines = [f"{P}COMPUTE-SANITIZER", *program]
    count = 0
    for b in blocks:
        lines += b
        count += 1
    n = count if summary is None else summary
    lines.append(f"{P}RACECHECK SUMMARY: {n} hazard{'s' if n != 1 else ''} displayed ({n} errors, 0 warnings)")
    return "\n".join(lines) + "\n"


def run(text=None, args=()):
    r = subprocess.run([sys.executable, str(SCRIPT), *args], input=None if text is None else text.encode(),
                       capture_output=True)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


W = ("Write", at(KERNEL, "0x1c30", TMA, WRITE_LINE))
R_LSE = ("Read", at(KERNEL, "0x2a10", STEP, READ_LINES[0]))
R_D = ("Read", at(KERNEL, "0x3b80", STEP, READ_LINES[1]))
proven = race(W, (*R_LSE, 7), (*R_D, 7))

# 1. The proven report alone: left out, exit 0, and the why names the chapter.
rc, out, _ = run(log(proven))
check(rc == 0, f"the proven report alone: exit 0 (got {rc})")
check("left out 1 report(s) (14 hazards)" in out, "it says how many reports and hazards it left out")
check('docs/25_hopper_backward.md, "What racecheck reports"' in out, "and points at the chapter's section")
check("Race reported" not in out, "the proven report is not echoed")
check("25/head_by_head  pass" in out and "RACECHECK SUMMARY" in out, "the program's lines and the summary are echoed")

# 2. The same from a file, and with the read listed first (the WAR order of a report).
with tempfile.TemporaryDirectory() as tmp:
    path = pathlib.Path(tmp) / "racecheck.log"
    path.write_text(log(race(R_LSE, (*W, 3)), race(R_D, (*W, 3))))
    rc, out, _ = run(args=[str(path)])
    check(rc == 0, f"read-first reports from a file: exit 0 (got {rc})")
    check("left out 2 report(s) (6 hazards)" in out, "both left out")
    rc, _, err = run(args=[str(pathlib.Path(tmp) / "missing.log")])
    check(rc == 2, f"a missing log: exit 2 (got {rc})")
    check("cannot read the log" in err, "with the reason")

# 3. Not the pattern: each of these must remain.
other_kernel = KERNEL.replace("hopper_backward_kernel", "attention_kernel")
not_ours = {
    "another kernel": race(("Write", at(other_kernel, "0x1c30", TMA, WRITE_LINE)),
                           ("Read", at(other_kernel, "0x2a10", STEP, READ_LINES[0]), 7)),
    "another read line": race(W, ("Read", at(KERNEL, "0x2a00", STEP, OTHER_READ), 7)),
    "a write outside bulk_load": race(("Write", at(KERNEL, "0x1c00", TMA, OUTSIDE_WRITE)), (*R_LSE, 7)),
    "another file with the same name's tail": race(("Write", at(KERNEL, "0x1c30", "/x/mycommon/device/hopper/tma.cuh",
                                                                 WRITE_LINE)), (*R_LSE, 7)),
    "two writes (WAW shape)": race(W, ("Write", at(KERNEL, "0x1c30", TMA, WRITE_LINE), 2)),
    "one pair of the report not the pattern": race(W, (*R_LSE, 7), ("Read", at(KERNEL, "0x2a00", STEP, OTHER_READ), 1)),
    "no source lines (no -lineinfo)": race(("Write", at(KERNEL, "0x1c30")), ("Read", at(KERNEL, "0x2a10"), 7)),
    "a WAW hazard record": hazard("WAW", W, ("Write", W[1])),
    "a hazard record on another line": hazard("RAW", W, ("Read", at(KERNEL, "0x2a00", STEP, OTHER_READ))),
}
for what, block in not_ours.items():
    rc, out, _ = run(log(block))
    check(rc == 1, f"{what}: remains, exit 1 (got {rc})")
    check(block[0] in out, f"{what}: echoed")

# A line inside a report that the script does not know (an inlining note, say) keeps the report:
# it must not hide an access after it.
odd = proven[:2] + [f"{P}    inlined from somewhere", proven[2]] + proven[3:]
rc, out, _ = run(log(odd))
check(rc == 1 and "inlined from somewhere" in out, f"a report with a line the filter does not know: kept (got {rc})")

# 4. A mixed log: the proven report left out, the other echoed, exit 1.
other = race(("Write", at(KERNEL, "0x900", STEP, OTHER_READ)), ("Read", at(KERNEL, "0x980", STEP, OTHER_READ + 2), 32))
rc, out, _ = run(log(proven, other))
check(rc == 1, f"a mixed log: exit 1 (got {rc})")
check("left out 1 report(s)" in out and other[0] in out and "1 other report(s) remain" in out,
      "the proven one left out, the other echoed and counted")

# 5. The hazard records of --racecheck-report hazard (RAW and WAR) and the older format.
rc, out, _ = run(log(hazard("WAR", R_D, W), hazard("RAW", W, R_LSE)))
check(rc == 0, f"proven RAW and WAR hazard records: exit 0 (got {rc})")
old_style = [f"{P}WARN: Race reported between Write access at 0x00001c30 in {TMA}:{WRITE_LINE}:{KERNEL}",
             f"{P}    and Read access at 0x00002a10 in {STEP}:{READ_LINES[1]}:{KERNEL} [4 hazards]", "========="]
rc, _, _ = run(log(old_style))
check(rc == 0, f"the older 'at 0xOFF in FILE:LINE:FUNCTION' form: exit 0 (got {rc})")

# 6. What the sanitizer says besides race reports.
rc, _, _ = run(f"{P}COMPUTE-SANITIZER\n{P}RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
check(rc == 0, f"a clean log: exit 0 (got {rc})")
rc, out, _ = run(log(proven, program=(f"{P}Error: process didn't terminate successfully",)))
check(rc == 1, f"a sanitizer error besides the proven report: exit 1 (got {rc})")
rc, out, _ = run(log(proven, summary=2))
check(rc == 1 and "recognised 1" in out, f"the summary counts a report the filter did not parse: exit 1 (got {rc})")
rc, _, _ = run("")
check(rc == 2, f"an empty log: exit 2 (got {rc})")
rc, _, _ = run("25/head_by_head pass\n")
check(rc == 2, f"a log with no sanitizer output: exit 2 (got {rc})")

# 7. The sources: without the marker, the filter refuses (exit 2) rather than guess the lines.
with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    for rel in (racecheck_filter.WRITE_FILE, racecheck_filter.READ_FILE):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text((ROOT / rel).read_text())
    step = root / racecheck_filter.READ_FILE
    step.write_text(step.read_text().replace(racecheck_filter.MARKER, "racecheck"))
    rc, _, err = run(log(proven), args=["--source-root", str(root)])
    check(rc == 2 and "marker" in err, f"a step file without the markers: exit 2 (got {rc})")

sys.exit(1 if failures else 0)
