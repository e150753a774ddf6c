// cuDNN's fused attention through the cuDNN frontend's graph API, registered as the attention
// track's peer step (99 "peers"). What the rows are and how they are keyed: cudnn_attention.hpp.
//
// One launch of a variant is:
//   first launch for a problem:  build the SDPA graph (heuristics, plan compilation, workspace),
//                                cache it under its key, then execute it
//   every later launch:          look the graph up, set the stream, execute
// A variable-length batch adds a small kernel before execute() (cu_seqlens to cuDNN's lengths and
// ragged offsets) and, with the LSE, one after it (token-major to the harness's head-major LSE):
// both are GPU work a caller of cuDNN 9.19 pays, so both are timed (cudnn_varlen.cu).
// The harness's first launch of a variant is its untimed check run, and its timing loop warms up
// before the first timed repetition, so no build is ever inside a timed repetition.
#include "common/peers/cudnn_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <initializer_list>
#include <unordered_map>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "common/peers/cudnn_fp8.hpp"  // 99/cudnn_fp8, the fp8 row (with cuDNN and without)
#include "common/registry.hpp"

#ifdef LADDER_HAVE_CUDNN
#include "common/peers/cudnn_common.hpp"  // checks, versions, the per-device handles
#include "common/peers/cudnn_varlen.hpp"  // the varlen glue kernels
#endif

