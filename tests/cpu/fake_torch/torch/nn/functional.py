import numpy as np

import torch
from torch.nn.attention import SDPBackend, current


def scaled_dot_product_attention(q, k, v, is_causal=False):
    """Exact attention on [B, H, N, D]; the 'efficient' backend refuses, as a backend may."""
    if current[0] == SDPBackend.EFFICIENT_ATTENTION:
        raise RuntimeError("No available kernel. Aborting execution.\nsecond line")
    s = q.a @ np.swapaxes(k.a, -1, -2) / np.sqrt(q.shape[-1])
    if is_causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return torch.Tensor((p / p.sum(-1, keepdims=True)) @ v.a, q.dtype)
