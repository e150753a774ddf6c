"""The PyTorch operators: ladder::attention_fwd (out, lse) and ladder::attention_bwd (dq, dk, dv),
torch.library custom ops with fake kernels (shapes and dtypes only: torch.compile, FakeTensor
and meta tensors need no library and no GPU) and autograd (the forward's inputs, output and
log-sum-exp saved; the backward runs attention_bwd). ladder::attention_varlen_fwd and
ladder::attention_varlen_bwd are the same two under the tag that keeps them out of Inductor's
CUDA graphs (_HOST_READ): a varlen call reads its lengths on the host.

Both take a variant id ("" = the dispatch table's best for the problem, dispatch.py) and run on
PyTorch's current stream of the tensors' device. The library keeps a workspace per variant and
problem from its first call, so a CUDA graph captures a problem after one eager call of it: a call
under capture of a problem that never ran eagerly raises a RuntimeError saying so (_run)."""
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _lib, checks, dispatch


# The variants the last real calls ran, {"forward": id, "backward": id} (for tests and curiosity).
LAST = {"forward": None, "backward": None}


# Inductor hands the ops contiguous tensors (the library's layout); older PyTorch: a fixed order.
_TAGS = tuple(getattr(torch.Tag, t) for t in ("needs_contiguous_strides",) if hasattr(torch.Tag, t)) or (
    torch.Tag.needs_fixed_stride_order,)
# A varlen call reads its lengths from a host tensor when it runs (they size the grid and the work
# list), so a CUDA graph recorded by Inductor would replay the first call's lengths for every later
# one. The varlen ops carry this tag: Inductor's mode="reduce-overhead" runs them between its graphs.
_HOST_READ = tuple(getattr(torch.Tag, t) for t in ("cudagraph_unsafe",) if hasattr(torch.Tag, t))


class UnsupportedError(RuntimeError):
    """No variant of the ladder serves the problem (each row's reason is in the message)."""


def _ptr(t):
    return None if t is None else t.data_ptr()


def _capability(device):
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def _run_first(what, candidates, call):
    """Calls call(variant) for each candidate until one is not refused; returns the id that ran."""
    refused = []
    for vid in candidates:
        try:
            call(vid)
            return vid
        except _lib.LadderError as e:
            if not dispatch.is_refusal(str(e)):
                raise _lib.LadderError("%s with %s: %s" % (what, vid, e)) from None
            refused.append(str(e))
    if not candidates:
        raise UnsupportedError("no variant in the table serves %s (ladder_attention.dispatch lists them; "
                               "variant= names any id of `ladder --list`)" % what)
    raise UnsupportedError("no variant serves %s: %s" % (what, " | ".join(refused)))


# The variant each problem's eager calls ran, by (entry point, device, shape, ..., candidates):
# under CUDA-graph capture only a problem found here may run, and only with that variant (_run).
WARM = {}


def _run(what, key, candidates, call, capturing):
    """_run_first outside a CUDA-graph capture (recording in WARM which variant served `key`); under
    capture (`capturing`), the variant an eager call of `key` ran, or a RuntimeError if none did.

    The library's first call of a variant for a problem is not capturable where the variant has a
    workspace (the decode steps, 21/dynamic) or is a cuDNN peer: it allocates the workspace
    (cudaMalloc) and cuDNN builds its plan and buffers -- calls that invalidate a capture, and a
    cuDNN build that fails there stays failed for the process. (Zeroing a workspace is a
    cudaMemsetAsync on the call's stream, which a capture holds.) The rule is the same for every
    variant, so a model's capture does not depend on which row served it. The refused rows before
    the one that ran are skipped too (a refusal depends only on the problem and the GPU)."""
    if not capturing:
        WARM[key] = vid = _run_first(what, candidates, call)
        return vid
    vid = WARM.get(key)
    if vid is None:
        raise RuntimeError(
            "%s is called during CUDA-graph capture but never ran eagerly: the library allocates a "
            "variant's workspace (cudaMalloc) and cuDNN builds its plan on the first call of a problem, "
            "which a capture cannot hold. Run one eager call of exactly this call first (the same shapes, dtype, causal, gradient need, variant, and for varlen the same lengths; "
            "forward and backward), e.g. on a side stream before torch.cuda.graph; torch.compile's "
            "mode='reduce-overhead' does it in its warm-up run" % what)
    return _run_first(what, [vid], call)