namespace ladder::peers {

namespace {
// Part VI's properties, all of which cuDNN's SDPA graph takes (what cuDNN then declines for a
// given shape is its refusal, reported as a skipped row).
constexpr std::initializer_list<Feature> kPartSix = {Feature::Gqa, Feature::Decode, Feature::Varlen,
                                                      Feature::Paged};
}  // namespace

CudnnGraphKey cudnn_graph_key(const AttentionShape& shape, float softmax_scale, bool stats,
                              int device) {
  CudnnGraphKey key;
  key.device = device;
  key.batch = shape.batch;
  key.heads = shape.heads;
  key.seqlen = shape.seqlen;
  key.head_dim = shape.head_dim;
  key.causal = shape.causal;
  key.dtype = shape.dtype;
  key.stats = stats;
  key.scale_bits = std::bit_cast<std::uint32_t>(softmax_scale);
  key.kv_heads = shape.hkv();
  key.kv_seqlen = shape.varlen() ? 0 : shape.kv_len(0);
  if (shape.varlen()) {
    key.q_lens = shape.q_lens;
    for (int b = 0; b < shape.batch; ++b) key.kv_lens.push_back(shape.kv_len(b));
  }
  key.page_size = shape.page_size;
  return key;
}

std::string to_string(const CudnnGraphKey& key) {
  std::string part6;
  if (key.kv_heads != key.heads) part6 += fmt::format(" Hkv={}", key.kv_heads);
  if (!key.varlen() && key.kv_seqlen != key.seqlen) part6 += fmt::format(" Nkv={}", key.kv_seqlen);
  if (key.varlen()) {
    std::int64_t total_q = 0, total_k = 0;
    for (int n : key.q_lens) total_q += n;
    for (int n : key.kv_lens) total_k += n;
    part6 += fmt::format(" varlen({} seqs, {} q, {} k)", key.q_lens.size(), total_q, total_k);
  }
  if (key.paged()) part6 += fmt::format(" page={}", key.page_size);
  return fmt::format("B={} H={} N={} D={} {} {}{}, scale {}, {}, device {}", key.batch, key.heads,
                     key.seqlen, key.head_dim, key.causal ? "causal" : "non-causal",
                     dtype_name(key.dtype), part6,
                     std::bit_cast<float>(key.scale_bits), key.stats ? "O and stats" : "O only",
                     key.device);
}

#ifdef LADDER_HAVE_CUDNN
// ================================================================================================
// Built with cuDNN
// ================================================================================================
namespace fe = cudnn_frontend;

namespace {

constexpr const char* kSource = "common/peers/cudnn_attention.cpp";

// The tensors' ids in the graph: the variant pack binds device pointers to them at each execution.
// A dense problem's graph has the first five; Part VI's add the padding mask's lengths, the ragged
// offsets and the page tables.
enum TensorUid : std::int64_t {
  kUidQ = 1, kUidK, kUidV, kUidO, kUidStats,
  kUidSeqLenQ, kUidSeqLenKv,                                     // [B] int32: the padding mask
  kUidQOffset, kUidKOffset, kUidVOffset, kUidOOffset, kUidStatsOffset,  // [B+1] int64: ragged
  kUidPageTableK, kUidPageTableV,                                // [B, 1, pages, 1] int32
};

// The problem as the graph sees it, from its key: cuDNN describes a ragged or paged tensor by the
// longest sequence (its dims stay [B, H, S_max, D]) and finds each sequence through the lengths.
struct Geometry {
  std::int64_t b = 0, h = 0, hk = 0, d = 0;
  std::int64_t sq = 0, skv = 0;          // the longest query / key sequence
  std::int64_t total_q = 0, total_k = 0;
  std::int64_t num_pages = 0, pages_per_seq = 0;
  bool varlen = false, paged = false;
  bool decode = false;                   // some sequence has a different number of keys than queries
  bool padded() const { return varlen || paged; }  // cuDNN then reads per-sequence lengths
};

Geometry geometry(const CudnnGraphKey& key) {
  Geometry g;
  g.b = key.batch;
  g.h = key.heads;
  g.hk = key.kv_heads;
  g.d = key.head_dim;
  g.varlen = key.varlen();
  g.paged = key.paged();
  for (int b = 0; b < key.batch; ++b) {
    const int nq = g.varlen ? key.q_lens[std::size_t(b)] : key.seqlen;
    const int nk = g.varlen ? key.kv_lens[std::size_t(b)] : key.kv_seqlen;
    g.sq = std::max<std::int64_t>(g.sq, nq);
    g.skv = std::max<std::int64_t>(g.skv, nk);
    g.total_q += nq;
    g.total_k += nk;
    g.decode = g.decode || nq != nk;
    if (g.paged) g.num_pages += ceil_div(nk, key.page_size);
  }
  // The harness's block table has a row of ceil(max Nk / P) pages per sequence (common/problem.hpp),
  // which is what cuDNN asks of its page table for max_seq_len_kv = the longest sequence.
  if (g.paged) g.pages_per_seq = ceil_div(g.skv, std::int64_t(key.page_size));
  return g;
}

// A built graph and the workspace its plan needs (owned here, so freed with the graph); for
// Part VI's problems, also what the graph reads beside the harness's tensors.
struct CudnnGraph {
  fe::graph::Graph graph;
  DeviceBuffer<std::uint8_t> workspace;
  Geometry geo;
  DeviceBuffer<int> seq_len_q, seq_len_kv;                       // [B]: varlen or paged
  DeviceBuffer<std::int64_t> q_offset, kv_offset, stats_offset;  // [B + 1]: varlen
  DeviceBuffer<float> stats_thd;                                 // [total_q, H]: varlen with stats
};

std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& graph, const char* name,
                                                           std::int64_t uid, std::vector<std::int64_t> dim,
                                                           std::vector<std::int64_t> stride,
                                                           fe::DataType_t type) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(std::move(dim))
                          .set_stride(std::move(stride))
                          .set_data_type(type));
}

