#!/usr/bin/env python3
"""Regenerates the measured tables in docs/ from the results JSON under docs/results/.

A chapter asks for a table with a marker pair; everything between them is replaced:

    <!-- table: ladder FILE [ids=00/naive,03/] -->
    ...generated...
    <!-- end table -->

    <!-- table: resources FILE [ids=...] -->          registers, spills, shared memory, occupancy
    <!-- table: bench FILE[,FILE...] peers=FILE d=64 causal=0 [ids=...] -->
        TFLOP/s per N for each variant, with the peers and the ratio to PyTorch's flash backend
    <!-- table: ncu FILE.csv [ids=...] -->            Nsight Compute counters per (variant, D)
    <!-- table: csv FILE.csv [ids=...] [cols=0,2,5] -->  a summary CSV (first column the id) as is
    <!-- table: ablation FILE[,FILE...] d=64 [ids=...] [dtype=fp16|bf16] -->
        each variant's speed-up over the variant it is compared with, per N, causal and not
    <!-- table: crosscheck FILE [ids=20/x,21/y] -->
        scripts/peers.py's file with the ladder's rows (--ladder-lib): per shape, PyTorch's cuDNN
        backend, the ladder's cuDNN row and each ladder variant in TFLOP/s, with its ratio to
        PyTorch's cuDNN (one process, one timing method); with FlashAttention-4 rows, its column
        and each variant's ratio to it too. A backward file (peers.py --pass bwd, "pass": "bwd")
        gives the backward's table: the ladder's cuDNN row is step 98's, and PyTorch's
        FlashAttention-2 backend has a column, and each variant its ratio to it (× FA2)
    <!-- table: servecheck FILE kind=decode [ids=28/split_kv,29/split_kv] -->
        scripts/peers.py --pass serve's file: per shape of one kind (decode, paged: GB/s and % of
        the device copy timed in the same run; gqa, varlen: TFLOP/s), PyTorch's cuDNN and FA2
        backends, FlashAttention-4 and each ladder variant with its ratio to cuDNN and to FA4
    <!-- table: limits FILE[,FILE...] [ids=20/,22/] [clock=start|after|max] -->
        how far each row of a ladder file is from the hardware: per problem, its TFLOP/s as a
        percentage of the dense tensor-core peak and of the bound the exponentials set (MUFU.EX2),
        at the SM clock the file recorded at start (clock=after: each problem's clock after its
        timing; clock=max: the GPU's highest); the rates are in scripts/hardware_limits.py. A start
        clock below a problem's clock after its timing (the GPU idle at start) is refused
    <!-- table: fp8accuracy FILE [d=128] [input=outliers] -->
        scripts/fp8_accuracy.py's file (a CPU emulation): per input kind, D, N and mask, the RMSE
        against fp64 of plain FP8, of FP8 with the Hadamard rotation of Q and K and of bf16, and
        the rotation's ratio to plain FP8
    <!-- table: compare FILE [ids=20/,21/] -->
        scripts/peers.py's file with two libraries (--ladder-lib old=… new=…, --ladder-pairs): per
        pair old → new and shape, the ratio new/old (scripts/round.sh's compare stage)

A table whose file does not exist yet (a round still to come) reads "not measured yet".

FILE paths are relative to docs/. `ids` keeps rows whose id starts with one of the prefixes.
The tables of scripts/peers.py's files (crosscheck, servecheck, compare) are in scripts/tables_peers.py.
    python3 scripts/make_tables.py          # rewrite the chapters
    python3 scripts/make_tables.py --check  # exit 1 if a chapter is out of date (a CPU test)
"""
import argparse
import re
import sys

import json
import pathlib

import hardware_limits
import tables_peers
from tables_peers import compare_table, crosscheck_table, servecheck_table

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"

MARKER = re.compile(r"(<!-- table: (.*?) -->\n)(.*?)(<!-- end table -->)", re.S)


def load(path):
    return json.loads((DOCS / path).read_text())  # DOCS read at each call: a test may point it elsewhere


def keep(row_id, prefixes):
    return not prefixes or any(row_id.startswith(p) for p in prefixes)


