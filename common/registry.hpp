// The step registry: how a step tells the harness what it is and how to launch it.
//
// A step file ends with a registration block that reads as a table:
//
//   LADDER_REGISTER_STEP(
//       ladder::attention_step(5, "fa_v2_1", "FlashAttention v2.1: tensor cores", "04/br128")
//           .add(ladder::attention_variant("bc32", "Bc=32 ...", launch<32>)
//                    .needs_sm(80)
//                    .for_head_dims({64, 128})
//                    .with_kernels([](int d) { return std::vector{ladder::kernel("k", k<..>, 128, smem)}; }))
//           .add(...)
//           .main_is("bc64"));
//
// Registration is static (it runs before main) and touches no CUDA, so `ladder --list` works on a
// machine without a GPU. Steps are compiled as CMake OBJECT libraries, which the linker never
// drops, so every registration that is linked in runs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "common/problem.hpp"

namespace ladder {

// ---- What a variant's launch function receives ------------------------------------------------
// Everything is already allocated by the harness; a launch function only configures and launches
// kernels on `stream` (and checks each launch with CUDA_CHECK_LAUNCH).

// The DType of a kernel's element type, for as<Element>() below.
template <class Element>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<Element, __half> || std::is_same_v<Element, __nv_bfloat16>,
                "attention elements are __half (fp16) or __nv_bfloat16 (bf16)");
  return std::is_same_v<Element, __half> ? DType::F16 : DType::BF16;
}

// Q, K, V and O of an fp8 problem (shape.dtype == DType::E4M3, Part VIII), as AttentionArgs::as_fp8()
// gives them: e4m3 bytes in, bf16 out, in the dense layouts (common/problem.hpp).
struct Fp8Tensors {
  const std::uint8_t* q;  // [B, H, N, D] e4m3, one byte an element
  const std::uint8_t* k;  // [B, Hkv, N, D]
  const std::uint8_t* v;
  __nv_bfloat16* o;       // [B, H, N, D] bf16, poisoned with NaN before the launch
};

struct AttentionArgs {
  AttentionShape shape;
  float softmax_scale;  // 1 / sqrt(D)
  // Q, K, V and O in the problem's element type, shape.dtype. The fields are typed fp16, the
  // ladder's type, so the fp16-only steps read them as they are; a kernel that also runs bf16
  // takes them through as<Element>(), which checks the type, and an fp8 kernel through as_fp8().
  // Only variants that declare bf16 or fp8 (Variant::for_dtypes) are ever given such a problem.
  const __half* q;      // [B, H, N, D]
  const __half* k;
  const __half* v;
  __half* o;           // [B, H, N, D], poisoned with NaN before the launch
  float* lse;          // [B, H, N]; written only by variants with writes_lse
  void* workspace;     // workspace_bytes(shape) bytes, or null; zeroed before its first launch on
                       //   a problem, never between launches: a kernel that keeps counters there
                       //   (step 41) leaves them at zero; nothing else may assume the contents
  // The device the launch runs on, filled by whoever launches (the runner, the C interface), so
  // that a kernel sized to the GPU (a persistent grid, an L2-sized schedule) need not ask it.
  int sm_count = 0;            // streaming multiprocessors
  std::size_t l2_bytes = 0;    // L2 cache size
  // Part VI (common/problem.hpp gives the layouts), device pointers, null where the property is off:
  const int* cu_seqlens_q = nullptr;  // varlen: [B + 1], sequence b's queries are rows
  const int* cu_seqlens_k = nullptr;  //   cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1; keys alike
  const int* block_table = nullptr;   // paged: [B, shape.pages_per_seq()] page indices into k, v
  // fp8 (Part VIII): the power-of-two factors that turn each tensor's e4m3 bytes back into its
  // values, value = from_e4m3(byte) · descale (common/dtype.hpp). A kernel scales its fp32 scores
  // by q_descale · k_descale (with softmax_scale) and O by v_descale. 1 for fp16 and bf16.
  float q_descale = 1.f, k_descale = 1.f, v_descale = 1.f;
  // fp8 with per-head descales (shape.head_scales, Feature::HeadScales; FlashAttention-3's
  // descales of shape (batch, heads)): device arrays of powers of two, null unless
  // shape.head_scales.
  //   q_head_descale  B·H floats,   Q head (b, h)    at b·H + h     (H = shape.heads)
  //   k_head_descale  B·Hkv floats, K head (b, hk)   at b·Hkv + hk  (Hkv = shape.hkv())
  //   v_head_descale  B·Hkv floats, V head (b, hk)   at b·Hkv + hk
  // value = from_e4m3(byte) · (its head's descale). When they are set, q_descale, k_descale and
  // v_descale are 1, so a kernel that folds the scalars and the per-head values alike multiplies
  // by each factor exactly once: query row (b, h) scores by q_descale · k_descale ·
  // q_head_descale[b·H + h] · k_head_descale[b·Hkv + h / group], O by v_descale ·
  // v_head_descale[b·Hkv + h / group]. They live as long as q, k and v.
  const float* q_head_descale = nullptr;
  const float* k_head_descale = nullptr;
  const float* v_head_descale = nullptr;

