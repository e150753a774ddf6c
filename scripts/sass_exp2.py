#!/usr/bin/env python3
"""Where the exponentials sit in each softmax loop of an object's SASS (step 32's evidence): for every
backward branch whose body holds MUFU.EX2 and at most one wait_group 1 (a block loop, not the tile
loop around it), its length and, between the loop's
`WARPGROUP.DEPBAR.LE gsb0, 0x1` (S_i is done) and `... 0x0` (P_{i-1} V_{i-1} is done), and outside
that window:

  ex2     MUFU.EX2 (the block's MUFU exponentials, plus the two rows' rescale factors)
  rm      FADD.RM (one per polynomial exponential: the floor of common/exp2_poly.hpp)
  pffma   the polynomial's FFMAs (an immediate coefficient c2 or c1 of exp2_poly.hpp, or 1.0)

A kernel keeps the overlap when all three are inside the window (outside = 0).

  scripts/sass_exp2.py OBJ.o|FILE.sass [KERNEL_SUBSTRING]   (cuobjdump on PATH for a .o)
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from wait_placement import functions_with_addresses, sass_text  # noqa: E402

# The immediates ptxas prints for the cubic's c2 and c1 (common/exp2_poly.hpp) and Horner's last 1.
POLY_IMMEDIATES = ("0.22630769014358520508", "0.69542431831359863281", " 1 ")


def functions(text):
    # wait_placement's parser; a trailing space keeps the immediate matches below simple
    return {name: [(a, x + " ") for a, x in ins] for name, ins in functions_with_addresses(text).items()}


def kind(s):
    if "MUFU.EX2" in s:
        return "ex2"
    if s.lstrip().startswith("FADD.RM") or " FADD.RM " in s:
        return "rm"
    if "FFMA" in s and any(imm in s.split(",")[-1] + " " for imm in POLY_IMMEDIATES):
        return "pffma"
    return None


def loops(ins):
    at = {a: i for i, (a, _) in enumerate(ins)}
    for i, (a, s) in enumerate(ins):
        m = re.search(r"BRA .*?(0x[0-9a-f]+)", s)
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        body = [x for _, x in ins[at[int(m.group(1), 16)]:i + 1]]
        if not any("MUFU.EX2" in x for x in body):
            continue
        if sum("DEPBAR.LE gsb0, 0x1" in x for x in body) > 1:
            continue  # an outer loop (the tile loop) around the block loops: its blocks are listed alone
        w1 = next((k for k, x in enumerate(body) if "DEPBAR.LE gsb0, 0x1" in x), None)
        w0 = next((k for k, x in enumerate(body) if "DEPBAR.LE gsb0, 0x0" in x and (w1 is None or k > w1)), None)
        inside = {"ex2": 0, "rm": 0, "pffma": 0}
        outside = dict(inside)
        for k, x in enumerate(body):
            c = kind(x)
            if c:
                (inside if w1 is not None and w0 is not None and w1 < k < w0 else outside)[c] += 1
        yield len(body), w1, w0, inside, outside


def short(name):
    m = re.search(r"kernelI(.*)EEv", name)
    return (m.group(1) if m else name)[:110]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pattern = sys.argv[2] if len(sys.argv) > 2 else ""
    for name, ins in functions(sass_text(sys.argv[1])).items():
        if pattern not in name:
            continue
        print(short(name))
        for n, w1, w0, inside, outside in loops(ins):
            window = f"W1 at +{w1}, W0 at +{w0}" if w1 is not None and w0 is not None else "no W1/W0 pair"
            print(f"  loop of {n} instructions, {window}: between the waits ex2 {inside['ex2']} rm {inside['rm']} "
                  f"pffma {inside['pffma']}; outside ex2 {outside['ex2']} rm {outside['rm']} pffma {outside['pffma']}")


if __name__ == "__main__":
    main()
