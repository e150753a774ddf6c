// cuDNN's fused attention as a peer row of the attention ladder: the same Q, K, V, the same
// poisoned O, the same fp64 check and the same timing as every lesson, in the same process.
//
// The peer registers itself as step 99 "peers" (track attention, every variant a peer) from
// cudnn_attention.cpp. When the build found cuDNN and the cuDNN frontend (common/peers/cudnn.cmake)
// its variants run cuDNN's SDPA graph:
//
//   99/cudnn      O only (what an inference call asks for; what PyTorch's cuDNN backend runs
//                 when no gradient is needed)
//   99/cudnn_lse  O and the log-sum-exp ("stats", natural log of the scaled logits), checked by the
//                 harness like any variant's LSE
//   99/cudnn_fp8  fp8 problems only (Part VIII): cuDNN's sdpa_fp8 graph, common/peers/cudnn_fp8.hpp
//
// Both serve Part VI's problems (common/problem.hpp) with cuDNN's own means: GQA as K/V tensors
// of Hkv heads, decode as the causal diagonal aligned to the bottom right, a variable-length batch
// as ragged offsets with a padding mask, a paged cache as the frontend's page tables. What cuDNN
// declines among them is a skipped row with cuDNN's words (LibraryRefusal), never a failed one.
//
// Otherwise it registers two variants, 99/cudnn (fp16, bf16) and 99/cudnn_fp8 (fp8), that every
// problem refuses with cudnn_not_built_message(): the table shows the row as skipped, saying how to
// enable it.
//
// Everything in this header is plain C++ (no cuDNN), so the CPU tests use it in every build.
#pragma once

#include <compare>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "common/problem.hpp"
#include "common/registry.hpp"

namespace ladder::peers {

// ---- What this build has ------------------------------------------------------------------------
struct CudnnBuildInfo {
  bool built = false;           // the cuDNN rows run
  std::string headers;          // "9.19.0": cudnn.h the peer was compiled with (empty if not built)
  std::string frontend;         // "1.32.0"
  std::string library_dir;      // where libcudnn was found at configure time
  std::string missing;          // why it was not built (empty if built)
};
CudnnBuildInfo cudnn_build_info();

// cudnnGetVersion() of the library actually loaded, "9.19.0", or nothing when not built. Touches no
// GPU; for the results' provenance.
std::optional<std::string> cudnn_runtime_version();

// The note of the row that stands in for cuDNN when it was not built: "cudnn: not built — <why>;
// <how to enable it>". Inline: both cuDNN peers (steps 98 and 99) say it.
inline std::string cudnn_not_built_message(std::string_view why) {
  return fmt::format(
      "cudnn: not built — {}. To enable it: scripts/install-deps.sh (it fetches the cuDNN frontend "
      "headers into .deps/), then configure and build again; or set CUDNN_ROOT to a cuDNN 9 "
      "(include/cudnn.h, lib/libcudnn.so.9) and CUDNN_FRONTEND_INCLUDE_DIR to the directory of "
      "cudnn_frontend.h; -DLADDER_WITH_CUDNN=ON makes a missing cuDNN a configure error",
      why);
}

// ---- The graph cache ----------------------------------------------------------------------------
// A built cuDNN graph is valid for exactly one problem: everything below is baked into it (dims,
// strides, mask, scale, whether it writes the stats) and it belongs to one device's handle. Pointers
// are not part of it: they are bound at each execution.
struct CudnnGraphKey {
  int device = 0;
  int batch = 0, heads = 0, seqlen = 0, head_dim = 0;
  bool causal = false;
  DType dtype = DType::F16;       // of Q, K, V and O
  bool stats = false;             // also writes the log-sum-exp
  std::uint32_t scale_bits = 0;   // the softmax scale's float bits (1/sqrt(D) in the harness)
  // Part VI, resolved (a dense problem has kv_heads == heads, kv_seqlen == seqlen, no lengths, no
  // pages). The lengths are in the key because the graph bakes in the longest of each, the pool's
  // page count and the total queries (the LSE's layout); a GQA, decode, varlen or paged problem
  // never reuses another's plan.
  int kv_heads = 0;               // K/V heads
  int kv_seqlen = 0;              // keys per sequence (dense); 0 for a variable-length batch
  std::vector<int> q_lens;        // varlen: queries of each sequence; empty = dense
  std::vector<int> kv_lens;       // varlen: keys of each sequence (resolved: never empty if q_lens isn't)
  int page_size = 0;              // paged: rows per page; 0 = contiguous K/V

  bool varlen() const { return !q_lens.empty(); }
  bool paged() const { return page_size > 0; }
  auto operator<=>(const CudnnGraphKey&) const = default;
};
CudnnGraphKey cudnn_graph_key(const AttentionShape& shape, float softmax_scale, bool stats, int device);
// "B=4 H=8 N=4096 D=64 causal fp16, scale 0.125, O and stats, device 0"; Part VI's properties that
// are on follow the mask and type: " Hkv=8", " Nkv=32768", " varlen(4 seqs, 10812 q, 10812 k)",
// " page=64".
std::string to_string(const CudnnGraphKey& key);

// cuDNN has no engine for a problem (or refuses one of its attributes) on this GPU with this
// cuDNN: a limit of the library, not a wrong answer. Thrown by the first launch for that problem
// (and by every later one). It is a std::runtime_error, so a harness that does not know it reports
// the row as failed; one that does can report it as skipped, with cuDNN's message as the reason.
using ladder::LibraryRefusal;  // common/registry.hpp: the harness reports it as a skip

// A map from a key to a value built at most once. Building a cuDNN graph takes tens to hundreds of
// milliseconds (heuristics, plan compilation), executing it microseconds of host time, so the
// build happens on the first launch for a problem (the harness's untimed check run) and every
// later launch only executes. A build that throws is remembered too: the same message is thrown
// again (the same exception object, so its type too) for that key without asking cuDNN a second
// time: a shape cuDNN refuses stays refused.
// Safe to use from several threads; builds are serialized.
template <class Key, class Value>
class BuildOnceCache {
 public:
  // The value for `key`, calling build() (which returns a std::unique_ptr<Value>) the first time.
  template <class Build>
  Value& get(const Key& key, Build&& build) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      Entry entry;
      ++builds_;
      try {
        std::unique_ptr<Value> value = build();
        if (!value) throw std::logic_error("BuildOnceCache: build() returned no value");
        entry = std::move(value);
      } catch (...) {
        entry = std::current_exception();
      }
      it = entries_.emplace(key, std::move(entry)).first;
    }
    if (auto* failed = std::get_if<std::exception_ptr>(&it->second)) std::rethrow_exception(*failed);
    return *std::get<std::unique_ptr<Value>>(it->second);
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }
  std::size_t builds() const {  // how many times build() was called
    std::lock_guard lock(mutex_);
    return builds_;
  }
  // Drops every value (and so, for graphs, their workspaces and plans).
  void clear() {
    std::lock_guard lock(mutex_);
    entries_.clear();
  }

 private:
  using Entry = std::variant<std::unique_ptr<Value>, std::exception_ptr>;
  mutable std::mutex mutex_;
  std::map<Key, Entry> entries_;
  std::size_t builds_ = 0;
};

}  // namespace ladder::peers
