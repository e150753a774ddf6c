// CPU references, in fp64 and in "low precision" (what an fp16 or bf16 kernel with fp32
// accumulation is expected to compute). No CUDA: the CPU tests exercise all of it.
//
// The pass rule (compare.hpp) is FlashAttention's: a kernel's error against the fp64 reference may
// be at most twice the error the low-precision reference makes, plus a small absolute term. The
// low-precision reference therefore sets how much rounding is fair for this problem and these inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "common/dtype.hpp"
#include "common/problem.hpp"

namespace ladder {

enum class Precision {
  Fp64,  // every operation in double
  Low,   // fp32 scores and sums, P rounded to the element type (shape.dtype) before P·V, output
         // rounded to it. fp8 (E4M3): what the FP8 kernel computes: fp32 scores of the dequantized
         // inputs, P = exp(s − m) in fp32 against the running max m of the key blocks seen so
         // far (kE4M3KeyBlock keys a block unless the variant declares its own, the last block
         // first, as the kernels work), P rounded for P·V as from_e4m3(to_e4m3(P·2^8)) / 2^8
         // (FlashAttention-3's offset: P·256 in [0, 256] fits e4m3's 448, dtype.hpp's
         // kE4M3PScale), the row sum from the unrounded fp32 P, O rounded
         // to bf16 (output_dtype). Fp64 is unchanged: exact arithmetic on the dequantized values.
         // With these two the pass rule is the issue's "within 2× of a reference that rounds Q,
         // K, V and P to FP8 the same way" (compare.hpp says why).
};

// Query rows are numbered as they lie in Q and O: row r starts at element r·D. Dense, that is
// r = (b·H + h)·N + i; packed variable-length, r = (cu_seqlens_q[b] + i)·H + h. RowIndex maps a
// row to its (sequence, head, query) and back, and gives the layouts' other offsets
// (common/problem.hpp), with the prefix sums computed once.
struct RowIndex {
  explicit RowIndex(const AttentionShape& shape);
  struct Coord {
    int b, h, i;
  };
  Coord coord(std::int64_t row) const;
  std::int64_t row(int b, int h, int i) const;
  std::int64_t key_offset(int b, int hk, int j) const;  // in the logical (unpaged) K and V
  std::int64_t lse_index(int b, int h, int i) const;
  std::int64_t key_stride() const;  // elements from key j to key j + 1
  // Key rows numbered as they lie in K and V (and dK, dV): row r starts at element r·D. Dense,
  // r = (b·Hkv + hk)·Nk + j; packed variable-length, r = (cu_seqlens_k[b] + j)·Hkv + hk. The
  // coordinate is {b, hk, j} (Coord's h is the K/V head, its i the key).
  Coord key_coord(std::int64_t row) const;
  std::int64_t key_row(int b, int hk, int j) const;
  AttentionShape s;
  std::vector<int> cu_q, cu_k;
};

// Rows of O (and their log-sum-exp) for the selected query rows (numbered as RowIndex says).
// q, k, v hold the input values (fp16 or bf16, shape.dtype, widened to float; fp8: dequantized,
// QuantizedTensor::value), in the problem's layout (common/problem.hpp); a paged K/V is given
// here unpaged, as the block table reads it.
// Every query row of a valid shape sees at least one key (validate() refuses the others).
struct AttentionRows {
  std::vector<std::int64_t> rows;
  std::vector<double> o;    // rows.size() × D
  std::vector<double> lse;  // rows.size(): natural log of Σ exp(scaled logits)
  std::vector<std::int64_t> lse_at;  // rows.size(): where each row's log-sum-exp lies in the LSE
  // fp8 only, from the Fp64 reference (empty otherwise): per row, the most one rounding flip of P
  // can move O, kE4M3RoundingStep · max_j p̂_j · max_t |v_jt| (p̂ the exact softmax weights); the
  // pass rule's floor for e4m3 (compare.hpp says why).
  std::vector<double> floor;
};
// fp8_key_block: the Low reference's key block for fp8 (its other precisions ignore it).
AttentionRows attention_reference(const AttentionShape& shape, std::span<const float> q,
                                  std::span<const float> k, std::span<const float> v,
                                  std::span<const std::int64_t> rows, Precision precision,
                                  int fp8_key_block = kE4M3KeyBlock);

// ---- The backward pass (Part V; GQA and varlen, Part VI) -------------------------------------
// With P = softmax(S·scale) row by row and dO = ∂L/∂O:
//   dV = Pᵀ dO,  dP = dO Vᵀ,  D_i = Σ_d dO_id O_id (= Σ_j P_ij dP_ij),  dS = P ∘ (dP − D_i),
//   dQ = scale · dS K,  dK = scale · dSᵀ Q.
// A gradient row of dK or dV (key j of K/V head hk) sums over every query row i of every query
// head of hk's group (h / group == hk; GQA) that sees it, and each term needs that row's
// log-sum-exp and D_i: the per-row statistics below, computed once for the whole problem.
// The layouts are the forward's (common/problem.hpp; BackwardArgs): Q, O, dO, dQ as Q; K, V, dK,
// dV as K; a packed variable-length batch is attended per sequence (causal inside each).
// A backward problem is self-attention (validate_backward: as many keys as queries in every
// sequence, K/V contiguous).
struct BackwardStats {
  std::vector<double> lse;    // shape.rows(), by query row (RowIndex::row): log-sum-exp of each
  std::vector<double> delta;  // shape.rows(), by query row: D_i
};

// The exact statistics and output of every row, in fp64 on the CPU (the forward of every row:
// B·H·N²·D multiply-adds, for tests and small problems; the runner uses the GPU's fp64 forward,
// common/reference_gpu.hpp, and checks it against attention_reference on its sampled rows).
struct ForwardForBackward {
  std::vector<double> o;  // shape.elements(), in Q's layout
  BackwardStats stats;
};
ForwardForBackward forward_for_backward_fp64(const AttentionShape& shape, std::span<const float> q,
                                             std::span<const float> k, std::span<const float> v,
                                             std::span<const float> d_o);

// The statistics a low-precision kernel works from: the forward's stored fp32 LSE as it is (read
// at lse_index, the forward's layout, and put in query-row order), and D_i summed in fp32 from the
// stored (rounded) O, as a preprocess kernel computes it.
BackwardStats backward_stats_low(const AttentionShape& shape, std::span<const float> o_stored,
                                 std::span<const float> d_o, std::span<const float> lse_stored);

// Rows of dQ (query rows `q_rows`, numbered as RowIndex::row) and of dK, dV (key rows `k_rows`,
// numbered as RowIndex::key_row). Fp64: every operation in double from exact statistics. Low:
// fp32 scores and sums, P and dS rounded to the element type before the products they feed (as a
// kernel feeds them to the tensor cores), fp32 accumulation, the gradients rounded to the element type.
struct BackwardRows {
  std::vector<std::int64_t> q_rows, k_rows;
  std::vector<double> dq;  // q_rows.size() × D
  std::vector<double> dk;  // k_rows.size() × D
  std::vector<double> dv;  // k_rows.size() × D
  // Per row (Fp64 only), the rounding noise a correct kernel carries that the low-precision
  // reference samples only once, so that twice its error is no bound where its sample happens to
  // be small (reference_backward.cpp, GradientRow::Noise, says how each is estimated):
  //   fp32:         ε₃₂·sqrt(D)·scale·Σ_j P_ij (Σ_d |dO_id V_jd| + |D_i|)·max|K_j|  (dQ; dK with Q)
  //                 the residue of dP − D where they cancel (one key: dS = 0 exactly);
  //   element type: u·sqrt(Σ_j (scale·|dS_ij|·max|K_j|)²)  (dQ; dK with Q; dV: |P_ij|·max|dO_i|)
  //                 the roundings of P and dS, in a cancelling sum (Σ_j dS_ij = 0).
  // A dK or dV row's sums run over every (query head of the group, query) pair that sees its
  // key, so under GQA they hold group × as many terms as an MHA row's.
  // Round 1 of Part V on the H200 needed both: with large logits and at N = 8192, D = 128, steps
  // 24 and 25 and cuDNN erred by the same 1.1–1.4× (cuDNN's dK up to 5×) a tolerance without them.
  std::vector<double> dq_floor;  // q_rows.size()
  std::vector<double> dk_floor;  // k_rows.size()
  std::vector<double> dv_floor;  // k_rows.size()
};
struct BackwardInputs {
  std::span<const float> q, k, v, d_o;  // widened element values: Q and dO as Q, K and V as K
};
BackwardRows backward_reference(const AttentionShape& shape, const BackwardInputs& in,
                                const BackwardStats& stats, std::span<const std::int64_t> q_rows,
                                std::span<const std::int64_t> k_rows, Precision precision);

// Rows of C = A·B for the selected row indices (fp64, or fp32 accumulation in k order).
struct MatmulRows {
  std::vector<std::int64_t> rows;
  std::vector<double> c;  // rows.size() × N
};
MatmulRows matmul_reference(const MatmulShape& shape, std::span<const float> a,
                            std::span<const float> b, std::span<const std::int64_t> rows,
                            Precision precision);

// Σ x: fp64, or one fp32 accumulator in index order (the worst order a correct kernel may use).
double reduction_reference(std::span<const float> x, Precision precision);
double sum_of_magnitudes(std::span<const float> x);

// Every row if there are at most `max_rows`; otherwise a seeded, sorted sample that covers every
// (head, tile of `tile_rows` rows) at least once and the first and last row of every head, topped
// up with random rows to `max_rows`. Coverage wins over the budget: a problem with more tiles than
// `max_rows` gets one row per tile. (Large problems are checked on a sample because an fp64
// reference of every row would take minutes; covering every tile means a kernel wrong in a single
// thread block's rows still fails.)
inline constexpr std::int64_t kCoverageTileRows = 128;  // the largest Br of any step
std::vector<std::int64_t> select_rows(std::int64_t total_rows, std::int64_t rows_per_head,
                                      std::int64_t max_rows, std::uint64_t seed,
                                      std::int64_t tile_rows = kCoverageTileRows);

// A paged K/V cache built from the logical one (common/problem.hpp's layout), as 16-bit element
// bits: each sequence's pages are scattered over the pool in a seeded random order, so a kernel
// that ignores the block table reads the wrong keys; the rows past a sequence's last key in its
// last page hold kPagePadValue, large and finite, so a kernel that reads them without masking is
// visibly wrong (not NaN: a correct kernel may multiply a masked, zero probability by them).
struct PagedCache {
  std::vector<std::uint16_t> k, v;  // [num_pages, Hkv, P, D]
  std::vector<int> block_table;     // [B, pages_per_seq]; -1 where a sequence has fewer pages
};
inline constexpr float kPagePadValue = 256.0f;  // exact in fp16 and bf16
PagedCache page_cache(const AttentionShape& s, const RowIndex& index, std::span<const std::uint16_t> k,
                      std::span<const std::uint16_t> v, std::uint64_t seed);

// select_rows over an attention problem's query rows: dense, as above; variable-length, every
// (sequence, head, 128-query tile) and each sequence's first and last query.
std::vector<std::int64_t> select_attention_rows(const AttentionShape& shape, std::int64_t max_rows,
                                                std::uint64_t seed);
// The same over a problem's key rows (RowIndex::key_row): every (sequence, K/V head, 128-key
// tile) and each sequence's first and last key, a sequence of one key included; for the dK and
// dV rows of the backward.
std::vector<std::int64_t> select_key_rows(const AttentionShape& shape, std::int64_t max_rows,
                                          std::uint64_t seed);

// Online softmax over one row processed in blocks, the algorithm every FlashAttention step
// implements: returns softmax(x) computed block by block with a running max m and sum l, each
// earlier partial result rescaled by exp(m_old − m_new). Used by the tests to show it equals the
// one-shot softmax.
struct OnlineSoftmaxState {
  double m = -INFINITY;  // running maximum
  double l = 0.0;        // running Σ exp(x − m)
};
void online_softmax_update(OnlineSoftmaxState& state, std::span<const double> block);
std::vector<double> online_softmax(std::span<const double> x, std::span<const int> block_sizes);
std::vector<double> softmax(std::span<const double> x);

}  // namespace ladder