def _forward(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, variant: str = "",
             backward_variant: str = "", need_lse: bool = True, cu_seqlens: Optional[Tensor] = None,
             seqlens: Optional[Tensor] = None, block_table: Optional[Tensor] = None,
             kv_seqlen: int = 0) -> Tuple[Tensor, Tensor]:
    """O and the log-sum-exp (natural log, of the 1/sqrt(D)-scaled logits; NaN where need_lse is
    False and the variant writes none). backward_variant is the backward's choice, kept for it."""
    p = checks.describe(q, k, v, causal, cu_seqlens, seqlens, block_table, kv_seqlen)
    lens = checks.host_lengths(p, q, seqlens) if p.layout == "varlen" else None
    sm = _capability(q.device)
    kind = checks.kind_of(p)
    what = "the %s forward %s %s D=%d%s%s on sm_%d" % (kind, tuple(q.shape), p.dtype, p.head_dim,
                                                        " causal" if causal else "",
                                                        " with its log-sum-exp" if need_lse else "", sm)
    candidates = dispatch.forward_candidates(kind, sm, p.dtype, p.head_dim, need_lse, variant)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(checks.lse_shape(p, q), dtype=torch.float32, device=q.device)
    bf16 = int(p.dtype == "bf16")
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream().cuda_stream
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), stream)
        if kind == "dense":
            def call(vid):
                _lib.call("ladder_attention", vid, p.batch, p.heads, p.seqlen, p.head_dim, int(causal), bf16, *ptrs)
        else:
            q_lens = _lib.host_ints(lens)
            cu = _ptr(cu_seqlens)
            batch = len(lens) if lens else p.batch
            seqlen = max(lens) if lens else p.seqlen
            kv_len = 0 if lens else p.kv_seqlen

            def call(vid):
                _lib.call("ladder_attention_serving", vid, batch, p.heads, p.kv_heads, seqlen, kv_len, p.head_dim,
                          int(causal), bf16, q_lens, None, cu, cu, p.page_size, _ptr(block_table), *ptrs)
        key = ("forward", q.device.index, tuple(q.shape), tuple(k.shape), p.dtype, bool(causal), tuple(lens or ()),
               kv_seqlen, None if block_table is None else tuple(block_table.shape), tuple(candidates))
        used = LAST["forward"] = _run(what, key, candidates, call, torch.cuda.is_current_stream_capturing())
    if used not in dispatch.WRITES_LSE:
        lse.fill_(math.nan)
    return out, lse


def _forward_fake(q, k, v, causal=False, variant="", backward_variant="", need_lse=True, cu_seqlens=None,
                  seqlens=None, block_table=None, kv_seqlen=0):
    p = checks.describe(q, k, v, causal, cu_seqlens, seqlens, block_table, kv_seqlen, allow_meta=True)
    return q.new_empty(q.shape), q.new_empty(checks.lse_shape(p, q), dtype=torch.float32)


# The operator, and the same one under a second name with _HOST_READ for varlen (api.py picks it when
# cu_seqlens is given); the schema is read off _forward's type hints.
attention_fwd = torch.library.custom_op("ladder::attention_fwd", _forward, mutates_args=(), tags=_TAGS)
attention_varlen_fwd = torch.library.custom_op("ladder::attention_varlen_fwd", _forward, mutates_args=(),
                                               tags=_TAGS + _HOST_READ)
for _op in (attention_fwd, attention_varlen_fwd):
    _op.register_fake(_forward_fake)


