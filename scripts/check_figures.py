#!/usr/bin/env python3
"""Checks the figures quoted in prose against the results files they come from (a CPU test,
docs_figures_true).

A prose figure is annotated with a marker right before it; the checker recomputes the value(s)
from the named file and fails if the prose differs beyond the rounding it is written with:

    ... runs at <!-- figure: results/h200/X.json id=20/persistent_3stage seqlen=4096 head_dim=128 tflops -->666 TFLOP/s

    <!-- figure: FILE[,FILE...] [KEY=VALUE ...] FIELD [per=FIELD2] [vs:KEY=VALUE ...] [scale=S] [pct] -->FIGURE

FILE      relative to docs/ (like scripts/make_tables.py's tables); several files are pooled, and
          a name with * is a glob.
records   a ladder file gives one record per row, with its run's shape, kind and gpu_after merged
          in (id, tflops, median_ms, batch, heads, seqlen, head_dim, causal, dtype, ...); a
          peers/crosscheck file one per row (name, tflops, batch, ...); a row's `kernels` list is
          expanded (kernels.registers, kernels.dynamic_smem, ...). A path starting with "/" is
          read from the file's top level (/provenance.gpu.sm_clock_mhz).
          A ladder row also has `limits.CLOCK.F` (scripts/hardware_limits.py, the numbers of
          make_tables.py's limits table): CLOCK start, after or max (the table's clock=), F one of
          pct_of_tensor_peak, pct_of_exp_bound, pct_of_no_overlap_bound (the sum of the two),
          tensor_peak_tflops, exp_bound_tflops, clock_mhz;
          a file from which the limit cannot be computed (an idle start clock) is an error.
          A text file (.txt, .csv, .md): `grep=REGEX` (no spaces; \\s for one), every match's
          first group is a value; a grep= marker has no other selecting words (a KEY=VALUE after
          it is a regex cut by a space, an error), and its REGEX must have a group.
KEY=VALUE keeps the records whose KEY equals VALUE; VALUE may list alternatives (a,b) or end in
          * (a prefix); "-" keeps those without the key (a Part VI property that is off:
          kv_heads=-). Booleans are 0/1. dtype defaults to fp16 where a record has none.
FIELD     the number to take (dotted path).
per=F2    each record's FIELD divided by the same record's F2 (error.worst_row_error
          per=error.tolerance: how many tolerances the worst row is off); with vs:, both sides.
vs:K=V    a ratio: each selected record's FIELD divided by FIELD of the record of the same
          problem (batch, heads, seqlen, head_dim, causal, dtype, and the Part VI properties
          kv_heads, kv_seqlen, page_size, q_lens; a key that a vs: filter names is left out) that
          matches all the vs: filters.
vs:file=FILE[,FILE...]
          a ratio across files: the partner is looked for only in these files (resolved like
          FILE: relative to docs/, * a glob), not in the marker's own, and it must be the SAME
          row there: the record's id (a ladder row) or name (a peers row) joins the problem's
          keys, unless a vs: filter names it. `results/h200/A.json id=20/x tflops
          vs:file=results/h200/B.json` is row 20/x of A over row 20/x of B, same problem;
          add vs:id=99/cudnn to divide by B's cuDNN row instead. JSON files only (no grep=, no
          top-level /path).
scale=S   multiply every value by S (e.g. 100 for a fraction quoted as a percentage);
pct       the value as a percentage change, 100·(v − 1) (with vs: "+17%").
abs       the absolute value (with pct: "differ by up to 17%" for ratios either side of 1).

FIGURE is the text right after the marker: a number ("666", "0.93×", "1,980") or a range
("624–666", "0.93-1.19"), optionally bold or signed. A single number must match every selected
value (one record, or identical values) unless the marker says `max`, `min` or `mean`; a range
must equal [min, max] of the selected values. Each end may differ from the recomputed value by
half a unit of its last written digit (a figure written "1.2" holds values in [1.15, 1.25]).

Where markers are checked: every docs/**/*.md (chapters, part introductions, docs/START.md,
notes), the repository's README.md, every steps/*/README.md and labs/*/README.md, and
examples/README.md and python/README.md. In all of
them a marker's FILE is relative to docs/ (DOCS_DIR), never to the file the marker is in: a marker
reads the same wherever it stands, so a figure can move between a chapter and a step's or a lab's
README unchanged.

    scripts/check_figures.py [DOCS_DIR]           # check every document listed above
    scripts/check_figures.py --query 'MARKER'     # print the values a marker selects
"""
import argparse
import json
import math
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import hardware_limits  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- figure: (.*?) -->")
NUMBER = r"[-+−]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
FIGURE = re.compile(r"\s*(?:\*\*)?\s*(" + NUMBER + r")(?:\s*(?:–|-|to)\s*(" + NUMBER + r"))?")
PROBLEM_KEYS = ("batch", "heads", "seqlen", "head_dim", "causal", "dtype")
# Part VI's properties (present only where they are on) are part of a problem too. A key that a vs:
# filter names is not: "vs:id=20/persistent vs:kv_heads=-" compares a GQA row with the dense
# problem, "vs:q_lens=- vs:batch=6 vs:seqlen=8192" a varlen batch with a dense one.
SERVING_KEYS = ("kv_heads", "kv_seqlen", "page_size", "q_lens")