  template <class Element>
  struct Tensors {
    const Element* q;
    const Element* k;
    const Element* v;
    Element* o;
  };
  // Q, K, V, O as `Element`; throws std::logic_error if that is not the problem's type (a
  // launch function that dispatched on shape.dtype wrongly; an fp8 problem reads as_fp8()).
  template <class Element>
  Tensors<Element> as() const {
    if (dtype_of<Element>() != shape.dtype)
      throw std::logic_error(std::string("a ") + dtype_name(shape.dtype) +
                             " problem's tensors read as " + dtype_name(dtype_of<Element>()) +
                             (shape.dtype == DType::E4M3 ? " (an fp8 problem's are read with as_fp8())" : ""));
    return {reinterpret_cast<const Element*>(q), reinterpret_cast<const Element*>(k),
            reinterpret_cast<const Element*>(v), reinterpret_cast<Element*>(o)};
  }
  // An fp8 problem's e4m3 Q, K, V and bf16 O; throws std::logic_error for any other problem.
  using Fp8Tensors = ladder::Fp8Tensors;
  Fp8Tensors as_fp8() const {
    if (shape.dtype != DType::E4M3)
      throw std::logic_error(std::string("a ") + dtype_name(shape.dtype) + " problem's tensors read as fp8");
    return {reinterpret_cast<const std::uint8_t*>(q), reinterpret_cast<const std::uint8_t*>(k),
            reinterpret_cast<const std::uint8_t*>(v), reinterpret_cast<__nv_bfloat16*>(o)};
  }
};

struct MatmulArgs {
  MatmulShape shape;
  const float* a;  // [M, K]
  const float* b;  // [K, N]
  float* c;        // [M, N]
  void* workspace;
};

struct ReductionArgs {
  ReductionShape shape;
  const float* x;  // [n]
  float* out;      // one value
  void* workspace;
};

// The backward pass (Part V): from Q, K, V, the forward's O and log-sum-exp and the upstream
// gradient dO, the gradients dQ, dK, dV of L with dO = ∂L/∂O. Shapes as AttentionArgs; the
// tensors travel as fp16 pointers whatever the type, read through as<Element>().
//
// Layouts (common/problem.hpp's offsets, the forward's): dense (GQA when shape.kv_heads < heads)
//   Q, O, dO, dQ [B, H, N, D];   K, V, dK, dV [B, Hkv, N, D];   LSE [B, H, N];
// packed variable-length (shape.q_lens; variants that serve Feature::Varlen)
//   Q, O, dO, dQ [total_q, H, D]; K, V, dK, dV [total_k, Hkv, D]; LSE [H, total_q]
//   (shape.lse_index(b, h, i), as the forward writes it).
// A backward problem is self-attention: every sequence has as many keys as queries (causal: key j
// is seen by queries i >= j of its sequence); decode shapes and paged caches have no backward
// (validate_backward). dK and dV of key head hk are sums over its group of query heads
// (h / shape.group() == hk).
struct BackwardArgs {
  AttentionShape shape;
  float softmax_scale;  // 1 / sqrt(D)
  const __half* q;      // as the layouts above
  const __half* k;
  const __half* v;
  const __half* o;      // the forward's output (rounded to the element type, as a forward stores it)
  const __half* d_o;    // ∂L/∂O
  const float* lse;     // the forward's log-sum-exp (natural log, of the scaled logits)
  __half* dq;           // each poisoned with NaN before the launch: every element
  __half* dk;           //   must be written
  __half* dv;
  void* workspace;      // workspace_bytes(shape) bytes, or null; not cleared (a launch zeroes
                        //   what it accumulates into, inside its own timed work)
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  // Varlen (device pointers, [B + 1], as AttentionArgs'), null when dense: sequence b's queries
  // are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1, its keys alike (the same lengths).
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;

