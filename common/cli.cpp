#include "common/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <random>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "common/exit_codes.hpp"
#include <sstream>

namespace ladder {
namespace {

// "3-6,9" -> {3, 4, 5, 6, 9}. Single numbers must name registered steps (`named`); a range
// selects whichever registered steps fall inside it, so "4-99" means "4 and everything after".
struct StepList {
  std::set<int> steps;
  std::set<int> named;
};

StepList parse_step_list(const std::string& text) {
  StepList list;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      const auto dash = part.find('-');
      if (dash == std::string::npos) {
        list.steps.insert(std::stoi(part));
        list.named.insert(std::stoi(part));
      } else {
        const int lo = std::stoi(part.substr(0, dash)), hi = std::stoi(part.substr(dash + 1));
        if (lo > hi || hi - lo > 1000) throw UsageError("");
        for (int s = lo; s <= hi; ++s) list.steps.insert(s);
      }
    } catch (const std::exception&) {
      throw UsageError(fmt::format("--steps: cannot read '{}' (use e.g. 3-6 or 0,3,5)", part));
    }
  }
  return list;
}

// Sizes must be positive whole numbers; say so plainly (CLI11's own range message is unreadable).
const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      try {
        std::size_t used = 0;
        if (std::stoll(text, &used) > 0 && used == text.size()) return "";
      } catch (const std::exception&) {
      }
      return "must be a positive whole number (got '" + text + "')";
    },
    "POSITIVE");

// Why `path` cannot be written as a file (its folder is missing or read-only, or it is a folder),
// or nothing. Creates nothing.
std::optional<std::string> unwritable_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return "is a folder; give a file name";
  const fs::path parent = fs::absolute(fs::path(path), ec).parent_path();
  if (!fs::is_directory(parent, ec)) return fmt::format("the folder {} does not exist", parent.string());
  if (access(parent.c_str(), W_OK) != 0) return fmt::format("the folder {} is not writable", parent.string());
  if (fs::exists(path, ec) && access(path.c_str(), W_OK) != 0) return "the file exists and is not writable";
  return std::nullopt;
}

// Why `dir` cannot be used as an output folder (it is a file, or it and its nearest existing
// parent cannot be written), or nothing. Creates nothing.
std::optional<std::string> unwritable_dir(const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(dir), ec);
  if (fs::exists(p, ec) && !fs::is_directory(p, ec)) return "is a file, not a folder";
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (access(p.c_str(), W_OK) != 0) return fmt::format("{} is not writable", p.string());
  return std::nullopt;
}

}  // namespace