# The peers' tables read files and select rows exactly as these do.
tables_peers.load, tables_peers.keep = load, keep


def sci(err, key):
    return "" if not err or err.get(key) is None else f"{err[key]:.2e}"


def fmt_ms(x):
    return f"{x:.3f}" if x >= 1 else f"{x:.4f}"


def short_command(command):
    """The command line with directories dropped from paths (the binary's and the output's)."""
    return " ".join(w.rsplit("/", 1)[-1] if "/" in w else w for w in command.split())


def provenance_line(data):
    p = data["provenance"]
    g = p["gpu"]
    clock = f", SM clock {g['sm_clock_mhz']} MHz at start" if g.get("sm_clock_mhz") else ""
    return (f"*{g['name']}, driver {g.get('driver_version', '?')}, CUDA {g['cuda_runtime'] // 1000}."
            f"{g['cuda_runtime'] % 1000 // 10}{clock}; commit `{p['git_commit']}`, {p['date'][:10]}; "
            f"`{short_command(p['command_line'])}`.*")


def ladder_table(spec):
    data = load(spec["file"])
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    out = []
    for run in data["runs"]:
        rows = [r for r in run["rows"]
                if (keep(r["id"], prefixes) or r.get("ceiling")) and not r.get("duplicate_of")]
        if not any(keep(r["id"], prefixes) for r in rows):
            continue
        bandwidth = run["kind"] == "reduction"
        gemm = any("percent_of_gemm" in r for r in rows)  # rounds from 2026-11-30 on
        out.append(f"**{run['kind']} {run['shape_text']}**\n")
        out.append(f"| id | median ms (p20–p80) | {'GB/s' if bandwidth else 'TFLOP/s'} | "
                   + ("% of GEMM | " if gemm else "") +
                   "max error | tolerance | vs | speed-up | max abs diff | rerun |")
        out.append("|---|---|---|---|---|---|---|---|---|" + ("---|" if gemm else ""))
        for r in rows:
            name = r["id"] + (" (peer)" if r.get("peer") else "") + (" (ceiling)" if r.get("ceiling") else "")
            if "median_ms" not in r:
                out.append(f"| {name} | {r['status']}: {r['note']} | | | | | | | |" + (" |" if gemm else ""))
                continue
            rate = r["gbps"] if bandwidth else r["tflops"]
            err = r.get("error", {})
            speed = ""
            if "speedup_vs_baseline" in r:
                speed = "same" if r.get("same_speed_as_baseline") else f"{r['speedup_vs_baseline']:.2f}×"
            diff = r.get("max_abs_diff_vs_baseline")
            rerun = {True: "identical", False: "differs"}.get(r.get("rerun_identical"), "")
            pct = (f"{r['percent_of_gemm']:.0f}% | " if "percent_of_gemm" in r else " | ") if gemm else ""
            # The row-wise rule (2026-11-30 on) reports the worst row's error against its tolerance.
            err_key = "worst_row_error" if err.get("worst_row_error") else "max_abs"
            out.append(
                f"| {name} | {fmt_ms(r['median_ms'])} ({fmt_ms(r['p20_ms'])}–{fmt_ms(r['p80_ms'])}) | "
                f"{rate:.1f} | {pct}{sci(err, err_key)} | {sci(err, 'tolerance')} | "
                f"{r.get('baseline', '') if 'speedup_vs_baseline' in r else ''} | {speed} | "
                f"{'' if diff is None else f'{diff:.2e}'} | {rerun} |")
        out.append("")
    out.append(provenance_line(data))
    return "\n".join(out) + "\n"


