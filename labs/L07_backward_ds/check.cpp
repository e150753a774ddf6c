// Lab 07's checker (given, do not edit): your backward_ds.hpp in the fragment model first (one
// warp's registers on the CPU, no GPU needed), then the kernel that uses it (backward_kv.cu) on a
// ragged grid, dK and dV against an fp64 reference.
//
// The kernel writes dK and dV only (its header says why), so the checker runs it itself rather
// than through the harness: the same seeded uniform inputs, outputs poisoned with NaN, an fp64
// reference, and the harness's pass rule for the backward: an error at most twice that of a
// low-precision reference which rounds P and dS to fp16 before their products (plus the fp16
// rounding of the output itself).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// <>, not "": your answers or the solution's, whichever folder the build put on the include path
// (labs/CMakeLists.txt) — the same file the kernel was compiled with.
#include <backward_ds.hpp>

#include "common/check.hpp"
#include "common/device_buffer.hpp"
#include "labs/L07_backward_ds/lab07.hpp"
#include "labs/L07_backward_ds/model.hpp"
#include "labs/common/lab.hpp"

namespace {

using lab07::kHeadDim;

lab07::model::Answers yours() {
  return {bwd::acc_row, bwd::acc_col, bwd::recompute_p,
          [](float (&s)[4], float (&dp)[4], const float* lse, const float* delta, int lane, int nt, float scale) {
            bwd::softmax_backward_tile(s, dp, lse, delta, lane, nt, scale);
          },
          [](std::uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) { bwd::pack_a(a, lo, hi); }};
}

void show_answers() {
  fmt::print("\nyour answers (backward_ds.hpp):\n  accumulator map, lanes 0-5 (row, col of c0 c1 c2 c3):\n");
  for (int lane = 0; lane < 6; ++lane) {
    fmt::print("    lane {}:", lane);
    for (int c = 0; c < 4; ++c) fmt::print("  ({:>2}, {})", bwd::acc_row(lane, c), bwd::acc_col(lane, c));
    fmt::print("\n");
  }
  fmt::print("  recompute_p(s = 8, lse = 1.5, scale = 0.125) = {:.6f} (exp(−0.5) = {:.6f})\n",
             bwd::recompute_p(8.f, 1.5f, 0.125f), std::exp(-0.5));
}

// ---- The GPU part -----------------------------------------------------------------------------------
using Half = __half;
float h2f(Half x) { return __half2float(x); }

struct Case {
  ladder::AttentionShape shape;
  float q_scale = 1.f, k_scale = 1.f;  // large logits: Q×5, K×3
};

struct Compare {
  double max_err = 0, tol = 0;
  std::int64_t nonfinite = 0;
  bool pass() const { return nonfinite == 0 && max_err <= tol; }
};

// got: the kernel's fp16; ref: fp64; low: the low-precision reference (fp64 arithmetic on fp16 P, dS).
Compare compare(const std::vector<Half>& got, const std::vector<double>& ref, const std::vector<double>& low) {
  Compare c;
  double low_err = 0, mag = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = h2f(got[i]);
    if (!std::isfinite(g)) ++c.nonfinite;
    else c.max_err = std::max(c.max_err, std::abs(g - ref[i]));
    low_err = std::max(low_err, std::abs(low[i] - ref[i]));
    mag = std::max(mag, std::abs(ref[i]));
  }
  c.tol = 2 * low_err + std::ldexp(mag, -10) + 1e-6;  // 2^-10·max|ref|: twice an fp16 output's rounding
  return c;
}

