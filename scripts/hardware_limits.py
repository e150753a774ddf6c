"""How far a measured row is from the hardware: the dense tensor-core peak and the bound the
exponentials set, at the SM clock a ladder results file recorded. Used by scripts/make_tables.py's
`limits` table and scripts/check_figures.py's `limits.*` fields; the constants live here only.

An attention forward spends, per (query, key) pair the ladder counts, 4·D FLOPs (the two matrix
products, common/problem.cpp's flops(); causal counts half the pairs) and one exponential. So at
`ex2` exponentials per clock per SM the counted rate can be at most

    exp bound = ex2 · SMs · clock · 4·D          (forward)

and the backward, whose counted FLOPs are 2.5× the forward's (backward_flops()) while it recomputes
P once (one exponential per pair), 2.5× that. A causal kernel computes at least the counted pairs'
exponentials (N(N+1)/2 ≥ N²/2, and its diagonal tiles in full), so the bound holds for it too.
If the matrix products and the exponentials never overlapped, the bound would be
1 / (1/peak + 1/exp bound): a row's two percentages add up to its percentage of that one.
"""

# Per compute capability, per SM and per clock:
#   tensor_flop: dense fp16/bf16 tensor-core FLOPs (fp32 accumulation).
#     sm_90 (H100 SXM / H200): 4096 = 989.4 TFLOP/s dense (NVIDIA's H100 SXM and H200 datasheets,
#     "FP16/BF16 Tensor Core", without sparsity) / (132 SMs × 1.83 GHz, the clock that figure assumes).
#   ex2: MUFU.EX2 results (ex2.approx.f32): 16 for compute capability 9.0, the CUDA C++ Programming
#     Guide's table of arithmetic instruction throughput ("base-2 exponential", results per clock
#     cycle per multiprocessor).
PER_SM_PER_CLOCK = {
    90: {"tensor_flop": 4096, "ex2": 16},
}

# Counted FLOPs per exponential, in units of the head dimension D, per kind of ladder run.
FLOPS_PER_EXPONENTIAL_PER_D = {
    "attention": 4.0,        # QKᵀ and P·V: 2·D each per pair
    "backward": 2.5 * 4.0,   # the five products, 2.5× the forward's; P recomputed once
}

# Where the SM clock comes from (the `clock=` option of the limits table).
CLOCKS = {
    "start": "the SM clock read when the ladder started (provenance.gpu.sm_clock_mhz)",
    "after": "the SM clock read right after each problem's timing (runs[].gpu_after.sm_clock_mhz)",
    "max": "the GPU's highest SM clock (provenance.gpu.max_sm_clock_mhz)",
}


class LimitError(ValueError):
    """A results file from which a limit cannot be computed (the reason says what is missing)."""


def after_mhz(run):
    return (run.get("gpu_after") or {}).get("sm_clock_mhz")


def clock_mhz(doc, run, which="start"):
    """The SM clock in MHz that the peaks of `run` (one problem of ladder file `doc`) are taken at."""
    gpu = doc.get("provenance", {}).get("gpu", {})
    if which == "start":
        mhz = gpu.get("sm_clock_mhz")
        # A clock read before any work can be an idle clock (345 MHz in a round of 2026-12-01): a
        # peak at it would be below what the GPU then ran at, and the percentages above 100%.
        after = [a for a in (after_mhz(r) for r in doc.get("runs", [])) if a]
        if mhz and after and mhz < max(after):
            raise LimitError(f"the SM clock at start ({mhz} MHz) is below the {max(after)} MHz read after a "
                             "problem's timing: the GPU was idle when the ladder started; take the clock "
                             "after each timing or the highest (the table's clock=after or clock=max, a "
                             "figure's limits.after.* or limits.max.*)")
    elif which == "after":
        mhz = after_mhz(run)
    elif which == "max":
        mhz = gpu.get("max_sm_clock_mhz")
    else:
        raise LimitError(f"unknown clock {which!r} (one of {', '.join(CLOCKS)})")
    if not mhz:
        raise LimitError(f"the file records no SM clock for clock={which} ({CLOCKS[which]})")
    return mhz


def bounds(doc, run, which="start"):
    """{clock_mhz, sm_count, tensor_peak_tflops, exp_bound_tflops} of one problem of a ladder file;
    exp_bound_tflops is None for a kind of run without exponentials."""
    gpu = doc.get("provenance", {}).get("gpu", {})
    cc = gpu.get("compute_capability")
    if cc not in PER_SM_PER_CLOCK:
        raise LimitError(f"no peak known for compute capability {cc} ({gpu.get('name', '?')}): add its rates "
                         "with their source to PER_SM_PER_CLOCK in scripts/hardware_limits.py")
    sms = gpu.get("sm_count")
    if not sms:
        raise LimitError("the file records no SM count (provenance.gpu.sm_count)")
    mhz = clock_mhz(doc, run, which)
    rate = PER_SM_PER_CLOCK[cc]
    per_second = sms * mhz * 1e6 / 1e12  # SM-clocks per second, in units that give TFLOP/s
    per_d = FLOPS_PER_EXPONENTIAL_PER_D.get(run.get("kind"))
    d = run.get("shape", {}).get("head_dim")
    exp = rate["ex2"] * per_second * per_d * d if per_d and d else None
    return {"clock_mhz": mhz, "sm_count": sms, "tensor_peak_tflops": rate["tensor_flop"] * per_second,
            "exp_bound_tflops": exp}


def row_limits(doc, run, row, which="start"):
    """The bounds of `row`'s problem and its TFLOP/s as a percentage of each (and of the bound with
    no overlap, their sum); a ceiling row (the GEMM) has no exponentials, so no exp bound. None for
    a row without a measured rate."""
    if "tflops" not in row:
        return None
    b = bounds(doc, run, which)
    if row.get("ceiling"):
        b["exp_bound_tflops"] = None
    b["pct_of_tensor_peak"] = 100.0 * row["tflops"] / b["tensor_peak_tflops"]
    b["pct_of_exp_bound"] = 100.0 * row["tflops"] / b["exp_bound_tflops"] if b["exp_bound_tflops"] else None
    # 1 / (1/peak + 1/exp bound): the products and the exponentials one after the other.
    b["pct_of_no_overlap_bound"] = (b["pct_of_tensor_peak"] + b["pct_of_exp_bound"]
                                    if b["pct_of_exp_bound"] is not None else None)
    return b
