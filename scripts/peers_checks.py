"""scripts/peers.py's correctness checks: every row's output (or gradients) against the reference,
relative to its largest value; a wrong call fails its row and the run."""

GRADIENTS = ("dq", "dk", "dv")


# max |out - reference| / max |reference| above this marks the row FAIL (a wrong layout or mask
# gives O(1); two correct kernels differ by a few units of the last place).
OUTPUT_TOLERANCE = {"fp16": 0.02, "bf16": 0.05}


def output_check(row, out, ref, dtype_name):
    diff = float((out.float() - ref.float()).abs().max())
    scale = float(ref.float().abs().max()) or 1.0
    row["max_abs_diff"] = diff
    row["rel_diff"] = diff / scale
    row["output_check"] = "pass" if diff / scale <= OUTPUT_TOLERANCE[dtype_name] and diff == diff else "FAIL"


def gradients_check(row, grads, refs, dtype_name):
    """output_check for dQ, dK, dV: each one's figures under row["gradients"]; the row's max_abs_diff,
    rel_diff and output_check are the worst of the three (NaN anywhere fails)."""
    row["gradients"] = {}
    for name, out, ref in zip(GRADIENTS, grads, refs):
        one = {}
        output_check(one, out, ref, dtype_name)
        row["gradients"][name] = one
    worst = max(row["gradients"], key=lambda name: (row["gradients"][name]["rel_diff"]
                                                  if row["gradients"][name]["rel_diff"] == row["gradients"][name]["rel_diff"]
                                                  else 1e30))
    row["worst_gradient"] = worst
    row["max_abs_diff"] = max((g["max_abs_diff"] for g in row["gradients"].values()),
                              key=lambda x: x if x == x else 1e30)
    row["rel_diff"] = row["gradients"][worst]["rel_diff"]
    row["output_check"] = ("pass" if all(g["output_check"] == "pass" for g in row["gradients"].values())
                           else "FAIL")