def flatten_records(doc):
    """One dict per measured row (see the module docstring)."""
    recs = []
    if isinstance(doc, dict) and "runs" in doc:
        for run in doc["runs"]:
            base = dict(run.get("shape", {}))
            base["kind"] = run.get("kind")
            base["gpu_after"] = run.get("gpu_after", {})
            for row in run.get("rows", []):
                rec = {**base, **row}
                add_limits(rec, doc, run, row)
                recs.append(rec)
    elif isinstance(doc, dict) and "rows" in doc:
        recs = [dict(r) for r in doc["rows"]]
    else:
        recs = [doc if isinstance(doc, dict) else {"value": doc}]
    for r in recs:
        r.setdefault("dtype", "fp16")
    return recs


def add_limits(rec, doc, run, row):
    """rec["limits"][clock] = the row's limits at each clock (hardware_limits.row_limits); where a
    clock cannot be used, rec["limits_errors"][clock] says why (raised only if a marker asks)."""
    for clock in hardware_limits.CLOCKS:
        try:
            lim = hardware_limits.row_limits(doc, run, row, clock)
        except hardware_limits.LimitError as e:
            rec.setdefault("limits_errors", {})[clock] = str(e)
            continue
        if lim is not None:
            rec.setdefault("limits", {})[clock] = lim


def lookup(rec, path):
    """The values at a dotted path; lists along the way are expanded."""
    vals = [rec]
    for part in path.split("."):
        nxt = []
        for v in vals:
            if isinstance(v, list):
                nxt += [x.get(part) for x in v if isinstance(x, dict) and part in x]
            elif isinstance(v, dict) and part in v:
                nxt.append(v[part])
        vals = nxt
    out = []
    for v in vals:
        out += v if isinstance(v, list) else [v]
    return out


def matches(rec, key, want):
    got = lookup(rec, key)
    if want == "-":  # the key is absent: a Part VI property that is off
        return not got
    if not got:
        return False
    for alt in want.split(","):
        for g in got:
            if isinstance(g, bool):
                g = int(g)
            if alt.endswith("*") and str(g).startswith(alt[:-1]):
                return True
            if str(g) == alt:
                return True
            try:
                if float(g) == float(alt):
                    return True
            except (TypeError, ValueError):
                pass
    return False


def parse_spec(text):
    words = text.split()
    spec = {"files": words[0].split(","), "filters": [], "vs": [], "field": None, "vs_files": None,
            "scale": 1.0, "pct": False, "abs": False, "agg": None, "grep": None, "per": None}
    for w in words[1:]:
        if w.startswith("vs:file="):
            if spec["vs_files"] is not None:
                raise ValueError("vs:file= given twice (list the files in one, comma-separated)")
            spec["vs_files"] = [f for f in w[len("vs:file="):].split(",") if f]
            if not spec["vs_files"]:
                raise ValueError("vs:file= names no file")
        elif w.startswith("vs:"):
            k, _, v = w[3:].partition("=")
            spec["vs"].append((k, v))
        elif w.startswith("grep="):
            spec["grep"] = w[5:].replace("\\s", " ")
        elif w.startswith("per="):
            spec["per"] = w[4:]
        elif w.startswith("scale="):
            spec["scale"] = float(w[6:])
        elif w in ("pct", "abs"):
            spec[w] = True
        elif w in ("max", "min", "mean"):
            spec["agg"] = w
        elif "=" in w:
            spec["filters"].append(tuple(w.split("=", 1)))
        elif spec["field"] is None:
            spec["field"] = w
        else:
            raise ValueError(f"unexpected word {w!r}")
    return spec