ParseOutcome parse_cli(int argc, const char* const* argv, int only_step) {
  CliOptions o;
  const Step* step = only_step >= 0 ? Registry::instance().find(only_step) : nullptr;
  CLI::App app(step ? fmt::format("Step {:02}: {}", step->number, step->title)
                    : "The attention optimization ladder: runs the steps in order on one problem");
  app.add_flag("--list", o.list, "List the steps and their variants, then exit (needs no GPU)");
  if (only_step < 0) {
    app.add_option("--steps", o.steps, "Steps to run: 3-6, or 0,3,5 (default: all)");
    app.add_option("--track", o.track, "Only one track: attention, backward, matmul or reduction");
  }
  app.add_option("--variant", o.variants, "Only these variants (name like bc32, or id like 05/bc32)");

  auto* attention = "Attention problem";
  app.add_option("-b,--b,--batch", o.batch, "Batch size B")->check(kPositive)->group(attention);
  app.add_option("-H,--heads", o.heads, "Heads H")->check(kPositive)->group(attention);
  app.add_option("-n,--n,--seqlen", o.seqlens, "Sequence length(s) N, comma separated")
      ->delimiter(',')->check(kPositive)->group(attention);
  app.add_option("-d,--d,--dim", o.head_dims, "Head dimension(s) D, comma separated")
      ->delimiter(',')->check(kPositive)->group(attention);
  bool causal = false;
  app.add_flag("--causal", causal, "Causal mask (same as --mask causal)")->group(attention);
  app.add_option("--mask", o.mask, "none, causal or both")
      ->check(CLI::IsMember({"none", "causal", "both"}))->group(attention);
  app.add_option("--dtype", o.dtypes,
                 "Element type(s) of Q, K, V, O: fp16, bf16, fp8 or a list (fp16,bf16): only the "
                 "variants that support a type run it, the others are listed as skipped. fp8 "
                 "(e4m3, Part VIII): Q, K, V the bf16 inputs quantized (per tensor, or per head: "
                 "--fp8-scales), O in bf16; dense or GQA, forward only")
      ->delimiter(',')->check(CLI::IsMember({"fp16", "bf16", "fp8", "e4m3", "fp8_e4m3"}))->group(attention);
  app.add_option("--fp8-scales", o.fp8_scales,
                 "fp8's descales: tensor (one power of two for each of Q, K, V; the default), head "
                 "(one per (batch, head) of Q and per (batch, K/V head) of K and V, as "
                 "FlashAttention-3 takes them; only the variants that serve it run it), or "
                 "tensor,head for both. Applies to the fp8 types of --dtype only: --dtype bf16,fp8 "
                 "--fp8-scales tensor,head runs bf16, fp8 and fp8 per head")
      ->delimiter(',')->check(CLI::IsMember({"tensor", "head"}))->group(attention);
  app.add_option("--tokens", o.tokens, "Fix B·N: batch = tokens / N for each N (e.g. 16384)")
      ->check(kPositive)->group(attention);
  app.add_flag("--large-logits", o.large_logits, "Scale Q by 5 and K by 3 (stress the softmax)")
      ->group(attention);
  app.add_flag("--head-magnitudes", o.run.head_magnitudes,
               "Scale each head's Q, K and V by 2^(g mod 4 - 2), g = b·H + h (b·Hkv + hk for K, V; dense layouts: the GPU "
               "tests' per-head fp8 grid: a kernel that reads another head's descale fails)")
      ->group(attention);
  auto* serving = "Attention as models run it (Part VI)";
  app.add_option("--kv-heads", o.kv_heads,
                 "K/V heads Hkv, dividing H (GQA; 1 = MQA), comma separated; 0 = as many as H "
                 "(--kv-heads 0,8 times dense and GQA in one run)")
      ->delimiter(',')->check(CLI::NonNegativeNumber)->group(serving);
  app.add_option("--kv-n", o.kv_seqlens,
                 "Keys per sequence, comma separated (decode: --n is then the number of queries; "
                 "causal is aligned to the end)")
      ->delimiter(',')->check(kPositive)->group(serving);
  app.add_option("--page-size", o.page_sizes,
                 "A paged K/V cache with pages of this many rows, comma separated; 0 = contiguous "
                 "(--page-size 0,64 times both in one run)")
      ->delimiter(',')->check(CLI::NonNegativeNumber)->group(serving);
  app.add_option("--varlen", o.varlen,
                 "A packed variable-length batch: lengths 1,17,4097 (one per sequence; --b and --n "
                 "are then ignored) or random:COUNT:MAX[:SEED]; repeat the option for more batches, "
                 "and give 'dense' for the dense problems of --b and --n in the same run")
      ->group(serving);

  auto* other = "Matrix product and reduction problems";
  app.add_option("--gemm", o.gemm, "M,N,K of the fp32 matrix product")
      ->delimiter(',')->expected(3)->check(kPositive)->group(other);
  app.add_option("--count", o.count, "Number of fp32 values to sum")
      ->check(kPositive)->group(other);

  auto* run = "Measurement";
  app.add_option("--seed", o.run.seed, "Seed of the random inputs")->group(run);
  app.add_option("--warmup-ms", o.run.timing.warmup_ms, "Warm-up time per variant")->group(run);
  app.add_option("--min-reps", o.run.timing.min_reps, "Fewest timed repetitions")
      ->check(kPositive)->group(run);
  app.add_option("--max-reps", o.run.timing.max_reps, "Most timed repetitions")
      ->check(kPositive)->group(run);
  app.add_option("--target-ms", o.run.timing.target_ms,
                 "Per round: stop timing after this much kernel time")
      ->group(run);
  app.add_option("--rounds", o.run.timing.rounds,
                 "Timing rounds, interleaved across the variants (a speed-up must hold in each)")
      ->check(kPositive)->group(run);
  bool no_flush = false, no_time = false, no_check = false, no_resources = false, no_peers = false;
  app.add_flag("--no-flush", no_flush, "Do not flush the L2 between repetitions (--flush none)")->group(run);
  std::string flush = "read";
  app.add_option("--flush", flush,
                 "How the L2 is emptied before each repetition: read (a buffer of twice its size "
                 "read, leaving it clean; the default), write (that buffer written: the L2 is left "
                 "dirty, the rounds' method before 2026-12-02), none")
      ->check(CLI::IsMember({"read", "write", "none"}))
      ->group(run);
  bool no_gate = false;
  app.add_flag("--no-gate", no_gate,
               "Time without the launch gate: the host's set-up work inside a launch function "
               "(tensor-map encoding, cuDNN's execute) is then counted if it outlasts the flush")
      ->group(run);
  app.add_flag("--no-time", no_time, "Check only; do not time")->group(run);
  app.add_flag("--no-check", no_check, "Time only; skip the CPU reference")->group(run);
  app.add_option("--ref-rows", o.run.max_reference_rows, "Most rows checked against the fp64 reference")
      ->check(kPositive)->group(run);
  app.add_option("--grid-sms", o.run.grid_sms,
                 "Tell the launches the GPU has K SMs (1 up to its own count; default: all): a "
                 "persistent grid then has at most K CTAs, each walking many tiles of a small "
                 "problem, and a split-KV decode plans its splits for K SMs. For the sanitizer "
                 "(scripts/sanitize.sh): times measured with it are not the GPU's")
      ->check(kPositive)->group(run);
  app.add_flag("--no-resources", no_resources, "Do not print the kernels' resource table")->group(run);
  app.add_flag("--no-peers", no_peers, "Leave out the library rows (cuDNN, cuBLAS) of each track")->group(run);
  app.add_option("--json", o.json_path, "Write every result, with provenance, to this JSON file")->group(run);
  app.add_option("--save", o.run.save_dir, "Write inputs and outputs as .npy files under this folder")
      ->group(run);

  ParseOutcome outcome;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    outcome.message = app.help();
    return outcome;
  } catch (const CLI::ParseError& e) {
    outcome.exit_code = exit_code::kUsage;
    outcome.message = fmt::format("error: {}\nRun with --help for the options.", e.what());
    return outcome;
  }
  if (causal) o.mask = "causal";
  o.run.timing.flush = no_flush || flush == "none" ? L2Flush::none
                       : flush == "write"            ? L2Flush::write
                                                     : L2Flush::read;
  o.run.timing.gate = !no_gate;
  o.run.time = !no_time;
  o.run.check = !no_check;
  o.resources = !no_resources;
  o.peers = !no_peers;
  if (o.large_logits) {
    o.run.q_scale = 5.0f;
    o.run.k_scale = 3.0f;
  }
  if (o.run.timing.min_reps > o.run.timing.max_reps) {
    outcome.exit_code = exit_code::kUsage;
    outcome.message = "error: --min-reps must not exceed --max-reps";
    return outcome;
  }
  for (int n : o.seqlens)
    if (o.tokens > 0 && o.tokens % n != 0) {
      outcome.exit_code = exit_code::kUsage;
      outcome.message = fmt::format("error: --tokens {} is not a multiple of N={}", o.tokens, n);
      return outcome;
    }
  for (const std::string& spec : o.varlen)
    if (spec != "dense" && !parse_varlen(spec)) {
      outcome.exit_code = exit_code::kUsage;
      outcome.message = fmt::format(
          "error: --varlen {}: give positive lengths (1,17,4097), random:COUNT:MAX[:SEED] or dense", spec);
      return outcome;
    }
  // Per-head descales with no fp8 type would silently run nothing of what was asked for.
  const bool fp8_asked = std::any_of(o.dtypes.begin(), o.dtypes.end(), [](const std::string& name) {
    return parse_dtype(name) == DType::E4M3;
  });
  if (!fp8_asked && std::find(o.fp8_scales.begin(), o.fp8_scales.end(), "head") != o.fp8_scales.end()) {
    outcome.exit_code = exit_code::kUsage;
    outcome.message = "error: --fp8-scales head needs an fp8 type (--dtype fp8, or a list with fp8 in "
                      "it): fp16 and bf16 problems have no descales";
    return outcome;
  }
  if (!o.varlen.empty() && !o.kv_seqlens.empty()) {
    outcome.exit_code = exit_code::kUsage;
    outcome.message = "error: --varlen and --kv-n together are not supported (a varlen batch has "
                      "as many keys as queries per sequence)";
    return outcome;
  }
  // A varlen batch interleaves the heads ([total, H, D]): there is no contiguous block to scale.
  if (o.run.head_magnitudes &&
      std::any_of(o.varlen.begin(), o.varlen.end(), [](const std::string& spec) { return spec != "dense"; })) {
    outcome.exit_code = exit_code::kUsage;
    outcome.message = "error: --head-magnitudes takes the dense layouts only (--varlen dense, or no "
                      "--varlen): a variable-length batch interleaves its heads";
    return outcome;
  }
  // Output paths are checked before any GPU work: a typo must not cost a whole run.
  if (auto why = unwritable_file(o.json_path)) {
    outcome.exit_code = exit_code::kIo;
    outcome.message = fmt::format("error: --json {}: {}", o.json_path, *why);
    return outcome;
  }
  if (auto why = unwritable_dir(o.run.save_dir)) {
    outcome.exit_code = exit_code::kIo;
    outcome.message = fmt::format("error: --save {}: {}", o.run.save_dir, *why);
    return outcome;
  }
  outcome.options = o;
  return outcome;
}

