// The command line shared by every step executable and by `ladder`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/registry.hpp"
#include "common/runner.hpp"

namespace ladder {

struct CliOptions {
  bool list = false;
  std::string steps;                  // "3-6", "0,3,5"; empty = all
  std::string track;                  // "attention", "backward", "matmul", "reduction"; empty = all
  std::vector<std::string> variants;  // variant names or ids; empty = all

  int batch = 4, heads = 8;
  std::vector<int> seqlens = {4096};
  std::vector<int> head_dims = {64};
  std::string mask = "none";  // none | causal | both
  std::vector<std::string> dtypes = {"fp16"};  // element types: fp16, bf16, fp8 (the variants that run it)
  // fp8's descales (Part VIII), one problem per value for each fp8 type: "tensor" (one a tensor) or
  // "head" (one per (batch, head), AttentionShape::head_scales). The 16-bit types have none.
  std::vector<std::string> fp8_scales = {"tensor"};
  int tokens = 0;             // > 0: batch = tokens / N for each N (the FlashAttention papers' grid)
  bool large_logits = false;  // Q×5, K×3
  // Part VI (common/problem.hpp): 0 / empty = off.
  std::vector<int> kv_heads;        // GQA: K/V heads, one problem per value (0 = as many as H)
  std::vector<int> kv_seqlens;      // decode: keys per sequence, one problem per value (N = queries)
  std::vector<int> page_sizes;      // paged K/V cache, one problem per value (0 = contiguous)
  // Variable-length batches, one problem per value: "1,17,4097" or "random:COUNT:MAX[:SEED]" (the
  // query lengths), or "dense" for the dense problems of --b and --n in the same run.
  std::vector<std::string> varlen;

  std::vector<int> gemm = {4096, 4096, 4096};
  std::int64_t count = std::int64_t(1) << 26;

  RunOptions run;
  std::string json_path;
  bool resources = true;
  bool peers = true;  // include the library rows (steps numbered kPeerStepsFrom and up) of each track
};

struct ParseOutcome {
  std::optional<CliOptions> options;  // empty: print `message` and exit with `exit_code`
  int exit_code = 0;
  std::string message;
};

// `only_step` >= 0 for a step's own executable (its steps and track options are fixed).
ParseOutcome parse_cli(int argc, const char* const* argv, int only_step);

// The lengths of a variable-length batch: "1,17,4097" as given, or "random:COUNT:MAX[:SEED]",
// COUNT lengths drawn uniformly from 1..MAX with the seed (default 1). Nothing for a bad spec.
std::optional<std::vector<int>> parse_varlen(const std::string& spec);

// The attention shapes the options ask for, in run order.
std::vector<AttentionShape> attention_shapes(const CliOptions& options);

// The registered variants the options select, in ladder order; throws UsageError for an unknown
// step, track or variant.
std::vector<VariantRef> select_variants(const Registry& registry, const CliOptions& options,
                                        int only_step);

// `--list`: steps, variants and constraints. Touches no CUDA.
std::string list_steps(const Registry& registry, int only_step);

}  // namespace ladder
