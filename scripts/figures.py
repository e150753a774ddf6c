#!/usr/bin/env python3
"""Draws every figure of the course's chapters into docs/img/ by running each part's script:

  scripts/figures.py              # all of them
  scripts/figures.py --out DIR    # somewhere else

  scripts/figures_part1_2.py   part1-00, part2-03 … part2-06 (Parts I and II)
  scripts/figures_part3.py     part3-NN (measured) and part3-NN-idea for chapters 07-15; it runs
                               scripts/figures_part3_rows.py and scripts/figures_part3_models.py
  scripts/figures_part4.py     every part4-*.png but part4-peers (Part IV)
  scripts/figures_part5.py     every part5-*.png (Part V)
  scripts/figures_part6.py     part6-split-kv, -paged, -decode-measured, -merge, -roofline
  scripts/figures_prefill.py   part6-gqa-order, -varlen-lpt, -prefill-measured (Part VI's prefill)
  scripts/figures_part7.py     part7-lazy-rescale, -clocks-power, -overlap-pinned, -desc-iterators, -bwd-mix
  scripts/figures_part7_serving.py  part7-gqa-backward, -varlen-backward (chapters 37, 38; schematics)
  scripts/figures_part7_order.py    part7-deterministic-order (chapter 39; a schematic)
  scripts/figures_part7_writer.py   part7-dq-writer (chapter 40; measured)
  scripts/figures_part7_decode.py   part7-fused-decode, -wide-merge (chapters 41, 42; schematics)
  scripts/figures_part7_decode_sizes.py  part7-decode-sizes, -split-cost-model (chapter 42; measured)
  scripts/figures_part7_three_iterators.py  part7-three-iterators (chapter 34; measured)
  scripts/figures_part7_paged.py    part7-paged-cost (chapter 43; measured)
  scripts/figures_part7_specdec.py  part7-specdec-rows (chapter 44; a schematic)
  scripts/figures_part8.py     part8-v-transpose (chapter 45; a schematic), part8-exp-budget (chapter 46; SASS counts)
  scripts/figures_capstone.py  capstone-op-path (the capstone, the PyTorch operator; a schematic)
  scripts/figures_course.py    course-path.png (the course's map)

Each script's docstring lists its images and says which are schematic and which measured; what
they share (matplotlib's set-up, reading a constant out of a C++ source, box, arrow, save, --out)
is scripts/figlib.py. The other images of docs/img/ come from the scripts that produce their data:
scripts/plot (ladder-*.png, roofline.png, part4-peers.png), scripts/fp16_accum_model.py
(part6-fp16-accum-*.png), scripts/fit_exp2_poly.py (part7-exp2-poly.png) and
scripts/plot_training.py (capstone-train-gpt.png, from examples/train_gpt.py's JSON).
"""
import pathlib
import subprocess
import sys

from figlib import out_dir, parser

SCRIPTS = ["figures_part1_2.py", "figures_part3.py", "figures_part4.py", "figures_part5.py",
           "figures_part6.py", "figures_prefill.py", "figures_part7.py", "figures_part7_serving.py",
           "figures_part7_order.py", "figures_part7_writer.py", "figures_part7_decode.py", "figures_part7_decode_sizes.py",
           "figures_part7_three_iterators.py", "figures_part7_paged.py", "figures_part7_specdec.py",
           "figures_part8.py", "figures_capstone.py", "figures_course.py"]


def main():
    out = out_dir(parser(__doc__).parse_args().out)
    here = pathlib.Path(__file__).resolve().parent
    failed = []
    for script in SCRIPTS:
        print(f"== scripts/{script}", flush=True)
        if subprocess.call([sys.executable, str(here / script), "--out", str(out)]) != 0:
            failed.append(script)
    if failed:
        print(f"figures.py: {', '.join(failed)} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