std::unique_ptr<CudnnGraph> build_graph(cudnnHandle_t handle, const CudnnGraphKey& key) {
  auto built = std::make_unique<CudnnGraph>();
  fe::graph::Graph& graph = built->graph;
  set_attention_data_types(graph, key.dtype);
  const Geometry geo = built->geo = geometry(key);
  const std::int64_t b = geo.b, h = geo.h, hk = geo.hk, sq = geo.sq, skv = geo.skv, d = geo.d;
  // A ragged tensor of [total, heads, D] rows is [B, heads, S_max, D] with the token stride
  // heads·D and the head stride D; its batch stride is replaced by the offsets.
  auto ragged = [&](const char* name, std::int64_t uid, std::int64_t heads, std::int64_t s) {
    return fe::graph::Tensor_attributes()
        .set_name(name)
        .set_uid(uid)
        .set_dim({b, heads, s, d})
        .set_stride({s * heads * d, d, heads * d, 1});
  };
  auto offsets = [&](const char* name, std::int64_t uid) {
    return index_tensor(graph, name, uid, {b + 1, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT64);
  };

  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
  if (geo.varlen)
    q = graph.tensor(ragged("Q", kUidQ, h, sq).set_ragged_offset(offsets("Q_offset", kUidQOffset)));
  else
    q = bhnd_tensor(graph, "Q", kUidQ, b, h, sq, d);
  if (geo.paged) {  // the pool [num_pages, Hkv, P, D]: one page of one head is P·D contiguous
    auto pool = [&](const char* name, std::int64_t uid) {
      return bhnd_tensor(graph, name, uid, geo.num_pages, hk, key.page_size, d);
    };
    k = pool("K_pool", kUidK);
    v = pool("V_pool", kUidV);
  } else if (geo.varlen) {
    k = graph.tensor(ragged("K", kUidK, hk, skv).set_ragged_offset(offsets("K_offset", kUidKOffset)));
    v = graph.tensor(ragged("V", kUidV, hk, skv).set_ragged_offset(offsets("V_offset", kUidVOffset)));
  } else {  // dense (GQA: Hkv heads; decode: Nk keys)
    k = bhnd_tensor(graph, "K", kUidK, b, hk, skv, d);
    v = bhnd_tensor(graph, "V", kUidV, b, hk, skv, d);
  }

  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa_forward")
                     .set_attn_scale(std::bit_cast<float>(key.scale_bits))
                     .set_generate_stats(key.stats);
  if (key.causal && geo.decode) {
    // The harness's causal mask aligned to the end (query i of Nq sees keys j <= Nk - Nq + i):
    // cuDNN's bottom-right diagonal (under a varlen batch's padding mask, each sequence's own).
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT).set_diagonal_band_right_bound(0);
  } else {
    // The causal mask is the top-left one (key j visible to query i when j <= i), the harness's
    // wherever every sequence has as many keys as queries (then top left and bottom right agree).
    options.set_causal_mask(key.causal);
  }
  if (geo.padded()) {
    auto lengths = [&](const char* name, std::int64_t uid) {
      return index_tensor(graph, name, uid, {b, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32);
    };
    options.set_padding_mask(true)
        .set_seq_len_q(lengths("seq_len_q", kUidSeqLenQ))
        .set_seq_len_kv(lengths("seq_len_kv", kUidSeqLenKv));
  }
  if (geo.paged) {  // the harness's block table [B, pages_per_seq] is cuDNN's [B, 1, pages, 1]
    auto table = [&](const char* name, std::int64_t uid) {
      return index_tensor(graph, name, uid, {b, 1, geo.pages_per_seq, 1},
                          {geo.pages_per_seq, geo.pages_per_seq, 1, 1}, fe::DataType_t::INT32);
    };
    options.set_paged_attention_k_table(table("page_table_K", kUidPageTableK))
        .set_paged_attention_v_table(table("page_table_V", kUidPageTableV))
        .set_paged_attention_max_seq_len_kv(int(skv));
  }

  auto [o, stats] = graph.sdpa(q, k, v, std::move(options));
  o->set_output(true).set_uid(kUidO);
  if (geo.varlen)
    o->set_dim({b, h, sq, d}).set_stride({sq * h * d, d, h * d, 1}).set_ragged_offset(offsets("O_offset", kUidOOffset));
  else
    o->set_dim({b, h, sq, d}).set_stride(bhnd_strides(h, sq, d));
  if (key.stats) {
    stats->set_output(true).set_uid(kUidStats).set_data_type(fe::DataType_t::FLOAT).set_dim({b, h, sq, 1});
    if (geo.varlen)  // token-major [total_q, H] (cuDNN's tested ragged layout), transposed after
      stats->set_stride({sq * h, 1, h, 1}).set_ragged_offset(offsets("Stats_offset", kUidStatsOffset));
    else  // [B, H, N, 1] fp32, natural log: the harness's log-sum-exp layout
      stats->set_stride({h * sq, sq, 1, 1});
  }

  const std::int64_t workspace_bytes = plan_graph(graph, handle, key, kSource);
  built->workspace = DeviceBuffer<std::uint8_t>(std::size_t(workspace_bytes));

  if (geo.varlen) {  // filled from cu_seqlens at every launch (launch_cudnn)
    built->seq_len_q = DeviceBuffer<int>(std::size_t(b));
    built->seq_len_kv = DeviceBuffer<int>(std::size_t(b));
    built->q_offset = DeviceBuffer<std::int64_t>(std::size_t(b + 1));
    built->kv_offset = DeviceBuffer<std::int64_t>(std::size_t(b + 1));
    if (key.stats) {
      built->stats_offset = DeviceBuffer<std::int64_t>(std::size_t(b + 1));
      built->stats_thd = DeviceBuffer<float>(std::size_t(geo.total_q * h));
    }
  } else if (geo.paged) {  // every sequence alike: the lengths are the shape's, uploaded once
    built->seq_len_q = DeviceBuffer<int>(std::size_t(b));
    built->seq_len_kv = DeviceBuffer<int>(std::size_t(b));
    built->seq_len_q.upload(std::vector<int>(std::size_t(b), key.seqlen));
    built->seq_len_kv.upload(std::vector<int>(std::size_t(b), key.kv_seqlen));
  }
  return built;
}

// The graphs of the process. The handles' cache (common/peers/cudnn_common.hpp) is created first,
// so it is destroyed after this one: a graph's plans were made with its device's handle.
BuildOnceCache<CudnnGraphKey, CudnnGraph>& graphs() {
  cudnn_handles();
  static BuildOnceCache<CudnnGraphKey, CudnnGraph> cache;  // created by the first launch
  return cache;
}

// Part VI's arguments a graph reads, present where its problem needs them: a harness that left
// one null would have cuDNN read address 0.
void require(const void* pointer, const char* what, const CudnnGraphKey& key) {
  if (!pointer)
    throw std::logic_error(fmt::format("cuDNN peer: {} is null for {}: the harness must pass it "
                                       "(common/registry.hpp, AttentionArgs)", what, to_string(key)));
}

// The launch: everything but execute() happens once per problem (see the top of the file). One
// graph's workspace serves all its executions, which the harness issues on one stream in order
// (so do its lengths, offsets and stats, written and read in stream order).
void launch_cudnn(const AttentionArgs& args, cudaStream_t stream, bool stats) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const cudnnHandle_t handle = cudnn_handle(device);
  const CudnnGraphKey key = cudnn_graph_key(args.shape, args.softmax_scale, stats, device);
  CudnnGraph& g = graphs().get(key, [&] { return build_graph(handle, key); });
  const Geometry& geo = g.geo;

  LADDER_CUDNN_CHECK(cudnnSetStream(handle, stream));
  std::unordered_map<std::int64_t, void*> pack = {
      // cuDNN's variant pack is void* (the graph knows the type); it only reads Q, K, V.
      {kUidQ, const_cast<__half*>(args.q)},
      {kUidK, const_cast<__half*>(args.k)},
      {kUidV, const_cast<__half*>(args.v)},
      {kUidO, args.o},
  };
  if (stats) pack[kUidStats] = geo.varlen ? g.stats_thd.get() : static_cast<void*>(args.lse);
  if (geo.varlen) {
    // cuDNN 9.19 reads lengths and element offsets, the harness gives cu_seqlens: one small
    // kernel turns one into the other, here, inside the timed launch, as it would for any caller.
    require(args.cu_seqlens_q, "cu_seqlens_q", key);
    require(args.cu_seqlens_k, "cu_seqlens_k", key);
    RaggedOffsets r;
    r.cu_seqlens_q = args.cu_seqlens_q;
    r.cu_seqlens_k = args.cu_seqlens_k;
    r.batch = int(geo.b);
    r.q_row = geo.h * geo.d;
    r.kv_row = geo.hk * geo.d;
    r.stats_row = geo.h;
    r.seq_len_q = g.seq_len_q.get();
    r.seq_len_kv = g.seq_len_kv.get();
    r.q_offset = g.q_offset.get();
    r.kv_offset = g.kv_offset.get();
    r.stats_offset = stats ? g.stats_offset.get() : nullptr;
    launch_ragged_offsets(r, stream);
    pack[kUidQOffset] = pack[kUidOOffset] = g.q_offset.get();
    if (!geo.paged) pack[kUidKOffset] = pack[kUidVOffset] = g.kv_offset.get();
    if (stats) pack[kUidStatsOffset] = g.stats_offset.get();
  }
  if (geo.padded()) {
    pack[kUidSeqLenQ] = g.seq_len_q.get();
    pack[kUidSeqLenKv] = g.seq_len_kv.get();
  }
  if (geo.paged) {  // K and V pages sit at the same places of their pools: one table for both
    require(args.block_table, "block_table", key);
    pack[kUidPageTableK] = pack[kUidPageTableV] = const_cast<int*>(args.block_table);
  }
  check_fe(g.graph.execute(handle, pack, g.workspace.get()), "execute", CudnnStage::Execute, key, kSource);
  if (stats && geo.varlen) launch_lse_head_major(g.stats_thd.get(), args.lse, geo.total_q, int(geo.h), stream);
}

