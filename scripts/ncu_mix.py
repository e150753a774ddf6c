#!/usr/bin/env python3
"""The executed instructions and the stall samples of one kernel, by kind, from an Nsight Compute
source export (`ncu --import R.ncu-rep --page source --csv --print-source sass`): the evidence of
chapter 36's figure (where a backward's instructions go, ours against FlashAttention-4's).

  scripts/ncu_mix.py LABEL=EXPORT.csv[:KERNEL_SUBSTRING] ... --out FILE.json [--note TEXT] [--top N]

Each export may hold several kernels (FA4's preprocess, main and postprocess); KERNEL_SUBSTRING
picks one (default: the one with the most executed instructions). Kinds: the uniform datapath
(U*: descriptor and address arithmetic), generic loads and stores (LD/ST: an address-space test
each), shared-memory accesses (LDS/STS/STSM/LDSM), the products (HGMMA and the WARPGROUP fences),
the softmax arithmetic (FFMA/FMUL/FADD/FSEL/MUFU/F2FP), synchronisation and branches
(SYNCS/BAR/BRA/...), and the rest. --top N also lists each kernel's N instructions with the most
stall samples (their SASS, share of the kernel's samples and two largest reasons).
"""
import argparse
import collections
import csv
import json
import sys

KINDS = ["uniform datapath", "generic LD/ST", "shared LDS/STS/STSM", "HGMMA + fences",
         "softmax arithmetic", "sync + branch", "other"]
SOFTMAX = {"FFMA", "FMUL", "FADD", "FSEL", "MUFU", "F2FP", "FMNMX"}
SYNC = {"SYNCS", "BAR", "BRA", "BSSY", "BSYNC", "WARPSYNC", "ELECT", "DEPBAR", "MEMBAR", "FENCE", "NOP", "EXIT", "RET"}


def kind_of(op):
    if op.startswith("U"):
        return "uniform datapath"
    if op in ("LD", "ST"):
        return "generic LD/ST"
    if op in ("LDS", "STS", "STSM", "LDSM"):
        return "shared LDS/STS/STSM"
    if op in ("HGMMA", "WARPGROUP"):
        return "HGMMA + fences"
    if op in SOFTMAX:
        return "softmax arithmetic"
    if op in SYNC:
        return "sync + branch"
    return "other"


def sections(path):
    """[(kernel name, header, rows)] of an export."""
    out, cur = [], None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                cur = [row[1], None, []]
                out.append(cur)
            elif cur is not None and cur[1] is None:
                cur[1] = row
            elif cur is not None and len(row) >= len(cur[1]):
                cur[2].append(row)
    return out


def opcode(source):
    words = source.split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def number(text):
    text = text.replace(",", "").strip()
    return float(text) if text else 0.0


def summarize(path, pick, top=0):
    secs = sections(path)
    if not secs:
        sys.exit(f"ncu_mix: {path} has no kernel section (is it a --page source --csv export?)")

    def executed(sec):
        i = sec[1].index("Instructions Executed")
        return sum(number(r[i]) for r in sec[2])
    chosen = [s for s in secs if pick in s[0]] if pick else secs
    if not chosen:
        sys.exit(f"ncu_mix: no kernel in {path} contains '{pick}'")
    name, header, rows = max(chosen, key=executed)
    idx = {h: i for i, h in enumerate(header)}
    stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    by_kind, by_op, stalls = collections.Counter(), collections.Counter(), collections.Counter()
    for r in rows:
        op = opcode(r[idx["Source"]])
        n = number(r[idx["Instructions Executed"]])
        by_kind[kind_of(op)] += n
        by_op[op] += n
        for c in stall_cols:
            stalls[c[len("stall_"):]] += number(r[idx[c]])
    total_samples = sum(stalls.values()) or 1.0
    hottest = []
    if top:
        col = "Warp Stall Sampling (All Samples)"
        for r in sorted(rows, key=lambda r: -number(r[idx[col]]))[:top]:
            reasons = sorted(((number(r[idx[c]]), c[len("stall_"):]) for c in stall_cols), reverse=True)[:2]
            hottest.append({"sass": " ".join(r[idx["Source"]].split()), "share": round(number(r[idx[col]]) / total_samples, 4),
                            "reasons": [name for _, name in reasons]})
    return {"kernel": name, "instructions": int(sum(by_kind.values())),
            "by_kind": {k: int(by_kind[k]) for k in KINDS},
            "top_opcodes": {k: int(v) for k, v in by_op.most_common(16)},
            "stall_share": {k: round(v / total_samples, 4) for k, v in stalls.most_common(10)},
            **({"most_stalled": hottest} if top else {})}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="LABEL=EXPORT.csv[:KERNEL_SUBSTRING]")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="")
    ap.add_argument("--top", type=int, default=0, help="also list each kernel's N most stalled instructions")
    args = ap.parse_args()
    out = {"note": args.note, "kinds": KINDS, "kernels": {}}
    for spec in args.inputs:
        if "=" not in spec:
            ap.error(f"'{spec}' is not LABEL=EXPORT.csv[:KERNEL]")
        label, rest = spec.split("=", 1)
        path, _, pick = rest.partition(":")
        out["kernels"][label] = summarize(path, pick, args.top)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for label, k in out["kernels"].items():
        print(f"{label}: {k['instructions'] / 1e6:.1f} M instructions; " +
              ", ".join(f"{n} {v / 1e6:.1f} M" for n, v in k["by_kind"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
