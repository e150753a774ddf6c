"""A stand-in for FlashAttention-4's flash_attn_func ([B, N, H, D] in and out, returns (out, lse)),
with its backward (the output carries it, as the stand-in torch's attention does).
FAKE_FA4=wrong reads its inputs as [B, H, N, D] (the layout mistake the output check must catch);
FAKE_FA4=missing makes the import fail."""
import os

import numpy as np

import torch.nn.functional as F

if os.environ.get("FAKE_FA4") == "missing":
    raise ImportError("no module named cutlass (fake)")


def flash_attn_func(q, k, v, causal=False):
    if os.environ.get("FAKE_FA4") == "wrong":
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal), None
    t = lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2))  # noqa: E731  [B, N, H, D] <-> [B, H, N, D]
    o, backward = F.attention(t(q.a), t(k.a), t(v.a), causal)
    return F.with_backward(t(o), (q, k, v), lambda d_o: tuple(t(g) for g in backward(t(d_o))), q.dtype), None