Step peers_step() {
  const std::string built_with =
      fmt::format("cuDNN {}.{}.{} headers, frontend {}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR,
                  CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
                  CUDNN_FRONTEND_PATCH_VERSION);
  return attention_step(99, "peers", "Library peers, timed by the same harness")
      .add(attention_variant("cudnn",
                             "cuDNN fused attention (frontend SDPA graph, " + built_with +
                                 "): fp16 or bf16 in/out, fp32 softmax and accumulation, O only (varlen: a small kernel "
                                 "in the launch turns cu_seqlens into cuDNN's lengths and offsets)",
                             [](const AttentionArgs& a, cudaStream_t s) { launch_cudnn(a, s, false); })
               .needs_sm(80)
               .for_head_dims({64, 128})
               .for_dtypes({DType::F16, DType::BF16})
               .serves(kPartSix)
               // Measured on the H200 (Part VI round 0): with one query row cuDNN's engines are not
               // bit-reproducible from run to run (decode, contiguous and paged), while every row
               // passes the pass rule; its dense engines are, but a variant's flag covers all its rows.
               .nondeterministic()
               .as_peer())
      .add(attention_variant("cudnn_lse",
                             "the same graph also writing the log-sum-exp (cuDNN's stats output; "
                             "varlen: written token-major, then transposed to [H, total_q] in the launch)",
                             [](const AttentionArgs& a, cudaStream_t s) { launch_cudnn(a, s, true); })
               .needs_sm(80)
               .for_head_dims({64, 128})
               .for_dtypes({DType::F16, DType::BF16})
               .serves(kPartSix)
               .nondeterministic()  // as above
               .with_lse()
               .as_peer())
      .add(cudnn_fp8_variant())  // fp8 problems only: cudnn_fp8.cpp
      .main_is("cudnn");
}

}  // namespace

