// Lab 04's checker (given, do not edit): the attention check grid for your kernel, then your kernel
// and the naive step 00 timed on the same inputs, with the "two ledgers" side by side — global bytes,
// shared memory per block, registers, error — and both placed on the roofline.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/problem.hpp"
#include "labs/L04_toy_attention/lab04.hpp"
#include "labs/common/lab.hpp"

namespace {

using ladder::AttentionShape;

constexpr AttentionShape kTimed{.batch = 2, .heads = 8, .seqlen = 4096, .head_dim = 64, .causal = false};

// The H200's datasheet ceilings (not measured here): HBM3e bandwidth, and fp32 on CUDA cores,
// where both of these kernels do their arithmetic. The run's own cuBLAS fp16 GEMM row shows the
// tensor-core roof the later steps climb towards.
constexpr double kDatasheetBandwidth = 4.8e12;   // bytes/s
constexpr double kDatasheetFp32Flops = 67e12;    // FLOP/s

// Global bytes of the toy kernel (model, caches ignored): Q read once, O written once, and each
// block of Br rows reads the K and V rows it needs (all of them, or up to its last row if causal).
double toy_bytes(const AttentionShape& s, const lab04::Tiles& t) {
  const double row_bytes = 2.0 * s.head_dim;  // fp16
  double kv_rows = 0;
  for (int q0 = 0; q0 < s.seqlen; q0 += t.block_rows)
    kv_rows += s.causal ? std::min(s.seqlen, q0 + t.block_rows) : s.seqlen;
  const double heads = double(s.batch) * s.heads;
  return heads * (2.0 * s.seqlen * row_bytes + 2.0 * kv_rows * row_bytes);
}

// Step 00's own ledger model (its notes print it too): the N×N fp32 score matrix is written once,
// read three times and written once by the softmax, read ceil(D/64) times by P V; plus Q, K, V, O.
double naive_bytes(const AttentionShape& s) {
  const double nn = 4.0 * s.batch * s.heads * double(s.seqlen) * s.seqlen;
  return nn * (5 + (s.head_dim + 63) / 64) + ladder::min_bytes(s);
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L04", "toy attention: tiling + online softmax, and its two ledgers");
  lab::Verdict verdict("L04");
  lab::check_registration(lab04::kStep, {"toy"}, verdict);

  const lab04::Tiles t = lab04::tiles(kTimed.head_dim);
  const double flops = ladder::flops(kTimed);
  fmt::print("\nthe timed problem: {}; {:.1f} GFLOP\n", kTimed.to_string(), flops / 1e9);
  fmt::print("ledger 1, global bytes (model, caches ignored):\n");
  fmt::print("  naive (step 00): {:8.3f} GB   the N×N scores alone are {:.0f} MiB per launch\n", naive_bytes(kTimed) / 1e9,
             4.0 * kTimed.batch * kTimed.heads * double(kTimed.seqlen) * kTimed.seqlen / (1 << 20));
  fmt::print("  toy (yours):     {:8.3f} GB   K and V re-read once per block of {} rows\n", toy_bytes(kTimed, t) / 1e9, t.block_rows);
  fmt::print("  minimum:         {:8.3f} GB   Q, K, V read once, O written once\n", ladder::min_bytes(kTimed) / 1e9);
  fmt::print("ledger 2, on chip: toy tiles Br = {}, Bc = {}, {} threads, {} B of shared memory per block (D = {})\n",
             t.block_rows, t.block_keys, t.threads, t.smem_bytes, kTimed.head_dim);
  if (options.cpu_only) return verdict.finish_cpu_only();

  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  try {
    const auto toy = lab::variants_of_step(lab04::kStep);
    const auto shapes = lab::attention_grid_shapes();
    lab::attention_grid(*session, toy, shapes, verdict, lab::check_options());
    fmt::print("large logits (Q×5, K×3):\n");
    lab::attention_grid(*session, toy, lab::large_logit_shapes(), verdict, lab::large_logit_options());

    if (!options.no_time && verdict.ok()) {
      const std::vector<ladder::VariantRef> both = {lab::variant(0, "naive"), lab::variant(lab04::kStep, "toy")};
      const auto run = lab::show(ladder::run_attention(*session, kTimed, both, lab::timed_options()));
      const bool h200 = session->gpu.name.find("H200") != std::string::npos;
      fmt::print("\nthe two ledgers, {} (bytes are the model above; registers and shared memory from the "
                 "compiled kernels; error against fp64):\n", kTimed.to_string());
      fmt::print("  {:<10} {:>9} {:>10} {:>6} {:>10} {:>9} {:>9} {:>10}{}\n", "kernel", "GB moved", "smem/block",
                 "regs", "max|err|", "ms", "TFLOP/s", "FLOP/byte", h200 ? "  roofline (H200 datasheet)" : "");
      for (const auto& r : run.rows) {
        if (r.ceiling || !r.timing) continue;
        const bool is_toy = r.step == lab04::kStep;
        const double bytes = is_toy ? toy_bytes(kTimed, t) : naive_bytes(kTimed);
        int regs = 0;
        std::size_t smem = 0;
        for (const auto& k : r.kernels) {
          regs = std::max(regs, k.registers);
          smem = std::max(smem, k.static_smem + k.dynamic_smem);
        }
        const double ai = flops / bytes;
        const double bound = std::min(kDatasheetFp32Flops, ai * kDatasheetBandwidth);
        std::string roof;
        if (h200)
          roof = fmt::format("  bound {:.1f} TFLOP/s ({}-bound), measured {:.0f}% of it", bound / 1e12,
                             ai * kDatasheetBandwidth < kDatasheetFp32Flops ? "memory" : "fp32", 100 * r.tflops() * 1e12 / bound);
        const std::string line = fmt::format("  {:<10} {:9.3f} {:10} {:6} {:10.2e} {:9.3f} {:9.2f} {:10.1f}{}", r.id, bytes / 1e9,
                                             smem, regs, r.error ? r.error->max_abs : NAN, r.timing->median_ms, r.tflops(), ai, roof);
        fmt::print("{}\n", line);
        verdict.info(line);
      }
      if (h200)
        fmt::print("  roofline: bound = min(67 TFLOP/s fp32, FLOP/byte × 4.8 TB/s), the H200 datasheet's figures;\n"
                   "  the ridge is at {:.0f} FLOP/byte. A kernel far below its bound is limited by something the\n"
                   "  model leaves out (latency, shuffles, instruction count): chapter 04 goes there.\n",
                   kDatasheetFp32Flops / kDatasheetBandwidth);
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