std::optional<std::vector<int>> parse_varlen(const std::string& spec) {
  std::vector<int> lens;
  auto number = [](const std::string& text) -> std::optional<long long> {
    if (text.empty() || text.size() > 10 ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    return std::stoll(text);
  };
  auto split = [](const std::string& text, char sep) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (std::size_t at; (at = text.find(sep, start)) != std::string::npos; start = at + 1)
      parts.push_back(text.substr(start, at - start));
    parts.push_back(text.substr(start));
    return parts;
  };
  if (spec.rfind("random:", 0) == 0) {
    const auto parts = split(spec.substr(7), ':');
    if (parts.size() < 2 || parts.size() > 3) return std::nullopt;
    const auto count = number(parts[0]), max = number(parts[1]);
    const auto seed = parts.size() == 3 ? number(parts[2]) : std::optional<long long>(1);
    if (!count || !max || !seed || *count < 1 || *count > 65536 || *max < 1 || *max > (1 << 24))
      return std::nullopt;
    std::mt19937_64 rng{static_cast<std::uint64_t>(*seed)};
    std::uniform_int_distribution<int> pick(1, int(*max));
    for (long long i = 0; i < *count; ++i) lens.push_back(pick(rng));
    return lens;
  }
  for (const std::string& part : split(spec, ',')) {
    const auto n = number(part);
    if (!n || *n < 1 || *n > (1 << 24)) return std::nullopt;
    lens.push_back(int(*n));
  }
  return lens;
}