def file_names(names, docs):
    """The files a marker's FILE list names, relative to docs/ (a name with * is a glob, sorted)."""
    out = []
    for name in names:
        found = sorted(str(p.relative_to(docs)) for p in docs.glob(name)) if "*" in name else [name]
        if not found:
            raise ValueError(f"{name}: no file under {docs} matches")
        out += found
    return out


def json_records(names, docs):
    recs = []
    for name in names:
        path = docs / name
        if not path.exists():
            raise ValueError(f"{name}: no such file under {docs}")
        recs += flatten_records(json.loads(path.read_text()))
    return recs


IDENTITY_KEYS = ("id", "name")  # with vs:file=, the partner is the same row of the other file


def values(spec, docs):
    """The numbers a marker selects (raises ValueError with a reason when it cannot)."""
    out = []
    names = file_names(spec["files"], docs)
    if spec["grep"] is not None and (spec["filters"] or spec["vs"] or spec["field"] or spec["per"]):
        raise ValueError(f"grep= takes no KEY=VALUE, FIELD, per= or vs: words (a space ends the regex: "
                         f"write \\s; the regex read is {spec['grep']!r})")
    if spec["vs_files"] is not None and spec["grep"] is not None:
        raise ValueError("vs:file= compares JSON rows; it cannot be used with grep=")
    if spec["vs_files"] is not None and (spec["field"] or "").startswith("/"):
        raise ValueError("vs:file= compares rows; it cannot be used with a top-level /FIELD")
    recs = []
    for name in names:
        path = docs / name
        if not path.exists():
            raise ValueError(f"{name}: no such file under {docs}")
        if spec["grep"] is not None:
            if re.compile(spec["grep"]).groups < 1:
                raise ValueError(f"grep={spec['grep']} has no (group) to take the value from")
            for m in re.finditer(spec["grep"], path.read_text()):
                out.append(float(m.group(1).replace(",", "")))
            continue
        if spec["field"] is None:
            raise ValueError("no FIELD named")
        doc = json.loads(path.read_text())
        if spec["field"].startswith("/"):
            out += [v for v in lookup(doc, spec["field"][1:]) if isinstance(v, (int, float))]
            continue
        recs += flatten_records(doc)
    # The records of all the files are pooled: a vs: partner may come from another file. With
    # vs:file=, the partners come from those files only, and the row's identity must match too.
    partner_recs = recs if spec["vs_files"] is None else json_records(file_names(spec["vs_files"], docs), docs)
    chosen = [r for r in recs if all(matches(r, k, v) for k, v in spec["filters"])]
    def numbers(rec):
        field = spec["field"].split(".")
        if field[0] == "limits" and len(field) > 1 and field[1] in rec.get("limits_errors", {}):
            raise ValueError(f"{spec['field']}: {rec['limits_errors'][field[1]]}")
        got = [v for v in lookup(rec, spec["field"]) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if spec["per"] is None:
            return got
        per = [v for v in lookup(rec, spec["per"]) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not per or per[0] == 0:
            return []  # nothing to divide by: the record gives no value
        return [v / per[0] for v in got]

    for r in chosen:
        vs = numbers(r)
        if spec["vs"] or spec["vs_files"] is not None:
            named = {k for k, _ in spec["vs"]}
            identity = IDENTITY_KEYS if spec["vs_files"] is not None else ()
            keys = tuple(k for k in PROBLEM_KEYS + SERVING_KEYS + identity if k not in named)
            key = tuple(str(r.get(k)) for k in keys)
            partners = [p for p in partner_recs if tuple(str(p.get(k)) for k in keys) == key
                        and all(matches(p, k, v) for k, v in spec["vs"])]
            if len(partners) != 1:
                raise ValueError(f"{len(partners)} records match the vs: filters for "
                                 f"{dict(zip(keys, key))} (need exactly one)")
            den = numbers(partners[0])
            vs = [v / den[0] for v in vs] if den else []
        out += vs
    if spec["pct"]:
        out = [100 * (v - 1) for v in out]
    if spec["abs"]:
        out = [abs(v) for v in out]
    out = [v * spec["scale"] for v in out]
    if not out:
        raise ValueError("the marker selects no value")
    return out


def number(text):
    return float(text.replace(",", "").replace("−", "-"))


def half_unit(text):
    """Half a unit of the last written digit: the rounding a figure is written with."""
    frac = text.split(".")[1] if "." in text else ""
    return 0.5 * 10 ** -len(frac)


def within(written, value):
    return abs(number(written) - value) <= half_unit(written) * (1 + 1e-9) + 1e-12


def check_one(spec_text, prose, docs):
    """None if the figure after the marker is what the file says; otherwise the reason."""
    try:
        spec = parse_spec(spec_text)
        vals = values(spec, docs)
    except (ValueError, KeyError, json.JSONDecodeError, re.error) as e:
        return f"cannot evaluate: {e}"
    m = FIGURE.match(prose)
    if not m:
        return f"no figure right after the marker (found {prose[:30]!r})"
    lo_text, hi_text = m.group(1), m.group(2)
    shown = f"{lo_text}–{hi_text}" if hi_text else lo_text
    lo, hi = min(vals), max(vals)
    want = "–".join(dict.fromkeys(f"{v:.4g}" for v in (lo, hi)))
    if hi_text:
        if within(lo_text, lo) and within(hi_text, hi):
            return None
        return f"the prose says {shown}, the file gives {want} ({len(vals)} values)"
    agg = spec["agg"]
    if agg:
        v = {"max": hi, "min": lo, "mean": sum(vals) / len(vals)}[agg]
        return None if within(lo_text, v) else f"the prose says {shown}, the file's {agg} is {v:.4g}"
    if all(within(lo_text, v) for v in vals):
        return None
    if len(vals) > 1:
        return f"the prose says {shown}, the marker selects {len(vals)} values {want} (add max/min/mean, or narrow it)"
    return f"the prose says {shown}, the file gives {vals[0]:.4g}"


def check_text(text, docs):
    """[(line, marker, problem)] for every marker of one document."""
    problems = []
    for m in MARKER.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text.startswith("|", line_start) and "|" in m.group(1):
            # A table cell ends at the first |, comment or not: the marker would break the table.
            problems.append((text.count("\n", 0, m.start()) + 1, m.group(1),
                             "a marker in a table row must not contain | (write [ai][nx], not (?:in|ax))"))
            continue
        problem = check_one(m.group(1), text[m.end():m.end() + 80], docs)
        if problem:
            line = text.count("\n", 0, m.start()) + 1
            problems.append((line, m.group(1), problem))
    return problems


def documents(docs):
    """Every document whose markers are checked (see the docstring); FILE is relative to docs/."""
    out = sorted(docs.rglob("*.md"))
    root = docs.parent
    readme = root / "README.md"
    if readme.exists():
        out.append(readme)
    out += sorted(root.glob("steps/*/README.md")) + sorted(root.glob("labs/*/README.md"))
    out += [p for p in (root / "examples/README.md", root / "python/README.md") if p.exists()]
    return out


def check_tree(docs):
    """(markers, [(path, line, marker, problem)]) over every document of the tree."""
    total, problems = 0, []
    for path in documents(docs):
        text = path.read_text()
        total += len(MARKER.findall(text))
        problems += [(path, line, spec, problem) for line, spec, problem in check_text(text, docs)]
    return total, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", nargs="?", default=str(ROOT / "docs"))
    ap.add_argument("--query", help="print the values a marker's spec selects")
    args = ap.parse_args()
    docs = pathlib.Path(args.docs)
    if args.query:
        spec = args.query.replace("<!-- figure:", "").replace("-->", "").strip()
        vals = values(parse_spec(spec), docs)
        print(f"{len(vals)} value(s), min {min(vals):.6g}, max {max(vals):.6g}:",
              ", ".join(f"{v:.6g}" for v in vals))
        return 0
    total, problems = check_tree(docs)
    for path, line, spec, problem in problems:
        print(f"{path.relative_to(docs.parent) if docs.parent in path.parents else path}:{line}: "
              f"{problem}\n    <!-- figure: {spec} -->")
    print(f"{total} figure marker(s), {len(problems)} wrong")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