  template <class Element>
  struct Tensors {
    const Element* q;
    const Element* k;
    const Element* v;
    const Element* o;
    const Element* d_o;
    Element* dq;
    Element* dk;
    Element* dv;
  };
  template <class Element>
  Tensors<Element> as() const {
    if (dtype_of<Element>() != shape.dtype)
      throw std::logic_error(std::string("a ") + dtype_name(shape.dtype) +
                             " problem's tensors read as " + dtype_name(dtype_of<Element>()));
    auto in = [](const __half* p) { return reinterpret_cast<const Element*>(p); };
    auto out = [](__half* p) { return reinterpret_cast<Element*>(p); };
    return {in(q), in(k), in(v), in(o), in(d_o), out(dq), out(dk), out(dv)};
  }
};

using AttentionLaunch = std::function<void(const AttentionArgs&, cudaStream_t)>;
using MatmulLaunch = std::function<void(const MatmulArgs&, cudaStream_t)>;
using ReductionLaunch = std::function<void(const ReductionArgs&, cudaStream_t)>;
using BackwardLaunch = std::function<void(const BackwardArgs&, cudaStream_t)>;
using Launch = std::variant<AttentionLaunch, MatmulLaunch, ReductionLaunch, BackwardLaunch>;

// Thrown by a launch function when a library peer declines a problem it was asked to run (cuDNN
// has no engine for it): the row is reported as skipped, with the library's words, not as failed.
class LibraryRefusal : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---- What a variant can run ---------------------------------------------------------------------
// Part VI's properties of an attention problem (common/problem.hpp), and Part VIII's per-head fp8
// descales. A variant runs a problem only if it declares every property the problem has
// (Variant::serves); Parts I-V declare none.
enum class Feature : unsigned {
  Gqa = 1,          // fewer K/V heads than Q heads
  Decode = 2,       // a different number of keys than queries (causal aligned to the end)
  Varlen = 4,       // a packed variable-length batch, cu_seqlens
  Paged = 8,        // a paged K/V cache, block table
  HeadScales = 16,  // fp8: one descale per (batch, head) (AttentionArgs::q_head_descale, ...)
};
// Every Feature, in the order refusals name them.
inline constexpr Feature kAllFeatures[] = {Feature::Gqa, Feature::Decode, Feature::Varlen,
                                           Feature::Paged, Feature::HeadScales};
const char* feature_name(Feature f);
// The properties a problem has, as a mask of Feature bits.
unsigned features_of(const AttentionShape& s);