std::vector<AttentionShape> attention_shapes(const CliOptions& o) {
  std::vector<AttentionShape> shapes;
  std::vector<bool> masks;
  if (o.mask == "none" || o.mask == "both") masks.push_back(false);
  if (o.mask == "causal" || o.mask == "both") masks.push_back(true);
  // One entry per batch layout: the lengths of a varlen batch, or empty for the dense problems.
  std::vector<std::vector<int>> layouts;
  for (const std::string& spec : o.varlen) layouts.push_back(spec == "dense" ? std::vector<int>{} : *parse_varlen(spec));
  if (layouts.empty()) layouts.push_back({});
  const std::vector<int> kv_seqlens = o.kv_seqlens.empty() ? std::vector<int>{0} : o.kv_seqlens;
  const std::vector<int> pages = o.page_sizes.empty() ? std::vector<int>{0} : o.page_sizes;
  const std::vector<int> kv_heads = o.kv_heads.empty() ? std::vector<int>{0} : o.kv_heads;
  for (const std::string& name : o.dtypes) {
    const DType dtype = parse_dtype(name).value_or(DType::F16);  // the option admits known names only
    // The descale layouts of this type: fp8's, as --fp8-scales lists them (innermost below, so a
    // problem per tensor and the same problem per head are neighbours in the table); a 16-bit type
    // has no descales, so it is one problem whatever --fp8-scales says.
    std::vector<bool> head_scales;
    if (dtype == DType::E4M3)
      for (const std::string& scales : o.fp8_scales) head_scales.push_back(scales == "head");
    if (head_scales.empty()) head_scales.push_back(false);
    for (int d : o.head_dims)
      for (bool causal : masks)
        for (const auto& lens : layouts) {
          const std::vector<int> seqlens =
              lens.empty() ? o.seqlens : std::vector<int>{*std::max_element(lens.begin(), lens.end())};
          for (int n : seqlens)
            for (int kv_n : lens.empty() ? kv_seqlens : std::vector<int>{0})
              for (int hkv : kv_heads)
                for (int page : pages)
                  for (bool per_head : head_scales) {
                    AttentionShape s;
                    s.batch = !lens.empty() ? int(lens.size()) : o.tokens > 0 ? o.tokens / n : o.batch;
                    s.heads = o.heads;
                    s.seqlen = n;
                    s.head_dim = d;
                    s.causal = causal;
                    s.dtype = dtype;
                    s.kv_heads = hkv;
                    s.kv_seqlen = kv_n;
                    s.q_lens = lens;
                    s.page_size = page;
                    s.head_scales = per_head;
                    shapes.push_back(s);
                  }
        }
  }
  return shapes;
}

