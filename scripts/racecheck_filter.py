#!/usr/bin/env python3
"""Leave out of a compute-sanitizer racecheck log the one report chapter 25 proves is the tool's.

    python3 scripts/racecheck_filter.py LOG        (or the log on stdin, or LOG = -)

In step 25's backward kernel racecheck reports the bulk copy of a stage's per-row statistics
(hopper::bulk_load, a cp.async.bulk into the ring stage) against the consumers' loads of
those statistics, once the two-stage ring wraps. docs/25_hopper_backward.md, "What racecheck
reports", shows why the reuse is ordered (the stage is released on its empty mbarrier after the
last read, and the producer waits for that release before the next copy). This script recognises
exactly that report and nothing broader:

  * kernel: hopper_backward_kernel, on both accesses;
  * the write: inside bulk_load in common/device/hopper/tma.cuh (its lines found here, at run time);
  * the read: a line of steps/25_hopper_backward/hopper_backward.cu that carries the marker
    comment `racecheck: see chapter 25, "What racecheck reports"` (found at run time, so edits
    above those lines do not break the filter);
  * a race (analysis) report is left out only if every access it pairs with its first is such a
    pair; a hazard report (--racecheck-report hazard or all) only if it is a RAW or WAR between
    such a write and such a read. Reports without source lines (no -lineinfo) are never left out.

Every other line is echoed as it came. The script then says how many reports it left out and why
(one line pointing at the chapter), and how many others remain.

Exit status: 0 nothing else remains, 1 another report (or a sanitizer error, or a report in a
format this script does not know) remains, 2 the log or the sources cannot be read.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

KERNEL = "hopper_backward_kernel"
WRITE_FILE = "common/device/hopper/tma.cuh"
WRITE_FUNCTION = "bulk_load"
READ_FILE = "steps/25_hopper_backward/hopper_backward.cu"
MARKER = 'racecheck: see chapter 25, "What racecheck reports"'
CHAPTER = 'docs/25_hopper_backward.md, "What racecheck reports"'

EXIT_CLEAN, EXIT_REMAINING, EXIT_UNREADABLE = 0, 1, 2

# compute-sanitizer prefixes its own lines with "=========" (then spaces); the program's are bare.
PREFIX = re.compile(r"^(?P<prefix>=+)(?P<rest>.*)$")
SEVERITY = r"(?P<severity>Error|Warning|Info|ERROR|WARNING|WARN|INFO)"
RACE_HEAD = re.compile(SEVERITY + r": Race reported between (?P<kind>Read|Write) access at (?P<loc>.+?)\s*$")
RACE_AND = re.compile(r"^and (?P<kind>Read|Write) access at (?P<loc>.+?)(?:\s*\[(?P<hazards>\d+) hazards?\])?\s*$")
HAZARD_HEAD = re.compile(SEVERITY + r": Potential (?P<type>RAW|WAR|WAW) hazard detected at __shared__ \S+ in block")
HAZARD_THREAD = re.compile(r"^(?P<kind>Read|Write) Thread \([\d, ]+\) at (?P<loc>.+?)\s*$")
HAZARD_EXTRA = re.compile(r"^(Current Value|Saved host backtrace|Host Frame|\(invalid memcpy_async)")
SUMMARY = re.compile(r"RACECHECK SUMMARY: (?P<count>\d+) hazards? displayed")
# Any other line of the sanitizer's that reports something (an error it found, a failed program).
OTHER_REPORT = re.compile(SEVERITY + r":|^Potential |^Deadlock detected|^Program hit|^Internal|"
                          r"^Target application returned an error")

# Where an access happened, as racecheck prints it:
#   kernel+0x1f0 in /path/file.cu:40      (CUDA 12 and 13, built with -lineinfo)
#   kernel+0x1f0                          (without -lineinfo: no source line)
#   0x000001f0 in /path/file.cu:40:kernel (older cuda-memcheck style)
LOC_NEW = re.compile(r"^(?P<function>.*)\+0x[0-9a-fA-F]+(?: in (?P<file>.+):(?P<line>\d+))?$")
LOC_OLD = re.compile(r"^0x[0-9a-fA-F]+ in (?P<file>.+?):(?P<line>\d+):(?P<function>.+)$")


@dataclass(frozen=True)
class Access:
    kind: str  # Read or Write
    function: str
    file: str | None
    line: int | None


def parse_location(kind: str, loc: str) -> Access:
    m = LOC_OLD.match(loc) or LOC_NEW.match(loc)
    if not m:
        return Access(kind, loc, None, None)
    line = m.group("line")
    return Access(kind, m.group("function"), m.group("file"), int(line) if line else None)


def same_file(reported: str, repo_path: str) -> bool:
    """The reported path is the repository file: its path ends with it (or, with no directory in
    it at all, is its name)."""
    reported = reported.replace("\\", "/")
    if "/" not in reported:
        return reported == repo_path.rsplit("/", 1)[-1]
    return reported == repo_path or reported.endswith("/" + repo_path)


@dataclass
class Pattern:
    write_lines: range
    read_lines: frozenset[int]

    def is_write(self, a: Access) -> bool:
        return (a.kind == "Write" and KERNEL in a.function and a.file is not None and a.line is not None
                and same_file(a.file, WRITE_FILE) and a.line in self.write_lines)

    def is_read(self, a: Access) -> bool:
        return (a.kind == "Read" and KERNEL in a.function and a.file is not None and a.line is not None
                and same_file(a.file, READ_FILE) and a.line in self.read_lines)

    def is_pair(self, a: Access, b: Access) -> bool:
        return (self.is_write(a) and self.is_read(b)) or (self.is_read(a) and self.is_write(b))


def find_pattern(root: Path) -> Pattern:
    """The lines of bulk_load in tma.cuh and the marked read lines of step 25, from the sources."""
    tma = (root / WRITE_FILE).read_text(encoding="utf-8").splitlines()
    start = next((i for i, text in enumerate(tma) if re.search(r"\bvoid\s+" + WRITE_FUNCTION + r"\s*\(", text)), None)
    if start is None:
        raise ValueError(f"no function {WRITE_FUNCTION} in {WRITE_FILE}")
    depth, opened, end = 0, False, None
    for i in range(start, len(tma)):
        for ch in tma[i]:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
        if opened and depth == 0:
            end = i
            break
    if end is None:
        raise ValueError(f"the body of {WRITE_FUNCTION} in {WRITE_FILE} does not close")
    step = (root / READ_FILE).read_text(encoding="utf-8").splitlines()
    marked = frozenset(i + 1 for i, text in enumerate(step) if MARKER in text)
    if not marked:
        raise ValueError(f"no line of {READ_FILE} carries the marker `{MARKER}`")
    return Pattern(range(start + 1, end + 2), marked)  # 1-based, inclusive of the closing line


@dataclass
class Block:
    """One report: its raw lines, the accesses it names, and whether it is the proven pattern."""
    lines: list[str] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)
    hazards: int = 0
    kind: str = "race"  # race (an analysis report) or hazard (a hazard report) or other
    hazard_type: str = ""
    unknown: bool = False  # a line inside it this script does not know: never left out

    def proven(self, pattern: Pattern) -> bool:
        if self.unknown:
            return False
        if self.kind == "race":
            head, others = self.accesses[0], self.accesses[1:]
            return bool(others) and all(pattern.is_pair(head, other) for other in others)
        if self.kind == "hazard":
            return (self.hazard_type in ("RAW", "WAR") and len(self.accesses) == 2
                    and pattern.is_pair(self.accesses[0], self.accesses[1]))
        return False


def strip_prefix(line: str) -> tuple[bool, str]:
    m = PREFIX.match(line)
    return (True, m.group("rest").strip()) if m else (False, line.strip())


def filter_log(text: str, pattern: Pattern, out) -> int:
    lines = text.splitlines()
    if not any(PREFIX.match(line) for line in lines):
        print("racecheck_filter: no compute-sanitizer output in the log (no '=========' lines)", file=sys.stderr)
        return EXIT_UNREADABLE
    kept_reports = 0
    left_out: list[Block] = []
    summary_count = 0
    parsed_records = 0
    unlined = 0
    i = 0
    while i < len(lines):
        ours, body = strip_prefix(lines[i])
        head_race = RACE_HEAD.match(body) if ours else None
        head_hazard = HAZARD_HEAD.match(body) if ours else None
        if not (head_race or head_hazard):
            if ours and (m := SUMMARY.search(body)):
                summary_count += int(m.group("count"))
            elif ours and (OTHER_REPORT.search(body) or RACE_AND.match(body) or HAZARD_THREAD.match(body)):
                kept_reports += 1  # a report of another kind, or an access line outside any report
            print(lines[i], file=out)
            i += 1
            continue
        block = Block(lines=[lines[i]])
        if head_race:
            block.accesses.append(parse_location(head_race.group("kind"), head_race.group("loc")))
        else:
            block.kind, block.hazard_type = "hazard", head_hazard.group("type")
        i += 1
        while i < len(lines):
            ours, body = strip_prefix(lines[i])
            if not ours or not body or RACE_HEAD.match(body) or HAZARD_HEAD.match(body) or SUMMARY.search(body):
                break
            if head_race and (m := RACE_AND.match(body)):
                block.accesses.append(parse_location(m.group("kind"), m.group("loc")))
                block.hazards += int(m.group("hazards") or 0)
            elif head_hazard and (m := HAZARD_THREAD.match(body)):
                block.accesses.append(parse_location(m.group("kind"), m.group("loc")))
            elif not (head_hazard and HAZARD_EXTRA.match(body)):
                block.unknown = True
            block.lines.append(lines[i])
            i += 1
        if block.kind == "hazard":
            block.hazards = 1
        parsed_records += 1
        if block.proven(pattern):
            left_out.append(block)
            continue
        kept_reports += 1
        unlined += any(a.line is None for a in block.accesses)
        for line in block.lines:
            print(line, file=out)

    if left_out:
        hazards = sum(b.hazards for b in left_out)
        reads = ",".join(str(n) for n in sorted(pattern.read_lines))
        print(f"racecheck_filter: left out {len(left_out)} report(s) ({hazards} hazards) in {KERNEL}: the "
              f"{WRITE_FUNCTION} write ({WRITE_FILE}:{pattern.write_lines.start}-{pattern.write_lines.stop - 1}) "
              f"against the lse/D reads ({READ_FILE}:{reads}), a stage refilled only after its release on the "
              f"empty mbarrier; the argument that it is the tool's, not a race: {CHAPTER}", file=out)
    if summary_count > parsed_records:
        print(f"racecheck_filter: the sanitizer counts {summary_count} report(s), this script recognised "
              f"{parsed_records}: a report in a format it does not know is kept as remaining", file=out)
        kept_reports += summary_count - parsed_records
    if unlined:
        print(f"racecheck_filter: {unlined} report(s) name no source line (built without -lineinfo?): "
              f"never left out", file=out)
    if kept_reports:
        print(f"racecheck_filter: {kept_reports} other report(s) remain", file=out)
        return EXIT_REMAINING
    print("racecheck_filter: nothing else remains", file=out)
    return EXIT_CLEAN


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", nargs="?", default="-", help="the racecheck log (default: stdin)")
    parser.add_argument("--source-root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the repository the log's kernels were built from (default: this one)")
    args = parser.parse_args(argv)
    try:
        pattern = find_pattern(args.source_root)
    except (OSError, ValueError) as e:
        print(f"racecheck_filter: cannot find the proven pattern's lines: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        if args.log == "-":
            text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        else:
            text = Path(args.log).read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        print(f"racecheck_filter: cannot read the log: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    return filter_log(text, pattern, sys.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