def _gradients(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, causal: bool = False,
               variant: str = "", cu_seqlens: Optional[Tensor] = None,
               seqlens: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV of self-attention (dense, GQA or varlen) from the forward's out and lse.
    variant: an id, "" (the fastest) or "deterministic"."""
    p = _check_bwd(grad_out, q, k, v, out, lse, causal, cu_seqlens, seqlens, allow_meta=False)
    lens = checks.host_lengths(p, q, seqlens) if p.layout == "varlen" else None
    sm = _capability(q.device)
    kind = checks.kind_of(p)
    what = "the %s backward %s %s D=%d%s on sm_%d" % (kind, tuple(q.shape), p.dtype, p.head_dim,
                                                      " causal" if causal else "", sm)
    candidates = dispatch.backward_candidates(kind, sm, p.dtype, p.head_dim, variant)
    dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))
    bf16 = int(p.dtype == "bf16")
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream().cuda_stream
        ptrs = [x.data_ptr() for x in (q, k, v, out, grad_out, lse, dq, dk, dv)] + [stream]
        if kind == "dense":
            def call(vid):
                _lib.call("ladder_attention_backward", vid, p.batch, p.heads, p.seqlen, p.head_dim, int(causal),
                          bf16, *ptrs)
        else:
            q_lens = _lib.host_ints(lens)

            def call(vid):
                _lib.call("ladder_attention_backward_serving", vid, len(lens) if lens else p.batch, p.heads,
                          p.kv_heads, max(lens) if lens else p.seqlen, p.head_dim, int(causal), bf16, q_lens,
                          _ptr(cu_seqlens), *ptrs)
        key = ("backward", q.device.index, tuple(q.shape), tuple(k.shape), p.dtype, bool(causal),
               tuple(lens or ()), tuple(candidates))
        LAST["backward"] = _run(what, key, candidates, call, torch.cuda.is_current_stream_capturing())
    return dq, dk, dv


def _check_bwd(grad_out, q, k, v, out, lse, causal, cu_seqlens, seqlens, allow_meta):
    p = checks.describe(q, k, v, causal, cu_seqlens, seqlens, None, 0, allow_meta=allow_meta)
    if p.layout == "dense" and p.seqlen != p.kv_seqlen:
        raise NotImplementedError("the backward is self-attention: %d queries against %d keys (decode) has no "
                                  "backward in the ladder" % (p.seqlen, p.kv_seqlen))
    for name, x, shape, dtype in (("grad_out", grad_out, q.shape, q.dtype), ("out", out, q.shape, q.dtype),
                                  ("lse", lse, checks.lse_shape(p, q), torch.float32)):
        checks._tensor(name, x)
        if tuple(x.shape) != tuple(shape) or x.dtype != dtype:
            raise ValueError("%s is %s %s; the backward expects %s %s" % (name, tuple(x.shape), x.dtype,
                                                                         tuple(shape), dtype))
        checks._device(name, x, q, allow_meta)
        checks._contiguous(name, x)
    return p


def _backward_fake(grad_out, q, k, v, out, lse, causal=False, variant="", cu_seqlens=None, seqlens=None):
    _check_bwd(grad_out, q, k, v, out, lse, causal, cu_seqlens, seqlens, allow_meta=True)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


attention_bwd = torch.library.custom_op("ladder::attention_bwd", _gradients, mutates_args=(), tags=_TAGS)
attention_varlen_bwd = torch.library.custom_op("ladder::attention_varlen_bwd", _gradients, mutates_args=(),
                                               tags=_TAGS + _HOST_READ)
for _op in (attention_bwd, attention_varlen_bwd):
    _op.register_fake(_backward_fake)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, _, backward_variant, need_lse, cu_seqlens, seqlens, block_table, kv_seqlen = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.causal, ctx.backward_variant, ctx.need_lse = causal, backward_variant, need_lse
    ctx.no_backward = None
    if block_table is not None:
        ctx.no_backward = "a paged K/V cache"
    elif cu_seqlens is None and q.shape[2] != k.shape[2]:
        ctx.no_backward = "a decode shape (%d queries, %d keys)" % (q.shape[2], k.shape[2])
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens, seqlens)


def _backward(ctx, grad_out, _grad_lse):
    if ctx.no_backward:
        raise NotImplementedError("ladder::attention_fwd has no backward for %s (inference only: run it under "
                                  "torch.no_grad())" % ctx.no_backward)
    if not ctx.need_lse:
        raise RuntimeError("ladder::attention_fwd ran with need_lse=False, so it kept no log-sum-exp for the "
                           "backward: call it with need_lse=True (ladder_attention.attention does when a "
                           "gradient is needed)")
    q, k, v, out, lse, cu_seqlens, seqlens = ctx.saved_tensors
    op = attention_bwd if cu_seqlens is None else attention_varlen_bwd
    dq, dk, dv = op(grad_out.contiguous(), q, k, v, out, lse, ctx.causal, ctx.backward_variant, cu_seqlens, seqlens)
    return dq, dk, dv, None, None, None, None, None, None, None, None


for _op in (attention_fwd, attention_varlen_fwd):
    _op.register_autograd(_backward, setup_context=_setup_context)
