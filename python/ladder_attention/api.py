"""ladder_attention.attention: SDPA's call on the ladder's kernels (ops.py's operators)."""
import torch

from . import checks, dispatch
from .ops import attention_fwd, attention_varlen_fwd


def _host_lengths(cu_seqlens, seqlens, max_seqlen):
    """seqlens as a CPU int32 tensor: given (a list, a tuple or a CPU tensor), or read back from
    cu_seqlens -- a device-to-host copy, so not while a CUDA graph is captured nor inside torch.compile."""
    if seqlens is None:
        if torch.compiler.is_compiling():
            raise ValueError("varlen under torch.compile needs seqlens= (the B lengths on the host, a list or a "
                             "CPU tensor): reading them back from cu_seqlens would be a device sync in the graph")
        if cu_seqlens.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("varlen during CUDA-graph capture needs seqlens= (the host lengths): reading "
                               "cu_seqlens back is a device-to-host copy, which a capture cannot hold")
        if cu_seqlens.device.type == "meta":
            raise ValueError("meta cu_seqlens have no values: give seqlens= too")
        seqlens = (cu_seqlens[1:] - cu_seqlens[:-1]).cpu()
    if isinstance(seqlens, (list, tuple)):
        seqlens = torch.tensor(seqlens, dtype=torch.int32)
    if not isinstance(seqlens, torch.Tensor) or seqlens.device.type != "cpu":
        raise ValueError("seqlens must be the host lengths: a list of ints or a CPU tensor, got %r"
                         % (type(seqlens).__name__ if not isinstance(seqlens, torch.Tensor) else seqlens.device))
    seqlens = seqlens.to(torch.int32)
    if max_seqlen is not None and not torch.compiler.is_compiling() and seqlens.numel() \
            and int(seqlens.max()) > max_seqlen:
        raise ValueError("max_seqlen=%d but a sequence has %d tokens" % (max_seqlen, int(seqlens.max())))
    return seqlens


def attention(q, k, v, causal=False, *, variant=None, backward_variant=None, cu_seqlens=None, max_seqlen=None,
              seqlens=None, block_table=None, kv_seqlen=None, return_lse=False):
    """softmax(q k^T / sqrt(D)) v on the ladder's kernels, fp16 or bf16, D = 64 or 128.

    dense   q [B, H, N, D], k, v [B, Hkv, N, D] (GQA when Hkv < H): forward and backward.
    decode  q [B, H, Nq, D] against k, v [B, Hkv, Nkv, D], Nq <= 16 < Nkv; causal is aligned to the
            end (query i sees keys up to Nkv - Nq + i: SDPA's is_causal aligns to the start): forward only.
    varlen  q [total, H, D], k, v [total, Hkv, D], cu_seqlens [B + 1] int32 on the device, and seqlens
            (the B lengths on the host: a list or CPU tensor; read back from cu_seqlens if omitted, a
            device sync that torch.compile and CUDA-graph capture refuse). max_seqlen is checked
            against them. Forward and backward.
    paged   q [B, H, Nq, D], k, v page pools [pages, Hkv, page_size, D], block_table [B, pages_per_seq]
            int32 on the device, kv_seqlen keys in every sequence: forward only.

    variant / backward_variant name a variant id (`ladder --list`) instead of the dispatch table's
    choice (ladder_attention.dispatch); backward_variant="deterministic" picks a bit-reproducible
    backward. A strided q, k or v is copied once to a contiguous one. return_lse: also return the
    log-sum-exp ([B, H, N], varlen [H, total]; not differentiable)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        checks._tensor(name, x)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if cu_seqlens is not None:
        checks._tensor("cu_seqlens", cu_seqlens)
        seqlens = _host_lengths(cu_seqlens, seqlens, max_seqlen)
    elif seqlens is not None or max_seqlen is not None:
        raise ValueError("seqlens and max_seqlen describe a varlen batch: give cu_seqlens too")
    if block_table is not None and kv_seqlen is None:
        raise ValueError("a paged cache (block_table) needs kv_seqlen, the keys in every sequence")
    need_grad = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    p = checks.describe(q, k, v, causal, cu_seqlens, seqlens, block_table, kv_seqlen or 0, allow_meta=True)
    if need_grad and (p.layout == "paged" or (p.layout == "dense" and p.seqlen != p.kv_seqlen)):
        raise NotImplementedError("the ladder has no backward for %s (inference only): run it under "
                                  "torch.no_grad() or on tensors that need no gradient"
                                  % ("a paged cache" if p.layout == "paged" else "decode shapes"))
    dispatch.check_named(variant, need_grad or return_lse)
    op = attention_fwd if cu_seqlens is None else attention_varlen_fwd
    out, lse = op(q, k, v, causal, variant or "", backward_variant or "", need_grad or return_lse, cu_seqlens,
                  seqlens, block_table, kv_seqlen or 0)
    return (out, lse) if return_lse else out