struct Constraints {
  int min_sm = 75;  // compute capability ×10 (75 = Turing, CUDA 13's oldest; 80 = Ampere; 90 = Hopper)
  std::vector<int> head_dims;     // attention: supported D; empty = any multiple of 8
  std::int64_t max_seqlen = 0;    // attention: 0 = no limit
  // attention: the most (batch, head) pairs one launch takes; 0 = as many as validate() allows. A
  // grid that puts B·H on grid.y or grid.z takes at most kMaxGridYZ (Variant::batch_heads_on_grid_yz);
  // one that puts it on grid.x, or walks a tile list (the persistent steps), has no such limit.
  std::int64_t max_batch_heads = 0;
  std::vector<DType> dtypes{DType::F16};  // attention: element types it runs (E4M3: AttentionArgs::as_fp8)
  unsigned features = 0;          // attention: the Part VI properties it handles (Feature bits)
  // attention: any other reason a variant cannot run a shape ("no causal mask"); nothing = can.
  std::function<std::optional<std::string>(const AttentionShape&)> attention_refusal;
  // attention: head dimensions at which this variant launches exactly the kernel of another
  // variant (its id): the row would measure the same code twice, so it is left out there.
  std::map<int, std::string> same_kernel_at;
  // attention: the same for any other property of the shape (a variant that changes only the causal
  // schedule launches another's kernel without a mask): that variant's id, or nothing.
  std::function<std::optional<std::string>(const AttentionShape&)> same_kernel_when;
  // The variant whose kernel this one launches for `s` (by either rule), or nothing.
  std::optional<std::string> duplicate_of(const AttentionShape& s) const;

  // A reason the variant cannot run this problem on a GPU of compute capability `sm`, or nothing.
  std::optional<std::string> refuse(const AttentionShape& s, int sm) const;
  std::optional<std::string> refuse(const MatmulShape& s, int sm) const;
  std::optional<std::string> refuse(const ReductionShape& s, int sm) const;
  std::string describe() const;
};

// The largest grid.y or grid.z of a launch (CUDA's limit; grid.x takes 2^31 - 1).
inline constexpr std::int64_t kMaxGridYZ = 65535;

// One problem of any kind, for the hooks that are set per kind (workspace, notes). A backward
// problem is its AttentionShape: the constraints, workspace and kernel hooks of attention apply.
using Problem = std::variant<AttentionShape, MatmulShape, ReductionShape>;

// Bytes of workspace a variant needs for a problem (the naive step's N×N score matrix, FA v1's
// running statistics). The harness allocates it and counts it before allocating anything.
using WorkspaceFn = std::function<std::size_t(const Problem&)>;

// The kernels a variant launches for a given head dimension (0 outside attention), so the harness
// can report registers, spills, shared memory and blocks per SM without running anything. A
// problem's resource table lists only the kernels that problem launches (launched_kernels below):
// those of its element type and of its mask.
enum class MaskUse { Both, NonCausal, Causal };  // the attention problems that launch a kernel
struct KernelInfo {
  std::string name;
  const void* func;        // the __global__ function
  int threads;             // per block
  std::size_t dynamic_smem;  // bytes of dynamic shared memory per block
  DType dtype = DType::F16;  // the element type it computes in
  MaskUse masks = MaskUse::Both;  // Both: the mask is a run-time argument (or the kernel has none)

  // A kernel instantiated for one mask (kernel<Tile, kCausal>): launched only when the problem's
  // causal flag equals `causal`. Chains: kernel("k causal", k<T, true>, 128, smem).when_causal(true).
  KernelInfo& when_causal(bool causal) {
    masks = causal ? MaskUse::Causal : MaskUse::NonCausal;
    return *this;
  }
  // Whether an attention problem of this mask and element type launches the kernel.
  bool launched_for(const AttentionShape& s) const {
    return s.dtype == dtype && (masks == MaskUse::Both || (masks == MaskUse::Causal) == s.causal);
  }
};
using KernelsFn = std::function<std::vector<KernelInfo>(int head_dim)>;

// kernel("name", my_kernel<Tile, true>, threads, smem): any __global__ function, no casts.
template <class... Args>
KernelInfo kernel(std::string name, void (*func)(Args...), int threads,
                  std::size_t dynamic_smem = 0) {
  return {std::move(name), reinterpret_cast<const void*>(func), threads, dynamic_smem};
}

