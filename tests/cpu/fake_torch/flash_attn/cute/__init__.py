"""A stand-in for FlashAttention-4's flash_attn_func ([B, N, H, D] in and out, returns (out, lse)),
with its backward (the output carries it, as the stand-in torch's attention does).
FAKE_FA4=wrong reads its inputs as [B, H, N, D] (the layout mistake the output check must catch);
FAKE_FA4=missing makes the import fail. flash_attn_varlen_func: the packed batch (cu_seqlens) and
the paged cache (page_table into pools [num_pages, page_size, Hkv, D], seqused_k), causal aligned to
the end as FlashAttention's, and the packed batch's output carries its backward (per sequence);
FAKE_FA4=sm90 refuses the page table as FA4 does on sm_90. FAKE_FA4=needs-deterministic answers
wrongly unless deterministic=True is passed (the check that --backends fa4-deterministic asks for it)."""
import os

import numpy as np

import torch
import torch.nn.functional as F

if os.environ.get("FAKE_FA4") == "missing":
    raise ImportError("no module named cutlass (fake)")


def flash_attn_func(q, k, v, causal=False, deterministic=False):
    if os.environ.get("FAKE_FA4") == "wrong" or (os.environ.get("FAKE_FA4") == "needs-deterministic"
                                                 and not deterministic):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal), None
    t = lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2))  # noqa: E731  [B, N, H, D] <-> [B, H, N, D]
    o, backward = F.attention(t(q.a), t(k.a), t(v.a), causal, end_aligned=True)
    return F.with_backward(t(o), (q, k, v), lambda d_o: tuple(t(g) for g in backward(t(d_o))), q.dtype), None


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           seqused_q=None, seqused_k=None, page_table=None, causal=False):
    t = lambda a: np.swapaxes(a, -3, -2)  # noqa: E731  [.., N, H, D] <-> [.., H, N, D]
    one = lambda qa, ka, va: t(F.attention(t(qa)[None], t(ka)[None], t(va)[None], causal, end_aligned=True)[0][0])  # noqa: E731
    if page_table is not None:
        if os.environ.get("FAKE_FA4") == "sm90":
            raise AssertionError("paged KV not supported on SM 9.0")
        assert cu_seqlens_k is None, "page_table is not supported with cu_seqlens_k"
        pages, used = page_table.a.astype(int), seqused_k.a.astype(int)
        out = np.zeros(q.shape)
        for b in range(q.shape[0]):
            rows = lambda pool: pool.a[pages[b]].reshape(-1, *pool.shape[2:])[:used[b]]  # noqa: E731
            out[b] = one(q.a[b], rows(k), rows(v))
        return torch.Tensor(out, q.dtype), None
    cq, ck = cu_seqlens_q.a.astype(int), cu_seqlens_k.a.astype(int)
    out = np.zeros(q.shape)
    backwards = []  # each sequence's, for a backward of the packed batch (scripts/peers_bwd.py)
    for b in range(len(cq) - 1):
        sq, sk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        o, backward = F.attention(t(q.a[sq])[None], t(k.a[sk])[None], t(v.a[sk])[None], causal, end_aligned=True)
        out[sq] = t(o[0])
        backwards.append((sq, sk, backward))

    def backward(d_o):
        grads = [np.zeros(x.shape) for x in (q, k, v)]
        for sq, sk, one_backward in backwards:
            for g, part, rows in zip(grads, one_backward(t(d_o[sq])[None]), (sq, sk, sk)):
                g[rows] = t(part[0])
        return grads
    return F.with_backward(out, (q, k, v), backward, q.dtype), None