CudnnBuildInfo cudnn_build_info() {
  CudnnBuildInfo info;
  info.built = true;
  info.headers = fmt::format("{}.{}.{}", CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  info.frontend = fmt::format("{}.{}.{}", CUDNN_FRONTEND_MAJOR_VERSION,
                              CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
  info.library_dir = LADDER_CUDNN_LIBRARY_DIR;
  return info;
}

std::optional<std::string> cudnn_runtime_version() {
  return cudnn_version_string(std::int64_t(cudnnGetVersion()));
}

#else
// ================================================================================================
// Built without cuDNN: one row that every problem refuses, saying how to enable it.
// ================================================================================================
#ifndef LADDER_CUDNN_MISSING
#define LADDER_CUDNN_MISSING "the build did not look for it"
#endif

namespace {

Step peers_step() {
  return attention_step(99, "peers", "Library peers, timed by the same harness")
      .add(attention_variant("cudnn", "cuDNN fused attention (not built: see the row's note)",
                             [](const AttentionArgs&, cudaStream_t) {
                               throw std::logic_error(
                                   cudnn_not_built_message(LADDER_CUDNN_MISSING));
                             })
               .for_dtypes({DType::F16, DType::BF16})  // so every problem gets the reason below
               .serves(kPartSix)
               .refuse_if([](const AttentionShape&) -> std::optional<std::string> {
                 return cudnn_not_built_message(LADDER_CUDNN_MISSING);
               })
               .as_peer())
      .add(cudnn_fp8_variant());  // the fp8 problems' row, saying the same (cudnn_fp8.cpp)
}

}  // namespace

CudnnBuildInfo cudnn_build_info() {
  CudnnBuildInfo info;
  info.missing = LADDER_CUDNN_MISSING;
  return info;
}

std::optional<std::string> cudnn_runtime_version() { return std::nullopt; }

#endif

LADDER_REGISTER_STEP(peers_step());

}  // namespace ladder::peers