std::vector<VariantRef> select_variants(const Registry& registry, const CliOptions& o,
                                        int only_step) {
  std::set<int> wanted;
  if (only_step >= 0) {
    if (!registry.find(only_step))
      throw UsageError(fmt::format("step {} is not registered in this executable", only_step));
    wanted.insert(only_step);
  } else if (!o.steps.empty()) {
    const StepList list = parse_step_list(o.steps);
    wanted = list.steps;
    for (int s : list.named)
      if (!registry.find(s)) throw UsageError(fmt::format("there is no step {} (see --list)", s));
  }
  if (!o.track.empty() &&
      std::none_of(registry.steps().begin(), registry.steps().end(),
                   [&](const Step& s) { return s.track == o.track; }))
    throw UsageError(fmt::format("there is no track '{}' (see --list)", o.track));

  std::vector<VariantRef> out;
  std::set<std::string> matched;
  std::set<std::string> tracks;  // of the selected lessons: their peer steps come along
  for (const Step& step : registry.steps()) {
    if (step.peers_only()) {
      // Library rows: every run of a track that has a lesson selected includes them (they are
      // last in the registry, so the tracks are known by now), unless --no-peers.
      const bool asked = wanted.count(step.number) > 0;  // --steps 99 runs the peers alone
      // A --variant that names a peer row (99/cudnn_fp8) narrows the peers to the rows named.
      auto named = [&](std::size_t i) {
        const std::string id = variant_id(step, step.variants[i]);
        return std::find(o.variants.begin(), o.variants.end(), id) != o.variants.end();
      };
      bool any_named = false;
      for (std::size_t i = 0; i < step.variants.size(); ++i) any_named = any_named || named(i);
      if (asked || any_named || (o.peers && tracks.count(step.track)))
        for (std::size_t i = 0; i < step.variants.size(); ++i) {
          if (any_named && !named(i)) continue;
          if (any_named) matched.insert(variant_id(step, step.variants[i]));
          out.push_back({&step, i});
        }
      continue;
    }
    if (!wanted.empty() && !wanted.count(step.number)) continue;
    if (!o.track.empty() && step.track != o.track) continue;
    for (std::size_t i = 0; i < step.variants.size(); ++i) {
      const std::string id = variant_id(step, step.variants[i]);
      // A test-only variant (a stress test) runs only when named: never in the ladder's table.
      if (o.variants.empty() && !step.variants[i].test_only.empty()) continue;
      if (!o.variants.empty()) {
        auto hit = std::find_if(o.variants.begin(), o.variants.end(), [&](const std::string& v) {
          return v == id || v == step.variants[i].name;
        });
        if (hit == o.variants.end()) continue;
        matched.insert(*hit);
      }
      out.push_back({&step, i});
      tracks.insert(step.track);
    }
  }
  for (const auto& v : o.variants)
    if (!matched.count(v)) throw UsageError(fmt::format("no selected step has a variant '{}' (see --list)", v));
  if (out.empty()) throw UsageError("the selection matches no variant (see --list)");
  return out;
}

std::string list_steps(const Registry& registry, int only_step) {
  std::string out;
  for (const Step& step : registry.steps()) {
    if (only_step >= 0 && step.number != only_step) continue;
    out += fmt::format("{:02} {:<18} [{}] {}{}\n", step.number, step.name, step.track, step.title,
                       step.improves_on.empty() ? "" : fmt::format(" (improves on {})", step.improves_on));
    for (std::size_t i = 0; i < step.variants.size(); ++i) {
      const Variant& v = step.variants[i];
      if (!v.test_only.empty()) continue;  // listed apart, below the rungs
      out += fmt::format("     {:<22} {}{}{}  [{}]\n", variant_id(step, v), v.description,
                         v.peer ? " (peer)" : "", int(i) == step.main_variant && step.variants.size() > 1 ? " (main)" : "",
                         v.constraints.describe());
    }
    for (const Variant& v : step.variants)
      if (!v.test_only.empty())
        out += fmt::format("     (test only) {} runs only when named (--variant {}): {}. {}\n",
                           variant_id(step, v), variant_id(step, v), v.test_only, v.description);
  }
  return out;
}

}  // namespace ladder