struct Variant {
  std::string name;         // short, unique within the step: "bc32"
  std::string description;  // one line for --list
  Launch launch;
  Constraints constraints;
  WorkspaceFn workspace;      // may be empty: no workspace
  KernelsFn kernels;          // may be empty for peers (library code)
  bool deterministic = true;  // false: reruns may differ in the last bits (float atomics)
  bool writes_lse = false;    // attention: also writes the log-sum-exp of each row
  bool peer = false;          // a library the ladder compares against (cuBLAS, CUB), not a lesson
  // fp8: the key block over which the kernel rounds P against its running max, which its rows'
  // low-precision reference follows (common/reference.cpp; kE4M3KeyBlock unless declared).
  int fp8_key_block = kE4M3KeyBlock;
  // Non-empty: an experiment that trades accuracy on purpose (fp16 accumulators, Part VI): its
  // rows report the error and the pass rule's verdict, but a miss is the measurement, not a bug;
  // it must still write every element, finite, within kApproximateSlack (common/compare.hpp)
  // times the tolerance.
  std::string approximate;
  // Non-empty: a test of the step, not a rung (a stress variant, say), and why. It is never in the
  // ladder's table, its timing or --list's rows unless named (--variant 25/late_consumers); the
  // GPU tests run it like any other variant.
  std::string test_only;
  std::string improves_on;    // "05/bc32"; empty = the previous variant in the step, or the step's
  // Attention, may be empty: work a launch leaves for after it that is not the variant's to be
  // timed (a peer widening its e4m3 output into the harness's bf16 O). The runner calls it after
  // every launch whose output it reads, before the read, and never inside a timed repetition.
  AttentionLaunch after_launch_untimed;

  // The registration block's setters; each returns the variant so they chain.
  Variant& needs_sm(int sm) { constraints.min_sm = sm; return *this; }
  Variant& for_head_dims(std::initializer_list<int> dims) { constraints.head_dims = dims; return *this; }
  Variant& for_dtypes(std::initializer_list<DType> types) { constraints.dtypes = types; return *this; }
  // The Part VI properties this variant handles: .serves({Feature::Gqa, Feature::Decode}).
  Variant& serves(std::initializer_list<Feature> fs) {
    for (Feature f : fs) constraints.features |= unsigned(f);
    return *this;
  }
  Variant& up_to_seqlen(std::int64_t n) { constraints.max_seqlen = n; return *this; }
  // The launch puts the B·H (batch, head) pairs on grid.y or grid.z: at most kMaxGridYZ of them.
  Variant& batch_heads_on_grid_yz() { constraints.max_batch_heads = kMaxGridYZ; return *this; }
  Variant& refuse_if(std::function<std::optional<std::string>(const AttentionShape&)> why) {
    constraints.attention_refusal = std::move(why);
    return *this;
  }
  // At head dimension d this variant is the same kernel as variant `id` ("06/lse"): not listed.
  Variant& same_kernel_at(int d, std::string id) {
    constraints.same_kernel_at[d] = std::move(id);
    return *this;
  }
  Variant& same_kernel_when(std::function<std::optional<std::string>(const AttentionShape&)> fn) {
    constraints.same_kernel_when = std::move(fn);
    return *this;
  }
  Variant& untimed_after_launch(AttentionLaunch fn) { after_launch_untimed = std::move(fn); return *this; }
  Variant& with_kernels(KernelsFn fn) { kernels = std::move(fn); return *this; }
  Variant& with_kernels(std::vector<KernelInfo> list) {  // the same kernels for every problem
    kernels = [list = std::move(list)](int) { return list; };
    return *this;
  }
  Variant& with_workspace(std::function<std::size_t(const AttentionShape&)> fn) { return set_workspace(std::move(fn)); }
  Variant& with_workspace(std::function<std::size_t(const MatmulShape&)> fn) { return set_workspace(std::move(fn)); }
  Variant& with_workspace(std::function<std::size_t(const ReductionShape&)> fn) { return set_workspace(std::move(fn)); }
  Variant& with_lse() { writes_lse = true; return *this; }
  Variant& nondeterministic() { deterministic = false; return *this; }
  Variant& as_peer() { peer = true; return *this; }
  Variant& rounds_p_in_blocks_of(int keys) { fp8_key_block = keys; return *this; }
  Variant& approximate_because(std::string why) { approximate = std::move(why); return *this; }
  Variant& test_only_because(std::string why) { test_only = std::move(why); return *this; }
  Variant& compared_with(std::string id) { improves_on = std::move(id); return *this; }

