#include "common/registry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <utility>

namespace ladder {

namespace {
std::optional<std::string> refuse_arch(int min_sm, int sm) {
  if (sm >= min_sm) return std::nullopt;
  return fmt::format("needs compute capability {}.{} or newer (this GPU is {}.{})", min_sm / 10,
                     min_sm % 10, sm / 10, sm % 10);
}

std::string dtype_names(const std::vector<DType>& types) {
  std::string out;
  for (DType t : types) out += (out.empty() ? "" : " and ") + std::string(dtype_name(t));
  return out;
}
}  // namespace

const char* feature_name(Feature f) {
  switch (f) {
    case Feature::Gqa: return "GQA (fewer K/V heads than Q heads)";
    case Feature::Decode: return "a different number of keys than queries (decode)";
    case Feature::Varlen: return "a variable-length batch (cu_seqlens)";
    case Feature::Paged: return "a paged K/V cache";
    case Feature::HeadScales: return "per-head fp8 descales";
  }
  return "?";
}

unsigned features_of(const AttentionShape& s) {
  return (s.gqa() ? unsigned(Feature::Gqa) : 0u) | (s.decode() ? unsigned(Feature::Decode) : 0u) |
         (s.varlen() ? unsigned(Feature::Varlen) : 0u) | (s.paged() ? unsigned(Feature::Paged) : 0u) |
         (s.head_scales ? unsigned(Feature::HeadScales) : 0u);
}

std::optional<std::string> Constraints::refuse(const AttentionShape& s, int sm) const {
  if (auto why = refuse_arch(min_sm, sm)) return why;
  for (Feature f : kAllFeatures)
    if ((features_of(s) & unsigned(f)) && !(features & unsigned(f)))
      return fmt::format("does not handle {}", feature_name(f));
  if (!head_dims.empty() &&
      std::find(head_dims.begin(), head_dims.end(), s.head_dim) == head_dims.end())
    return fmt::format("supports D in {{{}}} only (asked for D={})", fmt::join(head_dims, ", "),
                       s.head_dim);
  if (std::find(dtypes.begin(), dtypes.end(), s.dtype) == dtypes.end())
    return fmt::format("runs {} only (asked for {})", dtype_names(dtypes), dtype_name(s.dtype));
  if (const int n = std::max(s.seqlen, s.max_kv_len()); max_seqlen > 0 && n > max_seqlen)
    return fmt::format("supports N up to {} only (asked for N={})", max_seqlen, n);
  if (const std::int64_t bh = std::int64_t(s.batch) * s.heads; max_batch_heads > 0 && bh > max_batch_heads)
    return fmt::format("its grid puts the (batch, head) pairs on grid.y or grid.z, at most {} of them "
                       "(asked for B·H = {}); the persistent steps and the cuDNN peer run it",
                       max_batch_heads, bh);
  if (attention_refusal) return attention_refusal(s);
  return std::nullopt;
}

std::optional<std::string> Constraints::duplicate_of(const AttentionShape& s) const {
  if (auto it = same_kernel_at.find(s.head_dim); it != same_kernel_at.end()) return it->second;
  if (same_kernel_when) return same_kernel_when(s);
  return std::nullopt;
}

std::optional<std::string> Constraints::refuse(const MatmulShape&, int sm) const {
  return refuse_arch(min_sm, sm);
}

std::optional<std::string> Constraints::refuse(const ReductionShape&, int sm) const {
  return refuse_arch(min_sm, sm);
}

std::string Constraints::describe() const {
  std::string out = fmt::format("sm_{}+", min_sm);
  if (!head_dims.empty()) out += fmt::format(", D in {{{}}}", fmt::join(head_dims, ","));
  if (max_seqlen > 0) out += fmt::format(", N <= {}", max_seqlen);
  if (max_batch_heads > 0) out += fmt::format(", B·H <= {}", max_batch_heads);
  if (dtypes.size() != 1 || dtypes[0] != DType::F16) out += ", " + dtype_names(dtypes);
  for (auto [f, name] : {std::pair{Feature::Gqa, "GQA"}, {Feature::Decode, "decode"},
                         {Feature::Varlen, "varlen"}, {Feature::Paged, "paged"},
                         {Feature::HeadScales, "fp8 per-head scales"}})
    if (features & unsigned(f)) out += std::string(", ") + name;
  return out;
}

std::vector<KernelInfo> Variant::launched_kernels(const AttentionShape& shape) const {
  std::vector<KernelInfo> out;
  if (!kernels) return out;
  for (auto& k : kernels(shape.head_dim))
    if (k.launched_for(shape)) out.push_back(std::move(k));
  return out;
}

Step& Step::main_is(const std::string& variant_name) {
  for (std::size_t i = 0; i < variants.size(); ++i)
    if (variants[i].name == variant_name) {
      main_variant = int(i);
      return *this;
    }
  throw std::logic_error(fmt::format("step {}: main_is(\"{}\") names no variant", number, variant_name));
}

bool Step::peers_only() const {
  return std::all_of(variants.begin(), variants.end(), [](const Variant& v) { return v.peer; });
}

namespace {
Step make_step(Kind kind, const char* track, int number, std::string name, std::string title,
               std::string improves_on) {
  Step s;
  s.number = number;
  s.chapter = fmt::format("docs/{:02}_{}.md", number, name);
  s.name = std::move(name);
  s.title = std::move(title);
  s.track = track;
  s.kind = kind;
  s.improves_on = std::move(improves_on);
  return s;
}
}  // namespace

Step attention_step(int number, std::string name, std::string title, std::string improves_on) {
  return make_step(Kind::Attention, "attention", number, std::move(name), std::move(title),
                   std::move(improves_on));
}
Step matmul_step(int number, std::string name, std::string title, std::string improves_on) {
  return make_step(Kind::Matmul, "matmul", number, std::move(name), std::move(title),
                   std::move(improves_on));
}
Step reduction_step(int number, std::string name, std::string title, std::string improves_on) {
  return make_step(Kind::Reduction, "reduction", number, std::move(name), std::move(title),
                   std::move(improves_on));
}

Step backward_step(int number, std::string name, std::string title, std::string improves_on) {
  return make_step(Kind::Backward, "backward", number, std::move(name), std::move(title),
                   std::move(improves_on));
}

Registry& Registry::instance() {
  static Registry registry;  // constructed on first use, so static registrars can call it
  return registry;
}

void Registry::add(Step step) {
  if (find(step.number))
    throw std::logic_error(fmt::format("two steps registered as number {}", step.number));
  if (step.variants.empty())
    throw std::logic_error(fmt::format("step {} registers no variants", step.number));
  if ((step.number >= kPeerStepsFrom) != step.peers_only())
    throw std::logic_error(fmt::format(
        "step {}: steps numbered {} and up hold library rows only, and only they do", step.number,
        kPeerStepsFrom));
  if (step.main_variant < 0 || step.main_variant >= int(step.variants.size()))
    throw std::logic_error(fmt::format("step {}: main variant {} out of range", step.number, step.main_variant));
  if (!step.variants[std::size_t(step.main_variant)].test_only.empty())
    throw std::logic_error(fmt::format("step {}: the main variant is a test, not a rung", step.number));
  auto pos = std::lower_bound(steps_.begin(), steps_.end(), step.number,
                              [](const Step& s, int n) { return s.number < n; });
  steps_.insert(pos, std::move(step));
}

const Step* Registry::find(int number) const {
  for (const auto& s : steps_)
    if (s.number == number) return &s;
  return nullptr;
}

const Variant* Registry::find_variant(const std::string& id) const {
  const auto slash = id.find('/');
  if (slash == std::string::npos) return nullptr;
  const Step* step = find(std::atoi(id.substr(0, slash).c_str()));
  if (!step) return nullptr;
  for (const auto& v : step->variants)
    if (v.name == id.substr(slash + 1)) return &v;
  return nullptr;
}

std::string variant_id(const Step& step, const Variant& variant) {
  return fmt::format("{:02}/{}", step.number, variant.name);
}

std::string baseline_id(const Step& step, std::size_t i) {
  const Variant& v = step.variants.at(i);
  if (!v.improves_on.empty()) return v.improves_on;
  // Peers are compared with the step's main variant; lessons with the one before them.
  if (v.peer) return variant_id(step, step.variants.at(step.main_variant));
  for (std::size_t j = i; j-- > 0;)
    if (!step.variants[j].peer) return variant_id(step, step.variants[j]);
  return step.improves_on;
}

namespace {
Variant make_variant(std::string name, std::string description, Launch launch) {
  Variant v;
  v.name = std::move(name);
  v.description = std::move(description);
  v.launch = std::move(launch);
  return v;
}
}  // namespace

Variant attention_variant(std::string name, std::string description, AttentionLaunch launch) {
  return make_variant(std::move(name), std::move(description), Launch(std::move(launch)));
}
Variant matmul_variant(std::string name, std::string description, MatmulLaunch launch) {
  return make_variant(std::move(name), std::move(description), Launch(std::move(launch)));
}
Variant reduction_variant(std::string name, std::string description, ReductionLaunch launch) {
  return make_variant(std::move(name), std::move(description), Launch(std::move(launch)));
}
Variant backward_variant(std::string name, std::string description, BackwardLaunch launch) {
  return make_variant(std::move(name), std::move(description), Launch(std::move(launch)));
}

}  // namespace ladder