def resources_table(spec):
    data = load(spec["file"])
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    seen = set()
    out = ["| id | D | kernel | threads | registers | spill bytes | shared memory (static + dynamic) | blocks/SM | occupancy |",
           "|---|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        d = run["shape"].get("head_dim", "")
        for r in run["rows"]:
            if not keep(r["id"], prefixes):
                continue
            for k in r.get("kernels", []):
                key = (r["id"], d, k["name"])
                if key in seen:
                    continue
                seen.add(key)
                smem = k["static_smem"] + k["dynamic_smem"]
                out.append(f"| {r['id']} | {d} | `{k['name']}` | {k['threads']} | {k['registers']} | "
                           f"{k['local_bytes']} | {smem:,} B | {k['blocks_per_sm']} | {100 * k['occupancy']:.0f}% |")
    out.append("")
    out.append(provenance_line(data))
    return "\n".join(out) + "\n"


def bench_table(spec):
    files = spec["file"].split(",")
    runs = []
    for f in files:
        data = load(f)
        runs += [r for r in data["runs"] if r["kind"] == "attention"]
    d = int(spec["d"])
    causal = spec.get("causal", "0") in ("1", "true", "yes")
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    runs = [r for r in runs if r["shape"]["head_dim"] == d and r["shape"]["causal"] == causal]
    runs.sort(key=lambda r: r["shape"]["seqlen"])
    ns = [r["shape"]["seqlen"] for r in runs]
    peers = {}
    if "peers" in spec:
        for p in load(spec["peers"])["rows"]:
            if (p["kind"] == "attention" and p.get("pass", "fwd") == "fwd" and p["head_dim"] == d
                    and p["causal"] == causal and "tflops" in p):
                peers[(p["name"], p["seqlen"])] = p["tflops"]
    ids = []
    for r in runs:
        for row in r["rows"]:
            if keep(row["id"], prefixes) and row["id"] not in ids:
                ids.append(row["id"])
    shape = runs[0]["shape"] if runs else {}
    head = f"B×H = {'16k tokens / N' if shape.get('batch', 0) * shape.get('seqlen', 0) == 16384 and len(set(r['shape']['batch'] for r in runs)) > 1 else shape.get('batch')} × {shape.get('heads')}"
    ratio = "; in brackets the ratio to PyTorch's flash (FA2) backend in the same measurement" if peers else ""
    out = [f"TFLOP/s, D={d}, {'causal' if causal else 'non-causal'}, {head}{ratio}.\n",
           "| variant | " + " | ".join(f"N={n}" for n in ns) + " |",
           "|---|" + "---|" * len(ns)]
    for name in ("sdpa-flash", "sdpa-cudnn"):
        if any((name, n) in peers for n in ns):
            out.append(f"| {name} (peer) | " + " | ".join(f"{peers[(name, n)]:.1f}" if (name, n) in peers else "" for n in ns) + " |")
    for i in ids:
        cells = []
        for r in runs:
            row = next((x for x in r["rows"] if x["id"] == i), None)
            if row is None or "tflops" not in row:
                cells.append("—" if row is None else row["status"])
                continue
            flash = peers.get(("sdpa-flash", r["shape"]["seqlen"]))
            bad = "" if row.get("error", {}).get("pass", True) else " FAIL"
            cells.append(f"{row['tflops']:.1f}" + (f" ({row['tflops'] / flash:.2f}×)" if flash else "") + bad)
        out.append(f"| {i} | " + " | ".join(cells) + " |")
    out.append("")
    out.append(provenance_line(load(files[0])))
    return "\n".join(out) + "\n"


NCU_COLUMNS = [
    ("launch__registers_per_thread", "registers"),
    ("launch__shared_mem_per_block_dynamic", "smem/block"),
    ("launch__occupancy_limit_registers", "CTA limit: regs"),
    ("launch__occupancy_limit_shared_mem", "CTA limit: smem"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "warps active %"),
    ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "tensor pipe %"),
    ("smsp__inst_executed_op_ldsm.sum", "ldmatrix"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "bank conflicts (ld)"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "bank conflicts (st)"),
    ("gpu__time_duration.sum", "time (µs, under ncu)"),
]


