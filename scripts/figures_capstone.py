#!/usr/bin/env python3
"""Draws the capstone chapter's schematic (docs/capstone_pytorch_operator.md) into docs/img/:

  capstone-op-path.png  a schematic (no measurement): the path of one call of
                        ladder_attention.attention() from Python to a step's kernel. The custom op
                        ladder::attention_fwd has two kernels: the fake one (shapes and dtypes,
                        for FakeTensor, meta tensors and torch.compile; no library) and the CUDA
                        one, which asks the dispatch table for candidates and calls
                        libladder_capi.so through ctypes until a variant does not refuse. Under
                        autograd the saved out and lse go to ladder::attention_bwd, which takes
                        the same path through the backward table. The rows drawn for the dense
                        problem are read from python/ladder_attention/dispatch.py, those that write
                        the log-sum-exp marked "(lse)" (34/three_iterators and 33/iterators among
                        them); the library's box says that a workspace is kept per (variant, size)
                        and zeroed on the call's stream. The names
                        of the registrations and entry points are checked in the package's and
                        the library's sources, so the figure cannot drift from the code.

    scripts/figures_capstone.py            # writes the PNG
    scripts/figures_capstone.py --out DIR  # somewhere else
"""
import importlib.util
import sys

from figlib import BLUE, GREEN, GREY, ORANGE, RED, ROOT, arrow, box, out_dir, parser, pyplot, save, source_text

OPS = "python/ladder_attention/ops.py"
API = "python/ladder_attention/api.py"
LIB = "python/ladder_attention/_lib.py"
CAPI = "common/apps/capi.cpp"
DISPATCH = ROOT / "python" / "ladder_attention" / "dispatch.py"


