// The matmul and reduction tracks' problems (steps 01 and 02): fp32 in, fp32 out.
#include "common/compare.hpp"
#include "common/device_buffer.hpp"
#include "common/npy.hpp"
#include "common/random.hpp"
#include "common/reference.hpp"
#include "common/run_shared.hpp"

namespace ladder {
using namespace run_detail;

// ---- matrix product ------------------------------------------------------------------------
ProblemRun run_matmul(Session& session, const MatmulShape& shape,
                      std::span<const VariantRef> variants, const RunOptions& options) {
  ProblemRun run =
      begin_run(Kind::Matmul, shape, {{"m", shape.m}, {"n", shape.n}, {"k", shape.k}}, variants);

  const std::size_t a_elems = std::size_t(shape.m) * shape.k, b_elems = std::size_t(shape.k) * shape.n,
                    c_elems = std::size_t(shape.m) * shape.n;
  ensure_fits((a_elems + b_elems + c_elems) * sizeof(float) + 2 * session.gpu.l2_bytes, "A, B and C");
  const auto a = random_normal(a_elems, options.seed, kStreamA);
  const auto b = random_normal(b_elems, options.seed, kStreamB);
  DeviceBuffer<float> da(a_elems), db(b_elems), dc(c_elems);
  da.upload(a);
  db.upload(b);

  MatmulRows ref64, reflow;
  if (options.check) {
    const auto selected = select_rows(shape.m, shape.m, reference_rows(options, double(shape.n) * shape.k),
                                      options.seed);
    ref64 = matmul_reference(shape, a, b, selected, Precision::Fp64);
    reflow = matmul_reference(shape, a, b, selected, Precision::Low);
  }
  const std::string dir =
      save_directory(options, fmt::format("matmul_M{}_N{}_K{}", shape.m, shape.n, shape.k));
  if (!dir.empty()) {
    write_npy(dir + "/a.npy", "<f4", {shape.m, shape.k}, a.data(), a_elems * 4);
    write_npy(dir + "/b.npy", "<f4", {shape.k, shape.n}, b.data(), b_elems * 4);
  }

  Baselines baselines;
  baselines.needed = baselines_needed(variants);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = flops(shape);
    row.bytes = min_bytes(shape);
    if (refused(row, variant, shape, session.gpu.sm)) return;
    auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
    const MatmulArgs args{shape, da.get(), db.get(), dc.get(), workspace->get()};
    const auto launch = std::get<MatmulLaunch>(variant.launch);
    VariantHooks hooks;
    hooks.poison = [&] { dc.fill_bytes(kPoisonByte, session.stream.get()); };
    hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
    hooks.download = [&] {
      Output out;
      out.values = dc.download();
      return out;
    };
    hooks.check = [&](Row& r, const Output& out) {
      std::vector<double> got(ref64.rows.size() * std::size_t(shape.n));
      for (std::size_t i = 0; i < ref64.rows.size(); ++i)
        for (int j = 0; j < shape.n; ++j)
          got[i * shape.n + j] = out.values[std::size_t(ref64.rows[i]) * shape.n + j];
      ErrorStats e = compare_with_reference(got, ref64.c, reflow.c, matmul_abs_term(shape.k));
      e.total = std::int64_t(out.values.size());
      e.nonfinite = count_nonfinite(out.values);
      e.pass = e.pass && e.nonfinite == 0;
      r.error = e;
    };
    hooks.save = [&](const Output& out) {
      write_npy(dir + "/c_" + file_id(ref.id()) + ".npy", "<f4", {shape.m, shape.n},
                out.values.data(), out.values.size() * 4);
    };
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index, true);
  });
  finish_timing(session, run, options, baselines);
  return run;
}

// ---- reduction -----------------------------------------------------------------------------
ProblemRun run_reduction(Session& session, const ReductionShape& shape,
                         std::span<const VariantRef> variants, const RunOptions& options) {
  ProblemRun run = begin_run(Kind::Reduction, shape, {{"count", shape.count}}, variants);

  const std::size_t n = std::size_t(shape.count);
  ensure_fits(2 * n * sizeof(float) + 2 * session.gpu.l2_bytes, "the input and a copy of it");
  const auto x = random_normal(n, options.seed, kStreamX);
  DeviceBuffer<float> dx(n), dout(1);
  dx.upload(x);
  const double ref64 = reduction_reference(x, Precision::Fp64);
  const double reflow = reduction_reference(x, Precision::Low);
  const double abs_term = reduction_abs_term(sum_of_magnitudes(x));
  const std::string dir = save_directory(options, fmt::format("reduction_n{}", shape.count));
  if (!dir.empty()) write_npy(dir + "/x.npy", "<f4", {shape.count}, x.data(), n * 4);

  // The yardstick: a device-to-device copy of the same bytes, timed the same way. A reduction
  // reads 4n bytes; the copy reads 4n and writes 4n, and its GB/s counts both.
  if (options.time && !session.context_lost) {
    Row copy;
    copy.id = "copy";
    copy.description = "cudaMemcpyAsync device to device of the input (read + write counted)";
    copy.ceiling = true;
    copy.bytes = 2.0 * n * sizeof(float);
    DeviceBuffer<float> dst(n);
    copy.timing = time_launch(
        [&](cudaStream_t s) {
          CUDA_CHECK(cudaMemcpyAsync(dst.get(), dx.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, s));
        },
        session.stream.get(), options.timing, session.flusher);
    run.rows.push_back(std::move(copy));
  }

  Baselines baselines;
  baselines.needed = baselines_needed(variants);
  for_each_variant(session, run, variants, [&](const VariantRef& ref, Row& row, std::size_t row_index) {
    const Variant& variant = ref.variant();
    row.flops = flops(shape);
    row.bytes = min_bytes(shape);
    if (refused(row, variant, shape, session.gpu.sm)) return;
    auto workspace = std::make_shared<DeviceBuffer<std::uint8_t>>(variant.workspace_bytes(shape));
    const ReductionArgs args{shape, dx.get(), dout.get(), workspace->get()};
    const auto launch = std::get<ReductionLaunch>(variant.launch);
    VariantHooks hooks;
    hooks.poison = [&] { dout.fill_bytes(kPoisonByte, session.stream.get()); };
    hooks.launch = [args, launch, workspace](cudaStream_t s) { launch(args, s); };
    hooks.download = [&] {
      Output out;
      out.values = dout.download();
      return out;
    };
    hooks.check = [&](Row& r, const Output& out) {
      const std::vector<double> got = {double(out.values[0])}, r64 = {ref64}, rlow = {reflow};
      ErrorStats e = compare_with_reference(got, r64, rlow, abs_term);
      e.total = 1;
      e.nonfinite = count_nonfinite(out.values);
      e.pass = e.pass && e.nonfinite == 0;
      r.error = e;
    };
    hooks.save = [&](const Output& out) {
      write_npy(dir + "/sum_" + file_id(ref.id()) + ".npy", "<f4", {1}, out.values.data(), 4);
    };
    run_variant(session, ref, row, hooks, options, baselines, shape, row_index, true);
  });
  finish_timing(session, run, options, baselines);
  return run;
}

}  // namespace ladder