def ncu_table(spec):
    """Rows of scripts/profile.sh's CSV: one kernel launch per (variant, D), B=4 H=8 N=4096."""
    import csv
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    values = {}
    order = []
    with open(DOCS / spec["file"]) as f:
        for r in csv.reader(f):
            if len(r) < 19 or r[4] == "ID" or not keep(r[1], prefixes):
                continue
            key = (r[1], r[2])
            if key not in values:
                values[key] = {}
                order.append(key)
            values[key][r[16]] = r[18]
    out = ["| id | D | " + " | ".join(c[1] for c in NCU_COLUMNS) + " |",
           "|---|---|" + "---|" * len(NCU_COLUMNS)]
    for key in order:
        cells = []
        for metric, _ in NCU_COLUMNS:
            v = values[key].get(metric, "")
            if metric == "gpu__time_duration.sum" and v:
                v = f"{float(v.replace(',', '')) / 1000:.0f}"
            elif metric == "launch__shared_mem_per_block_dynamic" and v:
                v = f"{float(v.replace(',', '')):,.0f} B"
            cells.append(v)
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("*Nsight Compute of the GPU machine's CUDA 13.0 image (`--clock-control none`), one launch of each kernel at B=4, H=8, "
               "N=4096, non-causal; `scripts/profile.sh`.*")
    return "\n".join(out) + "\n"


