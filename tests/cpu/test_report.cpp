// JSON results round trip, and the .npy header.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/npy.hpp"
#include "common/report.hpp"
#include "tests/catch.hpp"

using namespace ladder;

namespace {
Report sample_report() {
  Report report;
  report.gpu.name = "Test GPU";
  report.gpu.sm = 90;
  report.gpu.sm_count = 132;
  report.gpu.sm_clock_mhz = 1980;
  report.command_line = "ladder --n 4096";
  report.started_at = "2026-11-29T00:00:00Z";
  ProblemRun run;
  run.kind = Kind::Attention;
  run.shape = "B=4 H=8 N=4096 D=64 non-causal";
  run.shape_json = {{"seqlen", 4096}};
  Row row;
  row.id = "05/bc32";
  row.step = 5;
  row.variant = "bc32";
  row.flops = 1e12;
  row.timing = summarize({2.0f, 1.0f, 3.0f});
  ErrorStats e;
  e.max_abs = 1e-4;
  e.tolerance = 5e-4;
  e.pass = true;
  row.error = e;
  row.baseline = "04/br128";
  row.speedup = 4.0;
  row.rerun_identical = true;
  row.kernels.push_back({"fa_kernel", 128, 96, 0, 0, 36864, 2, 0.125});
  run.rows.push_back(row);
  Row skipped;
  skipped.id = "06/h200";
  skipped.status = Row::Status::Skipped;
  skipped.note = "needs compute capability 9.0";
  run.rows.push_back(skipped);
  report.runs.push_back(run);
  return report;
}
}  // namespace

TEST_CASE("results JSON round trip", "[json]") {
  const Report report = sample_report();
  const auto path = std::filesystem::temp_directory_path() / "ladder_test_results.json";
  write_json(report, path.string());
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  std::filesystem::remove(path);

  CHECK(j["schema"] == "attention-ladder/results/1");
  CHECK(j["provenance"]["gpu"]["name"] == "Test GPU");
  CHECK(j["provenance"]["gpu"]["sm_clock_mhz"] == 1980);
  CHECK(j["provenance"]["gpu"]["temperature_c"].is_null());
  CHECK(j["provenance"]["command_line"] == "ladder --n 4096");
  CHECK(j["provenance"].contains("git_commit"));
  // Which code: the dirty flag is always one of three words, and a hash accompanies "unknown".
  const std::string dirty = j["provenance"]["git_dirty"];
  CHECK((dirty == "true" || dirty == "false" || dirty == "unknown"));
  if (dirty == "unknown") CHECK(j["provenance"]["tree_hash"].is_string());
  const auto& rows = j["runs"][0]["rows"];
  REQUIRE(rows.size() == 2);
  CHECK(rows[0]["id"] == "05/bc32");
  CHECK(rows[0]["median_ms"] == 2.0);
  CHECK(rows[0]["samples_ms"].size() == 3);
  CHECK(rows[0]["tflops"].get<double>() == Approx(1e12 / 2e-3 / 1e12));
  CHECK(rows[0]["error"]["pass"] == true);
  CHECK(rows[0]["speedup_vs_baseline"] == 4.0);
  CHECK(rows[0]["kernels"][0]["registers"] == 96);
  CHECK(rows[1]["status"] == "skipped");
  CHECK(rows[1]["note"] == "needs compute capability 9.0");
  CHECK_FALSE(rows[1].contains("median_ms"));
  CHECK(all_passed(report));
}

TEST_CASE("an fp8 row's error against the unquantized inputs is in the JSON, and only there", "[json][fp8]") {
  Report report = sample_report();
  report.runs[0].rows[0].error_vs_unquantized = 0.0425;
  report.runs[0].rows.push_back(report.runs[0].rows[0]);
  report.runs[0].rows[2].error_vs_unquantized = std::nan("");
  const auto j = to_json(report);
  const auto& rows = j["runs"][0]["rows"];
  CHECK(rows[0]["error_vs_unquantized"] == 0.0425);
  CHECK_FALSE(rows[1].contains("error_vs_unquantized"));  // a 16-bit row has none
  CHECK(rows[2]["error_vs_unquantized"].is_null());       // not finite: null, as rel_l2 is
  CHECK(all_passed(report));  // a measurement, not a verdict
}

TEST_CASE("npy header of fp8 bytes", "[npy][fp8]") {
  CHECK(npy_header("|u1", {2, 8, 17, 64}).find("'descr': '|u1'") != std::string::npos);
}

TEST_CASE("a failed check or a differing deterministic rerun fails the report", "[json]") {
  Report report = sample_report();
  report.runs[0].rows[0].error->pass = false;
  CHECK_FALSE(all_passed(report));
  report = sample_report();
  report.runs[0].rows[0].rerun_identical = false;
  CHECK_FALSE(all_passed(report));
  report.runs[0].rows[0].deterministic = false;  // float atomics may differ in the last bits
  CHECK(all_passed(report));
}

TEST_CASE("npy header follows the format", "[npy]") {
  const std::string h = npy_header("<f2", {4, 8, 16, 64});
  CHECK(h.substr(0, 6) == "\x93NUMPY");
  CHECK(h[6] == 1);
  CHECK(h[7] == 0);
  CHECK(h.size() % 64 == 0);
  const std::size_t dict_len = std::uint8_t(h[8]) | (std::uint8_t(h[9]) << 8);
  CHECK(dict_len + 10 == h.size());
  CHECK(h.find("'descr': '<f2'") != std::string::npos);
  CHECK(h.find("'shape': (4, 8, 16, 64)") != std::string::npos);
  CHECK(h.back() == '\n');
  CHECK(npy_header("<f4", {3}).find("'shape': (3,)") != std::string::npos);
}
