import numpy as np

import torch
from torch.nn.attention import SDPBackend, current


def attention(q, k, v, causal):
    """Exact attention on [B, H, N, D] arrays: O, and the backward as a function of dO."""
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v

    def backward(d_o):
        dv = np.swapaxes(p, -1, -2) @ d_o
        dp = d_o @ np.swapaxes(v, -1, -2)
        ds = p * (dp - (d_o * o).sum(-1, keepdims=True))
        return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv
    return o, backward


def with_backward(o, inputs, backward, dtype):
    """O as a tensor that carries its backward when any input requires gradients."""
    out = torch.Tensor(o, dtype)
    if any(x.requires_grad for x in inputs):
        out._backward = (list(inputs), backward)
    return out


def scaled_dot_product_attention(q, k, v, is_causal=False):
    """Exact attention on [B, H, N, D]; the 'efficient' backend refuses, as a backend may."""
    if current[0] == SDPBackend.EFFICIENT_ATTENTION:
        raise RuntimeError("No available kernel. Aborting execution.\nsecond line")
    o, backward = attention(q.a, k.a, v.a, is_causal)
    return with_backward(o, (q, k, v), backward, q.dtype)
