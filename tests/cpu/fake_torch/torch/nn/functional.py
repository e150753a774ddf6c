import numpy as np

import torch
from torch.nn.attention import SDPBackend, current


def attention(q, k, v, causal, end_aligned=False):
    """Exact attention on [B, H, Nq, D] arrays with K, V [B, Hkv, Nk, D] (GQA: Q head h reads K/V head
    h // (H / Hkv)): O, and the backward as a function of dO. The causal mask is aligned to the top
    left (SDPA's is_causal: query i sees keys j <= i) or, end_aligned, to the end (FlashAttention's:
    j <= Nk - Nq + i); the same where Nq = Nk."""
    group = q.shape[-3] // k.shape[-3]
    hkv = k.shape[-3]
    k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        nq, nk = s.shape[-2:]
        s = np.where(np.tril(np.ones((nq, nk), dtype=bool), k=nk - nq if end_aligned else 0), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v

    def backward(d_o):
        dv = np.swapaxes(p, -1, -2) @ d_o
        dp = d_o @ np.swapaxes(v, -1, -2)
        ds = p * (dp - (d_o * o).sum(-1, keepdims=True))
        dk = np.swapaxes(ds, -1, -2) @ q * scale
        fold = lambda g: g.reshape(*g.shape[:-3], hkv, group, *g.shape[-2:]).sum(-3)  # noqa: E731 GQA
        return ds @ k * scale, fold(dk), fold(dv)
    return o, backward


def with_backward(o, inputs, backward, dtype):
    """O as a tensor that carries its backward when any input requires gradients."""
    out = torch.Tensor(o, dtype)
    if any(x.requires_grad for x in inputs):
        out._backward = (list(inputs), backward)
    return out


def scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=False):
    """Exact attention on [B, H, N, D]; the 'efficient' backend refuses, as a backend may; fewer K/V
    heads only with enable_gqa, and is_causal aligned to the top left, as PyTorch's."""
    if current[0] == SDPBackend.EFFICIENT_ATTENTION:
        raise RuntimeError("No available kernel. Aborting execution.\nsecond line")
    if k.shape[-3] != q.shape[-3] and not enable_gqa:
        raise RuntimeError("The size of tensor a must match the size of tensor b at non-singleton dimension 1")
    o, backward = attention(q.a, k.a, v.a, is_causal)
    return with_backward(o, (q, k, v), backward, q.dtype)
