// Lab 08's given interface (do not edit): the sizes, the layout of the partial results, and the
// kernel's launcher. Included by your combine.hpp's users: the kernel (combine_kernel.cu), the
// CPU model (model.hpp) and the checker, so all of them agree.
//
// One query row was attended over its keys in `splits` pieces (split-KV, "flash-decoding"): split s
// saw the keys of its chunk only and wrote, as FlashAttention's split kernels do,
//   o_part[s][d]  its output NORMALIZED by its own sum: Σ_{j in s} exp(x_j − m_s) v_jd / l_s
//   lse_part[s]   log Σ_{j in s} exp(x_j), natural log of the scaled logits x_j (= m_s + log l_s)
// A split that saw no key has lse_part = −inf, and its o_part is not to be read (this lab's
// checker fills it with NaN; FlashAttention happens to write zeros there).
// Layout, rows × splits: o_part [rows][splits][head_dim], lse_part [rows][splits], fp32.
// The combine writes o [rows][head_dim] and lse [rows]: the attention of the row over ALL its
// keys, and log Σ_j exp(x_j) (−inf for a row with no key at all; its o is then 0).
#pragma once

#include <cuda_runtime.h>

namespace lab08 {

inline constexpr int kMaxSplits = 64;  // the most splits one row may have
inline constexpr int kThreads = 128;   // threads of the combine's thread block (one block per row)

// Launches combine_kernel (combine_kernel.cu): grid `rows`, kThreads threads, each block one row.
void launch_combine(const float* o_part, const float* lse_part, int rows, int splits, int head_dim,
                    float* o, float* lse, cudaStream_t stream);

}  // namespace lab08
