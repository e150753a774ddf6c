"""One FlashAttention-4 backward problem, run three times, for Nsight Compute (`--launch-skip 1
--launch-count 1` takes the second launch, after the first call compiled the kernel): the FA4 side
of chapters 37 and 38's profiles.
  python3 scripts/fa4_backward_once.py gqa none|causal    B=2 Hq=32 Hkv=8 N=4096 D=128 bf16
  python3 scripts/fa4_backward_once.py varlen causal      the 24 lengths of peers.py --grid bwd-varlen --seed 3, H=32 Hkv=8
Needs flash-attn-4 (`pip install flash-attn-4`), PyTorch and an sm_90 GPU."""
import sys
import torch
from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
kind, mask = sys.argv[1], sys.argv[2]
causal = mask == "causal"
torch.manual_seed(0)
dt = torch.bfloat16
first = lambda r: r[0] if isinstance(r, (tuple, list)) else r
if kind == "gqa":
    q = torch.randn(2, 4096, 32, 128, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(2, 4096, 8, 128, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(2, 4096, 8, 128, device="cuda", dtype=dt, requires_grad=True)
    f = lambda: first(flash_attn_func(q, k, v, causal=causal))
else:
    lens = [3899, 2137, 6062, 7767, 1074, 216, 7688, 4250, 3840, 3142, 7705, 7805, 6507, 2468, 3800, 2485,
            6389, 249, 1050, 2612, 702, 4936, 509, 4415]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int32)
    t = sum(lens)
    q = torch.randn(t, 32, 128, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(t, 8, 128, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(t, 8, 128, device="cuda", dtype=dt, requires_grad=True)
    f = lambda: first(flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens),
                                             max_seqlen_k=max(lens), causal=causal))
for _ in range(3):
    o = f()
    o.backward(torch.randn_like(o))
torch.cuda.synchronize()
print("fa4 once:", kind, mask, "ok")