  std::size_t workspace_bytes(const Problem& p) const { return workspace ? workspace(p) : 0; }
  // The kernels an attention problem launches: of kernels(shape.head_dim), those of its element
  // type and its mask. Touches no GPU (the CPU tests check every step's declarations with it).
  std::vector<KernelInfo> launched_kernels(const AttentionShape& shape) const;

 private:
  template <class Shape>
  Variant& set_workspace(std::function<std::size_t(const Shape&)> fn) {
    workspace = [fn = std::move(fn)](const Problem& p) -> std::size_t {
      const Shape* s = std::get_if<Shape>(&p);
      return s ? fn(*s) : 0;
    };
    return *this;
  }
};

struct Step {
  int number = -1;
  std::string name;      // directory name without the number: "fa_v2_1"
  std::string title;     // "FlashAttention v2.1: tensor cores"
  std::string track;     // "attention", "matmul", "reduction", "backward"
  Kind kind = Kind::Attention;
  std::string improves_on;  // id of the variant this step improves on: "04/br128"; empty for none
  std::string chapter;      // docs/NN_name.md
  std::vector<Variant> variants;
  int main_variant = 0;  // index of the variant that represents the step (its best)
  // Extra lines printed under the step's table for a problem (a byte ledger, say); may be empty.
  std::function<std::vector<std::string>(const Problem&)> notes;

  // The registration block's setters.
  Step& add(Variant v) { variants.push_back(std::move(v)); return *this; }
  Step& main_is(const std::string& variant_name);  // throws std::logic_error for an unknown name
  template <class Shape>
  Step& with_notes(std::vector<std::string> (*fn)(const Shape&)) {
    notes = [fn](const Problem& p) {
      const Shape* s = std::get_if<Shape>(&p);
      return s ? fn(*s) : std::vector<std::string>{};
    };
    return *this;
  }
  // Peer steps (numbered kPeerStepsFrom and up) hold library rows only, and every run of their
  // track includes them.
  bool peers_only() const;
};
inline constexpr int kPeerStepsFrom = 90;

// A step of each track; the chapter is docs/NN_name.md.
Step attention_step(int number, std::string name, std::string title, std::string improves_on = "");
Step matmul_step(int number, std::string name, std::string title, std::string improves_on = "");
Step reduction_step(int number, std::string name, std::string title, std::string improves_on = "");
Step backward_step(int number, std::string name, std::string title, std::string improves_on = "");

// The registry: every step linked into the executable, sorted by number.
class Registry {
 public:
  static Registry& instance();
  void add(Step step);
  const std::vector<Step>& steps() const { return steps_; }
  const Step* find(int number) const;
  // The variant with id "06/x" (step number / variant name), or null.
  const Variant* find_variant(const std::string& id) const;

 private:
  std::vector<Step> steps_;
};

// "05/bc32"
std::string variant_id(const Step& step, const Variant& variant);
// The id this variant is compared against: its improves_on, else the previous variant in the
// step, else the step's improves_on. Empty for the first rung of a track.
std::string baseline_id(const Step& step, std::size_t variant_index);

struct StepRegistrar {
  explicit StepRegistrar(Step step) { Registry::instance().add(std::move(step)); }
};

// Helpers so a registration block reads as a table.
Variant attention_variant(std::string name, std::string description, AttentionLaunch launch);
Variant matmul_variant(std::string name, std::string description, MatmulLaunch launch);
Variant reduction_variant(std::string name, std::string description, ReductionLaunch launch);
Variant backward_variant(std::string name, std::string description, BackwardLaunch launch);

}  // namespace ladder

#define LADDER_CONCAT_INNER(a, b) a##b
#define LADDER_CONCAT(a, b) LADDER_CONCAT_INNER(a, b)
#define LADDER_REGISTER_STEP(step_expr) \
  static ::ladder::StepRegistrar LADDER_CONCAT(ladder_registrar_, __LINE__){step_expr}
