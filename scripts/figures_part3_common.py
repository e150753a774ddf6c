"""What Part III's three figure scripts share (scripts/figures_part3.py, _rows.py, _models.py): the
series' files, the steps' folders and their constants read from the sources, the fragment maps, lab
L10's bank model, the colours of the units, and two drawing helpers. No figure is drawn here.
"""
import json
import math
import sys

from figlib import RESULTS, source_constant, source_text

SERIES = RESULTS / "2026-11-30-softmax-series.json"
NCU = RESULTS / "2026-11-30-softmax-ncu.csv"

STEPS = {
    7: "steps/07_v5_padded_staging/v5_padded_staging.cu",
    8: "steps/08_v6_deferred_scale/v6_deferred_scale.cu",
    9: "steps/09_v7_four_rows/v7_four_rows.cu",
    10: "steps/10_v8_vec2/v8_vec2.cu",
    11: "steps/11_v9_qk_address/v9_qk_address.cu",
    12: "steps/12_v10_fma_exp2/v10_fma_exp2.cu",
    13: "steps/13_v11_ablation/v11_ablation.cu",
    14: "steps/14_v12_row_owner/v12_row_owner.cu",
    15: "steps/15_v13_warp_specialized/v13_warp_specialized.cu",
}
FRAG = "common/device/mma_fragments.cuh"
SWIZZLE = "common/device/swizzle.cuh"

# Colours by unit: what the MIO queue carries (shared memory, shuffles, MUFU) against the FP32 pipe.
C_LDS = "#4c72b0"
C_SHFL = "#dd8452"
C_MUFU = "#c44e52"
C_FP32 = "#b0b0b0"
C_INT = "#8c8c8c"
C_MMA = "#55a868"
C_IDLE = "#f2f2f2"
WARP_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


# ---- reading the sources ---------------------------------------------------------------------------

def config(step):
    """The Config constants of step `step` that the figures use, read from its file."""
    rel = STEPS[step]
    c = {"rel": rel, "warp_size": source_constant(rel, "kWarpSize"), "block_m": source_constant(rel, "kBlockM"),
         "block_n": source_constant(rel, "kBlockN"), "warps": source_constant(rel, "kWarps")}
    c["threads"] = c["warps"] * c["warp_size"]
    source_text(rel, "static constexpr int kThreads = kWarps * kWarpSize;", "kThreads")
    return c


def frag_maps():
    """Lane → (row, col) of ldmatrix's A and B operands, and the quad layout, from mma_fragments.cuh."""
    source_text(FRAG, "int ldsm_a_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }", "ldsm_a_row")
    source_text(FRAG, "int ldsm_a_col(int lane) { return (lane >> 4) * 8; }", "ldsm_a_col")
    source_text(FRAG, "int ldsm_b_row(int lane) { return (lane & 7) + (lane >> 4) * 8; }", "ldsm_b_row")
    source_text(FRAG, "int ldsm_b_col(int lane) { return ((lane >> 3) & 1) * 8; }", "ldsm_b_col")
    source_text(FRAG, "int group_of(int lane) { return lane >> 2; }", "group_of")
    source_text(FRAG, "int thread_in_group(int lane) { return lane & 3; }", "thread_in_group")
    return dict(a_row=lambda l: (l & 7) + ((l >> 3) & 1) * 8, a_col=lambda l: (l >> 4) * 8,
                b_row=lambda l: (l & 7) + (l >> 4) * 8, b_col=lambda l: ((l >> 3) & 1) * 8,
                g=lambda l: l >> 2, t=lambda l: l & 3)


def xor_col():
    """swizzle.cuh's xor_col(col, row8), checked against the header's expression."""
    source_text(SWIZZLE, "return ((chunk & ~kLowChunkMask) << 3) + (((chunk & kLowChunkMask) ^ row8) << 3) + (col & 7);",
              "xor_col's expression")
    return lambda col, row8: (((col >> 3) & ~7) << 3) + ((((col >> 3) & 7) ^ row8) << 3) + (col & 7)


# ---- lab L10's bank model ----------------------------------------------------------------------------

def wavefronts(addresses, width, ldmatrix=False):
    """Wavefronts one warp-wide shared access needs: lane groups of 128 bytes of requests (all 32 lanes
    for ≤ 4-byte accesses, half-warps for 8, quarter-warps for 16, ldmatrix's 8-lane phases), each
    needing as many wavefronts as the most different 4-byte words one bank serves to it."""
    group = 8 if ldmatrix else max(1, 128 // max(width, 4))
    group = min(group, 32)
    total = 0
    for start in range(0, len(addresses), group):
        banks = {}
        for a in addresses[start:start + group]:
            for byte in range(a, a + max(width, 1), 4) if width >= 4 else [a]:
                word = byte // 4
                banks.setdefault(word % 32, set()).add(word)
        total += max(len(words) for words in banks.values())
    return total


# ---- drawing helpers -----------------------------------------------------------------------------------

def shuffle_steps(rel):
    """log2(kWarpSize): the butterfly `for (offset = kWarpSize / 2; offset > 0; offset /= 2)`."""
    source_text(rel, "for (int offset = kWarpSize / 2; offset > 0; offset /= 2)", "the 5-step shuffle loop")
    return int(math.log2(source_constant(rel, "kWarpSize")))



def series_rows():
    if not SERIES.exists():
        sys.exit(f"figures_part3: {SERIES} does not exist")
    doc = json.loads(SERIES.read_text())
    runs = [r for r in doc["runs"] if not r["shape"]["causal"]]
    if not runs:
        sys.exit(f"figures_part3: {SERIES}: no non-causal run")
    return runs[0]["rows"]



def legend_patches(ax, items, **kw):
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", lw=0.5, label=l) for l, c in items], **kw)