def csv_table(spec):
    """A summary CSV (header row, then one row per id; first column the id) as a table."""
    import csv
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    with open(DOCS / spec["file"]) as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
    header, body = rows[0], [r for r in rows[1:] if keep(r[0], prefixes)]
    cols = [int(c) for c in spec["cols"].split(",")] if "cols" in spec else list(range(len(header)))
    out = ["| " + " | ".join(header[c] for c in cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(r[c] for c in cols) + " |" for r in body]
    return "\n".join(out) + "\n"


def ablation_table(spec):
    """One row per variant at head dimension d: its speed-up over the variant it is compared with,
    per N, non-causal then causal. A variant left out at this D (the same kernel as another) is
    named under the table; a row compared with such a variant is compared with the kernel it
    duplicates (the ratio of medians, marked †, when the run did not compare them itself)."""
    runs = []
    for f in spec["file"].split(","):
        runs += [r for r in load(f)["runs"] if r["kind"] == "attention"]
    d = int(spec["d"])
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    runs = [r for r in runs if r["shape"]["head_dim"] == d]
    if "dtype" in spec:  # a file that holds fp16 and bf16 problems: one element type per table
        runs = [r for r in runs if r["shape"].get("dtype", "fp16") == spec["dtype"]]
    runs.sort(key=lambda r: (r["shape"]["causal"], r["shape"]["seqlen"]))
    ids, duplicates, baseline_of = [], {}, {}
    seen, dup_runs = {}, {}  # id -> runs it appears in, runs where it is another row's kernel
    for r in runs:
        for row in r["rows"]:
            if not keep(row["id"], prefixes) or row.get("peer") or row.get("ceiling"):
                continue
            seen[row["id"]] = seen.get(row["id"], 0) + 1
            if row.get("duplicate_of"):
                dup_runs[row["id"]] = dup_runs.get(row["id"], 0) + 1
                duplicates.setdefault(row["id"], row["duplicate_of"])
                continue
            if row["id"] not in ids:
                ids.append(row["id"])
            bases = baseline_of.setdefault(row["id"], [])
            if row.get("baseline", "") not in bases:
                bases.append(row.get("baseline", ""))
    # Left out everywhere: named under the table. Left out on some problems only (a variant that
    # changes only the causal schedule): a row whose cells there say which kernel they would time.
    everywhere = {k: v for k, v in duplicates.items() if dup_runs[k] == seen[k]}
    head = " | ".join(f"{'causal' if r['shape']['causal'] else 'non-causal'} N={r['shape']['seqlen']}" for r in runs)
    out = [f"Speed-up over the compared variant (\"same\": within the noise of the timing passes), D={d}"
           f"{', ' + spec['dtype'] if 'dtype' in spec else ''}.\n",
           f"| variant | vs | {head} |", "|---|---|" + "---|" * len(runs)]
    dagger = False
    for i in ids:
        cells = []
        for r in runs:
            rows = {x["id"]: x for x in r["rows"]}
            row = rows.get(i)
            if row is not None and row.get("duplicate_of"):
                cells.append(f"= {row['duplicate_of']}")
            elif row is None or "median_ms" not in row:
                cells.append("—" if row is None else row["status"])
            elif "speedup_vs_baseline" in row:
                cells.append("same" if row.get("same_speed_as_baseline") else f"{row['speedup_vs_baseline']:.2f}×")
            else:
                base = rows.get(duplicates.get(baseline_of[i][0], ""))
                if base is not None and "median_ms" in base:
                    cells.append(f"{base['median_ms'] / row['median_ms']:.2f}×†")
                    dagger = True
                else:
                    cells.append("")
        vs = " or ".join(b + (f" (= {everywhere[b]})" if b in everywhere else "") for b in baseline_of[i])
        out.append(f"| {i} | {vs} | " + " | ".join(cells) + " |")
    out.append("")
    if dagger:
        out.append("† against the kernel the compared variant duplicates at this D: the ratio of medians, without the noise test.\n")
    if everywhere:
        out.append(f"Not listed at D={d} (the same kernel as another row): "
                   + ", ".join(f"{k} = {v}" for k, v in everywhere.items()) + ".\n")
    if any(k not in everywhere for k in duplicates):
        out.append("A cell \"= id\": on that problem the variant launches that row's kernel, so it is "
                   "not timed twice.\n")
    if runs:
        out.append(provenance_line(load(spec["file"].split(",")[0])))
    return "\n".join(out) + "\n"


def limits_table(spec):
    """Per (file, kind, D, dtype): one column per problem, one row per variant (and the GEMM
    ceiling); a cell is TFLOP/s (% of the dense tensor peak · % of the exponential bound)."""
    which = spec.get("clock", "start")
    if which not in hardware_limits.CLOCKS:
        raise SystemExit(f"limits table: clock={which} is not one of {', '.join(hardware_limits.CLOCKS)}")
    prefixes = [p for p in spec.get("ids", "").split(",") if p]
    out = ["Each cell: TFLOP/s (its percentage of the dense fp16/bf16 tensor-core peak · of the bound the "
           "exponentials set: one MUFU.EX2 per (query, key) pair, which the ladder counts as 4·D FLOPs forward "
           "and 10·D backward). The two percentages add up to the percentage of the bound if the matrix "
           "products and the exponentials never overlapped: above 100%, the kernel must run exponentials under "
           f"its products. Peaks at {hardware_limits.CLOCKS[which]}; the rates per SM and clock are in "
           "`scripts/hardware_limits.py`.\n"]
    try:
        return _limits_tables(spec, which, prefixes, out)
    except hardware_limits.LimitError as e:
        raise SystemExit(f"limits table of {spec['file']}: {e}")


def _limits_tables(spec, which, prefixes, out):
    for f in spec["file"].split(","):
        data = load(f)
        groups = {}
        for run in data["runs"]:
            if run["kind"] not in hardware_limits.FLOPS_PER_EXPONENTIAL_PER_D:
                continue
            key = (run["kind"], run["shape"]["head_dim"], run["shape"].get("dtype", "fp16"))
            groups.setdefault(key, []).append(run)
        for (kind, d, dtype), runs in groups.items():
            # The kept rows (and the GEMM ceiling), in the file's order; a variant that ran none of
            # these problems (refused at this D) is left out.
            measured = {r["id"] for run in runs for r in run["rows"] if "tflops" in r or r.get("duplicate_of")}
            ids = list(dict.fromkeys(r["id"] for run in runs for r in run["rows"]
                                     if (keep(r["id"], prefixes) or r.get("ceiling")) and r["id"] in measured))
            b = [hardware_limits.bounds(data, run, which) for run in runs]
            clocks = sorted({x["clock_mhz"] for x in b})
            sms = b[0]["sm_count"] if b else "?"
            head = [run["shape_text"].replace(f" D={d}", "") for run in runs]
            out.append(f"**{kind} D={d}, {dtype}**: {sms} SMs, peaks at "
                       + "/".join(str(c) for c in clocks) + " MHz\n")
            out.append("| variant | " + " | ".join(head) + " |")
            out.append("|---|" + "---|" * len(runs))
            out.append("| *bounds: tensor · exp (TFLOP/s)* | " + " | ".join(
                f"{x['tensor_peak_tflops']:.0f} · {x['exp_bound_tflops']:.0f}" for x in b) + " |")
            for i in ids:
                row0 = next(x for run in runs for x in run["rows"] if x["id"] == i)
                name = i + (" (peer)" if row0.get("peer") else "") + (" (ceiling)" if row0.get("ceiling") else "")
                cells = []
                for run in runs:
                    row = next((x for x in run["rows"] if x["id"] == i), None)
                    if row is None:
                        cells.append("—")
                    elif row.get("duplicate_of"):
                        cells.append(f"= {row['duplicate_of']}")
                    elif "tflops" not in row:
                        cells.append(row.get("status", "—"))
                    else:
                        lim = hardware_limits.row_limits(data, run, row, which)
                        exp = "—" if lim["pct_of_exp_bound"] is None else f"{lim['pct_of_exp_bound']:.0f}%"
                        bad = "" if row.get("error", {}).get("pass", True) else " FAIL"
                        cells.append(f"{row['tflops']:.1f} ({lim['pct_of_tensor_peak']:.0f}% · {exp}){bad}")
                out.append(f"| {name} | " + " | ".join(cells) + " |")
            out.append("| *SM clock after the timing* | " + " | ".join(
                f"{hardware_limits.after_mhz(run)} MHz" if hardware_limits.after_mhz(run) else "—"
                for run in runs) + " |")
            out.append("")
        out.append(provenance_line(data) + "\n")
    return "\n".join(out).rstrip("\n") + "\n"


def fp8_accuracy_table(spec):
    data = load(spec["file"])
    cells = {}
    for r in data["records"]:
        if ("d" in spec and r["d"] != int(spec["d"])) or ("input" in spec and r["input"] != spec["input"]):
            continue
        cells.setdefault((r["input"], r["d"], r["n"], r["causal"]), {})[r["variant"]] = r
    out = ["| inputs | D | N | mask | FP8 RMSE | FP8 + rotation RMSE | rotation / FP8 | bf16 RMSE | FP8 RMSE / RMS(O) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (kind, d, n, causal), v in cells.items():
        fp8, rot, bf16 = v["fp8"], v["fp8_rotated"], v["bf16"]
        out.append(f"| {kind} | {d} | {n} | {'causal' if causal else 'none'} | {fp8['rmse']:.2e} | "
                   f"{rot['rmse']:.2e} | {rot['rmse'] / fp8['rmse']:.2f} | {bf16['rmse']:.2e} | {fp8['rel_rmse']:.3f} |")
    p = data["provenance"]
    out.append("")
    out.append(f"*CPU emulation, numpy {p['numpy']}, {p['date'][:10]}, seed {p['seed']}, {p['heads']} heads; "
               f"`{short_command(p['command'])}`; inputs: {data['inputs']['normal']}; outliers: "
               f"{data['inputs']['outliers']}.*")
    return "\n".join(out) + "\n"


def missing_files(spec):
    """The files a table needs that do not exist yet (a round still to come)."""
    files = spec["file"].split(",") + ([spec["peers"]] if "peers" in spec else [])
    return [f for f in files if not (DOCS / f).exists()]


def render(spec_text):
    words = spec_text.split()
    spec = {"type": words[0], "file": words[1]}
    for w in words[2:]:
        k, _, v = w.partition("=")
        spec[k] = v
    missing = missing_files(spec)
    if missing:
        return ("*Not measured yet: " + ", ".join(f"`docs/{f}`" for f in missing)
                + " does not exist; `scripts/make_tables.py` fills this table in once it does.*\n")
    tables = {"ladder": ladder_table, "resources": resources_table, "bench": bench_table, "ncu": ncu_table,
              "csv": csv_table, "ablation": ablation_table, "crosscheck": crosscheck_table,
              "compare": compare_table, "servecheck": servecheck_table, "limits": limits_table,
              "fp8accuracy": fp8_accuracy_table}
    return tables[spec["type"]](spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    stale = []
    for md in sorted(DOCS.glob("*.md")):
        text = md.read_text()
        new = MARKER.sub(lambda m: m.group(1) + render(m.group(2)) + m.group(4), text)
        if new != text:
            stale.append(md.name)
            if not args.check:
                md.write_text(new)
    if args.check and stale:
        print("out of date (run scripts/make_tables.py):", ", ".join(stale))
        return 1
    print(("checked" if args.check else "updated") + f": {len(stale)} chapter(s) {'stale' if args.check else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