def dispatch_table():
    """python/ladder_attention/dispatch.py, loaded as a file (it imports nothing but collections,
    so neither torch nor the package's __init__ is needed)."""
    spec = importlib.util.spec_from_file_location("ladder_dispatch", DISPATCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_sources():
    """Exit unless every name the figure draws is still where it says."""
    source_text(OPS, 'attention_fwd = torch.library.custom_op("ladder::attention_fwd", _forward, mutates_args=(), '
                     'tags=_TAGS)', "the forward custom op")
    source_text(OPS, 'attention_bwd = torch.library.custom_op("ladder::attention_bwd", _gradients, mutates_args=(), '
                     'tags=_TAGS)', "the backward custom op")
    source_text(OPS, "_op.register_fake(_forward_fake)", "the forward's fake kernel")
    source_text(OPS, "_op.register_fake(_backward_fake)", "the backward's fake kernel")
    source_text(OPS, "_op.register_autograd(_backward, setup_context=_setup_context)", "the autograd registration")
    source_text(OPS, "ctx.save_for_backward(q, k, v, out, lse, cu_seqlens, seqlens)", "what the forward saves")
    source_text(OPS, "ctx.mark_non_differentiable(lse)", "the LSE marked non-differentiable")
    source_text(OPS, "if not dispatch.is_refusal(str(e)):", "refusals falling through")
    source_text(API, "need_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))", "need_lse")
    source_text(LIB, "_lib = _declare(ctypes.CDLL(str(path), mode=os.RTLD_LOCAL))", "the ctypes load")
    for name in ("ladder_attention", "ladder_attention_serving", "ladder_attention_backward",
                 "ladder_attention_backward_serving"):
        source_text(CAPI, f'extern "C" int {name}(', f"the entry point {name}")
    source_text(CAPI, "auto& slot = workspaces()[{std::string(id), bytes}];", "the workspace kept per variant and size")
    source_text(CAPI, "slot.problem != problem || capture != cudaStreamCaptureStatusNone",
                "the workspace zeroed for another problem and under capture")
    source_text(CAPI, "slot.buffer->fill_bytes(0, stream);", "the workspace zeroed on the call's stream")
    source_text(CAPI, 'throw CallError{std::string(id) + " does not run "', "the refusal message")


def ids(rows, marks=False):
    """'a, b (lse), c' for a table row list; marks: mark the rows that write the LSE "(lse)"."""
    return ", ".join(r.id + (" (lse)" if marks and r.lse else "") for r in rows)


def draw(out):
    check_sources()
    d = dispatch_table()
    fwd, bwd, det = d.FORWARD["dense"], d.BACKWARD["dense"], d.DETERMINISTIC_BACKWARD["dense"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(12.5, 7.6))
    ax.set_xlim(0, 12.5)
    ax.set_ylim(-0.35, 10.35)
    ax.axis("off")
    fs = 7.6
    L, W, R = 0.2, 5.95, 6.95  # the forward column's left edge and width, the backward column's left edge
    RW = 12.3 - R

    # The forward, top to bottom.
    box(ax, L, 9.15, W, 1.0, BLUE, "ladder_attention.attention(q, k, v, causal)   api.py\n"
        "strided q, k, v copied once (.contiguous());  varlen: seqlens on the host\n"
        "need_lse = a gradient is needed (or return_lse)", fontsize=fs, alpha=0.3)
    box(ax, L, 7.75, W, 1.0, ORANGE, "torch.ops.ladder.attention_fwd   ops.py\n"
        "torch.library.custom_op: a schema from the type hints, mutates_args=(),\n"
        "tag needs_contiguous_strides;  returns (out, lse)  (varlen: attention_varlen_fwd)", fontsize=fs, alpha=0.35)
    box(ax, L, 6.1, 2.85, 1.15, ORANGE, "fake kernel (register_fake)\n"
        "checks.describe, then empty\nout [shape of q], lse fp32\nno library, no GPU", fontsize=fs, alpha=0.2)
    box(ax, L + 3.35, 6.1, W - 3.35, 1.15, BLUE, "CUDA kernel\nchecks.describe, kind_of\n"
        "out, lse = torch.empty(...)\nPyTorch's current stream", fontsize=fs, alpha=0.3)
    ax.text(L + 1.42, 5.85, "FakeTensor, meta tensors,\ntorch.compile, opcheck", ha="center", va="top",
            fontsize=fs - 0.4, style="italic")
    box(ax, L + 1.4, 4.25, W - 1.4, 1.25, BLUE, "dispatch.py  FORWARD[\"dense\"], best first:\n"
        f"{ids(fwd[:3], marks=True)},\n{ids(fwd[3:], marks=True)}\n"
        "need_lse keeps only the (lse) rows", fontsize=fs, alpha=0.3)
    box(ax, L + 1.4, 2.95, W - 1.4, 0.85, BLUE, "_lib.call (ctypes, RTLD_LOCAL)\n"
        "ladder_attention(id, B, H, N, D, causal, bf16, q, k, v, o, lse, stream, error)",
        fontsize=fs, alpha=0.3)

    # The backward, on the right.
    box(ax, R, 7.75, RW, 1.0, ORANGE, "register_autograd\nsetup_context saves q, k, v, out, lse "
        "(+ cu_seqlens, seqlens);\nlse marked non-differentiable", fontsize=fs, alpha=0.35)
    box(ax, R, 6.1, RW, 1.15, ORANGE, "backward(grad_out)\ntorch.ops.ladder.attention_bwd\n"
        "a custom op of its own: a fake kernel and a CUDA kernel\nreturns (dq, dk, dv)", fontsize=fs, alpha=0.35)
    box(ax, R, 4.25, RW, 1.25, BLUE, f"dispatch.py  BACKWARD[\"dense\"]:\n{ids(bwd)}\n"
        f"backward_variant=\"deterministic\":\n{ids(det)}", fontsize=fs, alpha=0.3)
    box(ax, R, 2.95, RW, 0.85, BLUE, "_lib.call (ctypes)\nladder_attention_backward(id, ..., q, k, v, o, dO, lse, "
        "dq, dk, dv, stream, error)", fontsize=fs, alpha=0.3)

    # The library and the kernel, under both columns.
    box(ax, L + 1.4, 1.35, 12.3 - L - 1.4, 1.05, GREEN, "libladder_capi.so   common/apps/capi.cpp\n"
        "find the variant; validate the shape; the variant's refusal (\"… does not run …\") on this GPU;\n"
        "its workspace, allocated on its first call and kept per (variant, size), zeroed on the call's stream\n"
        "(cudaMemsetAsync) when another problem takes it over, and on every call under capture;\n"
        "every exception becomes 1 and a message", fontsize=fs, alpha=0.35)
    box(ax, L + 1.4, -0.25, 12.3 - L - 1.4, 0.95, GREY, "a step's launch: the registered variant's kernel on the "
        "stream it was given\n(steps/NN_*/*.cu: the same code the chapters time)", fontsize=fs, alpha=0.3)

    def down(x, y0, y1, **kw):
        arrow(ax, (x, y0), (x, y1), mutation_scale=10, lw=0.9, **kw)

    down(L + W / 2, 9.15, 8.75)
    down(L + 1.42, 7.75, 7.25)
    down(L + 3.35 + (W - 3.35) / 2, 7.75, 7.25)
    down(L + 3.35 + (W - 3.35) / 2, 6.1, 5.5)
    down(L + 3.35 + (W - 3.35) / 2, 4.25, 3.8)
    down(L + 3.35 + (W - 3.35) / 2, 2.95, 2.4)
    down(R + RW / 2, 7.75, 7.25)
    down(R + RW / 2, 6.1, 5.5)
    down(R + RW / 2, 4.25, 3.8)
    down(R + RW / 2, 2.95, 2.4)
    down((L + 1.4 + 12.3) / 2, 1.35, 0.7)
    # out and lse from the forward to what autograd saves: only when a gradient is needed.
    arrow(ax, (L + W, 8.25), (R, 8.25), mutation_scale=10, lw=0.9, ls="--")
    ax.text((L + W + R) / 2, 8.38, "under grad", ha="center", va="bottom", fontsize=fs - 0.6)
    # A refusal goes back to the table for its next row; any other error is raised.
    arrow(ax, (L + 1.4, 1.85), (L + 1.4, 4.85), mutation_scale=11, lw=1.1, color=RED,
          connectionstyle="arc3,rad=-0.45")
    ax.text(L + 0.02, 3.55, "refused\n(\"does not\nrun ...\"):\nthe next row", ha="left", va="center",
            fontsize=fs - 0.6, color=RED)
    ax.text(L + 0.02, 1.35, "raised:\nany other\nerror, Ladder-\nError; every\nrow refused,\nUnsupported-\nError",
            ha="left", va="center", fontsize=fs - 0.6, color=RED)
    fig.tight_layout()
    save(fig, out, "capstone-op-path.png")


def main():
    ap = parser(__doc__)
    ap.add_argument("--check-sources", action="store_true",
                    help="only check that the source lines the schematic names are still there (no matplotlib)")
    a = ap.parse_args()
    if a.check_sources:
        check_sources()
        print("figures_capstone.py: every source line the schematic names is there")
        return 0
    out = out_dir(a.out)
    draw(out)
    print(f"wrote capstone-op-path.png to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