// One case: inputs, the forward (O, LSE) and the backward's references on the CPU, the kernel
// twice (the second launch must give the same bits), and the verdict.
std::string run_case(const ladder::Variant& variant, const Case& cs, unsigned seed, std::string& figures) {
  const auto& sh = cs.shape;
  const int n = sh.seqlen, bh = sh.batch * sh.heads;
  const std::size_t elems = std::size_t(sh.elements());
  const double scale = sh.softmax_scale();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto random = [&](float mult) {
    std::vector<Half> x(elems);
    for (auto& e : x) e = __float2half_rn(u(rng) * mult);
    return x;
  };
  const auto q = random(cs.q_scale), k = random(cs.k_scale), v = random(1.f), d_o = random(1.f);

  std::vector<Half> o(elems);
  std::vector<float> lse(std::size_t(sh.rows()));
  std::vector<double> dk_ref(elems, 0.0), dv_ref(elems, 0.0), dk_low(elems, 0.0), dv_low(elems, 0.0);
  std::vector<double> srow(n), prow(n);
  auto round16 = [](double x) { return double(h2f(__float2half_rn(float(x)))); };
  for (int h = 0; h < bh; ++h) {
    const std::size_t base = std::size_t(h) * n * kHeadDim;
    auto at = [&](const std::vector<Half>& x, int row, int d) { return double(h2f(x[base + std::size_t(row) * kHeadDim + d])); };
    std::vector<double> lse_h(n);
    for (int i = 0; i < n; ++i) {  // the forward, in double
      const int visible = sh.causal ? i + 1 : n;
      double m = -INFINITY;
      for (int j = 0; j < visible; ++j) {
        double dot = 0;
        for (int d = 0; d < kHeadDim; ++d) dot += at(q, i, d) * at(k, j, d);
        srow[j] = dot * scale;
        m = std::max(m, srow[j]);
      }
      double l = 0;
      for (int j = 0; j < visible; ++j) l += (prow[j] = std::exp(srow[j] - m));
      lse_h[i] = m + std::log(l);
      lse[std::size_t(h) * n + i] = float(lse_h[i]);
      for (int d = 0; d < kHeadDim; ++d) {
        double acc = 0;
        for (int j = 0; j < visible; ++j) acc += prow[j] * at(v, j, d);
        o[base + std::size_t(i) * kHeadDim + d] = __float2half_rn(float(acc / l));
      }
    }
    for (int i = 0; i < n; ++i) {  // the backward, in double: P from the forward's LSE
      const int visible = sh.causal ? i + 1 : n;
      double delta = 0;
      for (int d = 0; d < kHeadDim; ++d) delta += at(d_o, i, d) * at(o, i, d);
      for (int j = 0; j < visible; ++j) {
        double dot = 0, dpv = 0;
        for (int d = 0; d < kHeadDim; ++d) {
          dot += at(q, i, d) * at(k, j, d);
          dpv += at(d_o, i, d) * at(v, j, d);
        }
        const double p = std::exp(dot * scale - double(lse[std::size_t(h) * n + i]));
        const double ds = p * (dpv - delta);
        const double p16 = round16(p), ds16 = round16(ds);
        for (int d = 0; d < kHeadDim; ++d) {
          const std::size_t out = base + std::size_t(j) * kHeadDim + d;
          dv_ref[out] += p * at(d_o, i, d);
          dk_ref[out] += scale * ds * at(q, i, d);
          dv_low[out] += p16 * at(d_o, i, d);
          dk_low[out] += scale * ds16 * at(q, i, d);
        }
      }
    }
  }

  using ladder::DeviceBuffer;
  auto upload = [](const std::vector<Half>& x) {
    DeviceBuffer<Half> b(x.size());
    b.upload(x);
    return b;
  };
  auto gpu_q = upload(q), gpu_k = upload(k), gpu_v = upload(v), gpu_o = upload(o), gpu_do = upload(d_o);
  DeviceBuffer<float> gpu_lse(lse.size());
  gpu_lse.upload(lse);
  DeviceBuffer<Half> dk(elems), dv(elems);
  DeviceBuffer<unsigned char> workspace(variant.workspace_bytes(ladder::Problem(sh)));
  ladder::BackwardArgs args{.shape = sh, .softmax_scale = sh.softmax_scale(), .q = gpu_q.get(), .k = gpu_k.get(),
                            .v = gpu_v.get(), .o = gpu_o.get(), .d_o = gpu_do.get(), .lse = gpu_lse.get(), .dq = nullptr,
                            .dk = dk.get(), .dv = dv.get(), .workspace = workspace.get()};
  const auto& launch = std::get<ladder::BackwardLaunch>(variant.launch);
  std::vector<Half> dk_got, dv_got;
  bool identical = true;
  for (int run = 0; run < 2; ++run) {
    dk.fill_bytes(0xFF, nullptr);  // NaN: every element must be written
    dv.fill_bytes(0xFF, nullptr);
    launch(args, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    auto k_now = dk.download(), v_now = dv.download();
    if (run == 1)
      identical = std::memcmp(k_now.data(), dk_got.data(), elems * sizeof(Half)) == 0 &&
                  std::memcmp(v_now.data(), dv_got.data(), elems * sizeof(Half)) == 0;
    dk_got = std::move(k_now);
    dv_got = std::move(v_now);
  }
  const Compare cv = compare(dv_got, dv_ref, dv_low), ck = compare(dk_got, dk_ref, dk_low);
  figures = fmt::format("dV max|err| {:.2e} (allowed {:.2e}), dK max|err| {:.2e} (allowed {:.2e})", cv.max_err, cv.tol,
                        ck.max_err, ck.tol);
  std::string why;
  auto judge = [&](const char* name, const Compare& c) {
    if (!why.empty()) return;
    if (c.nonfinite)
      why = fmt::format("{} of {} values of {} are NaN or inf: never written (poisoned with NaN before the launch), or "
                        "computed as NaN (exp(−inf − (−inf))?)", c.nonfinite, elems, name);
    else if (!c.pass())
      why = fmt::format("{}: max|err| {:.3e} > allowed {:.3e}", name, c.max_err, c.tol);
  };
  judge("dV", cv);
  judge("dK", ck);
  if (why.empty() && !identical) why = "a second launch gave different bits (a race, or uninitialized memory?)";
  return why;
}

}  // namespace

