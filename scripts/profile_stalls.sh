#!/usr/bin/env bash
# Where the warps of a kernel wait: Nsight Compute's warp-state and scheduler sections for
# step 06's main kernel and for PyTorch's FlashAttention-2 kernel on the same problem
# (B=4, H=8, N=4096, D=128, non-causal), one launch each, clocks left alone.
#   scripts/profile_stalls.sh OUT            (builds step 06 with the gpu preset if needed)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=${1:?usage: scripts/profile_stalls.sh OUT}
mkdir -p "$out"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sections=(--section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
          --section SpeedOfLight --section Occupancy)
[ -x build/gpu/bin/step06_fa_v2_2 ] || { cmake --preset gpu >/dev/null && cmake --build --preset gpu --target step06_fa_v2_2 >/dev/null; }

for variant in h200 d128_s64; do
  echo "===== ours: 06/$variant, D=128"
  "$ncu" --clock-control none "${sections[@]}" -k regex:fa_v2_2 --launch-count 1 \
    build/gpu/bin/step06_fa_v2_2 --b 4 --heads 8 --n 4096 --d 128 --variant "$variant" --no-time --no-check --no-resources
done

echo "===== PyTorch SDPA, flash backend (FlashAttention-2), D=128"
"$ncu" --clock-control none "${sections[@]}" -k regex:flash_fwd --launch-skip 2 --launch-count 1 \
  python3 -c "
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(4, 8, 4096, 128, dtype=torch.float16, device='cuda') for _ in range(3))
with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
"
