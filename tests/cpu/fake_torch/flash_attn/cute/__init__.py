"""A stand-in for FlashAttention-4's flash_attn_func ([B, N, H, D] in and out, returns (out, lse)).
FAKE_FA4=wrong reads its inputs as [B, H, N, D] (the layout mistake the output check must catch);
FAKE_FA4=missing makes the import fail."""
import os

import torch.nn.functional as F

if os.environ.get("FAKE_FA4") == "missing":
    raise ImportError("no module named cutlass (fake)")


def flash_attn_func(q, k, v, causal=False):
    if os.environ.get("FAKE_FA4") == "wrong":
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal), None
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return o.transpose(1, 2).contiguous(), None