int main(int argc, char** argv) {
  const lab::Options options = lab::parse(argc, argv, "L07", "the softmax's backward on mma.sync fragments");
  lab::Verdict verdict("L07");
  lab::check_registration(lab07::kStep, {"kv_outer"}, verdict);
  show_answers();

  // ---- The model (CPU) ----
  fmt::print("\nthe fragment model: one warp's registers on the CPU, the PTX ISA's layouts, your four answers; five "
             "checks in order (the map, P, one tile, the packing, one block)\n");
  const auto finding = lab07::model::check(yours());
  if (finding.check) {
    fmt::print("model: FAIL, check {} ({}): {}\n", finding.check, lab07::model::check_name(finding.check), finding.what);
    verdict.fail(fmt::format("the model, check {} ({}): {}", finding.check, lab07::model::check_name(finding.check),
                             finding.what));
  } else {
    fmt::print("model: PASS (the map, P from the LSE, dS on 16 tiles, the packing, dV and dK of one block)\n");
  }
  if (options.cpu_only) return verdict.finish_cpu_only();

  // ---- The kernel (GPU) ----
  std::string why_not;
  auto session = lab::open_gpu(why_not);
  if (!session) return verdict.finish_without_gpu(why_not);
  if (session->gpu.sm < 80)
    return verdict.finish_without_gpu(fmt::format("the kernel needs sm_80 (ldmatrix, mma.sync) and this GPU is sm_{}",
                                                  session->gpu.sm));
  try {
    const ladder::Variant& variant = lab::variant(lab07::kStep, "kv_outer").variant();
    std::vector<Case> cases;
    for (bool causal : {false, true})
      for (int n : {1, 17, 64, 65, 113, 128, 200, 1000})
        cases.push_back({.shape = {.batch = 1, .heads = 3, .seqlen = n, .head_dim = kHeadDim, .causal = causal}});
    for (bool causal : {false, true})  // large logits: the LSE far from 0
      cases.push_back({.shape = {.batch = 2, .heads = 1, .seqlen = 300, .head_dim = kHeadDim, .causal = causal},
                       .q_scale = 5.f, .k_scale = 3.f});
    fmt::print("\ncheck grid: dK and dV against fp64 (P from the fp64 forward's LSE), outputs poisoned with NaN, two "
               "launches compared bit for bit:\n");
    unsigned seed = 1;
    for (const auto& cs : cases) {
      std::string figures;
      const std::string why = run_case(variant, cs, seed++, figures);
      const std::string label = cs.shape.to_string() + (cs.q_scale != 1.f ? " (Q×5, K×3)" : "");
      fmt::print("  {:<44} {}  {}\n", label, why.empty() ? " ok " : "FAIL", why.empty() ? figures : why);
      if (!why.empty()) verdict.fail(fmt::format("{}: {}", label, why));
    }
  } catch (const std::exception& e) {
    verdict.fail(std::string("the checker stopped: ") + e.what());
  }
  return verdict.finish();
}
