// Calibrated MFU (Note [Calibrated MFU], core/peak.hpp): the SDK-GEMM peak measurement, its cache
// (reused, corrupt file ignored and rewritten), the datasheet table, and the fields in a real
// `benchhost --mode train` report.
#include <gtest/gtest.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "environment.hpp"
#include "peak.hpp"
#include "test_support.hpp"

using namespace benchhost;
using namespace benchhost::host;

namespace {

// Small and short: these check the machinery, not the machine.
PeakRequest small_cpu_request(const std::string& precision = "fp32") {
  PeakRequest r;
  r.device = Device::cpu();
  r.precision = precision;
  r.threads = 2;
  r.sizes = {128, 256};
  r.target_seconds = 0.05;
  return r;
}

}  // namespace

TEST(Peak, CpuFp32MeasurementIsAPositiveRateThroughOneDnn) {
  const PeakMeasurement m = measure_peak(small_cpu_request());
  EXPECT_GT(m.tflops, 0);
  EXPECT_TRUE(m.m == 128 || m.m == 256) << m.m;
  EXPECT_EQ(m.m, m.n);
  EXPECT_EQ(m.path, "SDK matmul f32 (oneDNN)");
  EXPECT_EQ(m.library.rfind("oneDNN ", 0), 0u) << m.library;
  EXPECT_GE(m.repetitions, 2);  // at least two per size measured (a slow machine skips the larger)
  EXPECT_FALSE(m.from_cache);
  EXPECT_EQ(m.describe().rfind("measured: SDK matmul f32 (oneDNN) ", 0), 0u) << m.describe();
  EXPECT_NE(m.describe().find("2 threads"), std::string::npos) << m.describe();
}

TEST(Peak, CpuBf16IsMeasuredThroughThePromotionWorkloadsUse) {
  const PeakMeasurement m = measure_peak(small_cpu_request("bf16"));
  EXPECT_GT(m.tflops, 0);
  EXPECT_NE(m.path.find("bf16"), std::string::npos) << m.path;
  EXPECT_NE(m.path.find("promotion"), std::string::npos) << m.path;
}

TEST(Peak, Tf32AndFp8OnTheCpuAreRefused) {
  EXPECT_THROW(measure_peak(small_cpu_request("tf32")), Unsupported);
  EXPECT_THROW(measure_peak(small_cpu_request("fp8")), Unsupported);
}

TEST(Peak, CacheIsReusedAndRefreshMeasuresAgain) {
  bhtest::TempDir tmp("peak_cache");
  const auto cache = tmp.path / "benchhost" / "peak.json";
  const PeakRequest r = small_cpu_request();
  std::vector<std::string> warnings;
  const int before = peak_measurements_taken();
  const PeakMeasurement first = calibrated_peak(r, CalibrateMode::auto_, cache, &warnings);
  EXPECT_EQ(peak_measurements_taken(), before + 1);
  EXPECT_FALSE(first.from_cache);
  ASSERT_TRUE(std::filesystem::exists(cache));
  if (first.load && first.load->busy) {  // a loaded machine: make the entry a quiet one (a busy one is re-measured)
    nlohmann::json j = nlohmann::json::parse(bhtest::read_file(cache));
    j["entries"][peak_cache_key(r)]["machine_load"]["busy"] = false;
    std::ofstream(cache) << j.dump();
  }
  const PeakMeasurement second = calibrated_peak(r, CalibrateMode::auto_, cache, &warnings);
  EXPECT_EQ(peak_measurements_taken(), before + 1) << "a cached peak was measured again";
  EXPECT_TRUE(second.from_cache);
  EXPECT_DOUBLE_EQ(second.tflops, first.tflops);
  EXPECT_EQ(second.measured_utc, first.measured_utc);
  EXPECT_NE(second.describe().find("(cached)"), std::string::npos) << second.describe();
  // Another precision is another entry; refresh measures again.
  calibrated_peak(small_cpu_request("bf16"), CalibrateMode::auto_, cache, &warnings);
  EXPECT_EQ(peak_measurements_taken(), before + 2);
  const PeakMeasurement refreshed = calibrated_peak(r, CalibrateMode::refresh, cache, &warnings);
  EXPECT_EQ(peak_measurements_taken(), before + 3);
  EXPECT_FALSE(refreshed.from_cache);
  const auto j = nlohmann::json::parse(bhtest::read_file(cache));
  EXPECT_EQ(j["entries"].size(), 2u) << j.dump(2);
  EXPECT_TRUE(j["entries"].contains(peak_cache_key(r)));
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

// Note [Peak cache]: a peak cached from a busy machine is low; the next run measures again and a
// quiet (or higher) measurement replaces it.
TEST(Peak, ABusyCachedPeakIsMeasuredAgain) {
  bhtest::TempDir tmp("peak_busy");
  const auto cache = tmp.path / "peak.json";
  const PeakRequest r = small_cpu_request();
  std::vector<std::string> warnings;
  PeakMeasurement low = calibrated_peak(r, CalibrateMode::auto_, cache, &warnings);
  // The same entry as if taken while other processes kept the CPUs busy: far too low.
  nlohmann::json j = nlohmann::json::parse(bhtest::read_file(cache));
  nlohmann::json& e = j["entries"][peak_cache_key(r)];
  e["tflops"] = 1e-9;
  e["machine_load"] = {{"cpus", 2}, {"seconds", 0.4}, {"other_cpus", 1.5}, {"steal_fraction", 0.0},
                       {"load_average", 3.5}, {"busy", true}};
  { std::ofstream(cache) << j.dump(); }
  const int before = peak_measurements_taken();
  const PeakMeasurement again = calibrated_peak(r, CalibrateMode::auto_, cache, &warnings);
  EXPECT_EQ(peak_measurements_taken(), before + 1) << "a busy cached peak was used as it is";
  EXPECT_GT(again.tflops, 1e-9);
  const auto after = nlohmann::json::parse(bhtest::read_file(cache));
  EXPECT_DOUBLE_EQ(after["entries"][peak_cache_key(r)]["tflops"].get<double>(), again.tflops);
  // A quiet cached entry is used as it is.
  if (!(again.load && again.load->busy)) {
    const PeakMeasurement third = calibrated_peak(r, CalibrateMode::auto_, cache, &warnings);
    EXPECT_EQ(peak_measurements_taken(), before + 1);
    EXPECT_TRUE(third.from_cache);
  }
  EXPECT_GT(low.tflops, 0);
}

TEST(Peak, CorruptCacheIsIgnoredWithAWarningAndRewritten) {
  bhtest::TempDir tmp("peak_corrupt");
  const auto cache = tmp.path / "peak.json";
  const PeakRequest r = small_cpu_request();
  for (const std::string& junk : {std::string("{\"entries\": {\"x\": "), std::string("[1, 2]"),
                                  nlohmann::json{{"entries", {{peak_cache_key(r), {{"tflops", -1}}}}}}.dump()}) {
    { std::ofstream(cache) << junk; }
    std::vector<std::string> warnings;
    const int before = peak_measurements_taken();
    const PeakMeasurement m = calibrated_peak(r, CalibrateMode::auto_, cache, &warnings);
    EXPECT_EQ(peak_measurements_taken(), before + 1) << junk;
    EXPECT_GT(m.tflops, 0);
    ASSERT_EQ(warnings.size(), 1u) << junk;
    EXPECT_NE(warnings[0].find("corrupt"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find(cache.string()), std::string::npos) << warnings[0];
    const auto j = nlohmann::json::parse(bhtest::read_file(cache));  // rewritten, valid
    EXPECT_DOUBLE_EQ(j["entries"][peak_cache_key(r)]["tflops"].get<double>(), m.tflops);
  }
}

TEST(Peak, CacheKeyNamesMachineThreadsPrecisionBuildAndLibrary) {
  PeakRequest r = small_cpu_request();
  const std::string key = peak_cache_key(r);
  EXPECT_NE(key.find(cpu_model()), std::string::npos) << key;
  EXPECT_NE(key.find("2 threads"), std::string::npos) << key;
  EXPECT_NE(key.find("fp32"), std::string::npos) << key;
  EXPECT_NE(key.find("oneDNN"), std::string::npos) << key;
  EXPECT_NE(key.find("benchhost "), std::string::npos) << key;
  r.threads = 1;
  EXPECT_NE(peak_cache_key(r), key);
  r.threads = 2;
  r.precision = "bf16";
  EXPECT_NE(peak_cache_key(r), key);
}

TEST(Peak, DatasheetPeaksAreNamedOrSaidToBeMissing) {
  const DatasheetPeak cpu = datasheet_peak(Device::cpu(), "", "fp32");
  EXPECT_EQ(cpu.tflops, 0);
  EXPECT_EQ(cpu.source, "no datasheet peak for this CPU");
  const DatasheetPeak h100 = datasheet_peak(Device::cuda(0), "NVIDIA H100 80GB HBM3", "bf16");
  EXPECT_DOUBLE_EQ(h100.tflops, 989.4);
  EXPECT_EQ(h100.source, "NVIDIA H100 SXM5 datasheet, dense bf16");
  const DatasheetPeak pcie = datasheet_peak(Device::cuda(0), "NVIDIA H100 PCIe", "bf16");
  EXPECT_DOUBLE_EQ(pcie.tflops, 756);
  EXPECT_DOUBLE_EQ(datasheet_peak(Device::cuda(0), "NVIDIA H200", "fp8").tflops, 1978.9);
  EXPECT_DOUBLE_EQ(datasheet_peak(Device::cuda(0), "NVIDIA A100-SXM4-80GB", "tf32").tflops, 156);
  const DatasheetPeak a100_fp8 = datasheet_peak(Device::cuda(0), "NVIDIA A100-SXM4-80GB", "fp8");
  EXPECT_EQ(a100_fp8.tflops, 0);
  EXPECT_NE(a100_fp8.source.find("no fp8 peak"), std::string::npos) << a100_fp8.source;
  EXPECT_NE(datasheet_peak(Device::cuda(0), "Some GPU", "bf16").source.find("'Some GPU'"), std::string::npos);
}

TEST(Peak, CudaCalibrationOfEveryPrecision) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (const std::string precision : {"fp32", "tf32", "bf16", "fp16", "fp8"}) {
    PeakRequest r;
    r.device = Device::cuda(0);
    r.precision = precision;
    r.sizes = {4096};
    r.target_seconds = 0.1;
    try {
      const PeakMeasurement m = measure_peak(r);
      EXPECT_GT(m.tflops, 0) << precision;
      EXPECT_NE(m.path.find("cuBLASLt"), std::string::npos) << m.path;
      const DatasheetPeak d = datasheet_peak(r.device, gpu_name(r.device), precision);
      std::cout << precision << ": " << m.tflops << " TFLOP/s (" << m.describe() << "); datasheet " << d.tflops
                << " (" << d.source << ")\n";
      if (d.tflops > 0) EXPECT_LT(m.tflops, d.tflops * 1.05) << precision << " above the datasheet";
    } catch (const Unsupported& e) {
      std::cout << precision << " unsupported here: " << e.what() << "\n";  // fp8 before sm_90
    }
  }
}

// The real executable: a toy training point reports both MFUs with their sources, and the second
// run takes the peak from the cache.
TEST(Peak, TrainReportCarriesMeasuredAndDatasheetMfuWithSources) {
  bhtest::TempDir tmp("peak_report");
  const std::string env = fmt::format("XDG_CACHE_HOME='{}' ", (tmp.path / "cache").string());
  const std::string common = fmt::format("--plugin-dir '{}' --plugin toy --mode train -b 4 -w 1 -i 5 --threads 2",
                                         bhtest::plugin_dir().string());
  auto record = [&](const std::string& extra, const std::string& name) {
    const auto report = tmp.path / (name + ".json");
    const auto p = bhtest::run_command(env + "'" + BENCHHOST_EXECUTABLE + "' " + common + " " + extra + " -o '" +
                                       report.string() + "' --csv '" + (tmp.path / (name + ".csv")).string() + "'");
    EXPECT_EQ(p.exit_code, 0) << p.output;
    const auto j = nlohmann::json::parse(bhtest::read_file(report));
    return std::make_pair(j["results"][0], p.output);
  };
  const auto [first, console] = record("", "first");
  ASSERT_TRUE(first["mfu"].is_number()) << first.dump(2);
  EXPECT_GT(first["mfu"].get<double>(), 0);
  EXPECT_GT(first["peak_tflops"].get<double>(), 0);
  const std::string source = first["peak_source"];
  EXPECT_EQ(source.rfind("measured: SDK matmul f32 (oneDNN) ", 0), 0u) << source;
  EXPECT_NE(source.find("2 threads"), std::string::npos) << source;
  EXPECT_EQ(source.find("(cached)"), std::string::npos) << source;
  EXPECT_NEAR(first["mfu"].get<double>(),
              first["achieved_tflops"].get<double>() / first["peak_tflops"].get<double>(), 1e-12);
  EXPECT_TRUE(first["mfu_datasheet"].is_null());
  EXPECT_TRUE(first["datasheet_peak_tflops"].is_null());
  EXPECT_EQ(first["datasheet_source"], "no datasheet peak for this CPU");
  EXPECT_NE(console.find("MFU"), std::string::npos);
  EXPECT_NE(console.find(source), std::string::npos) << console;
  EXPECT_TRUE(std::filesystem::exists(tmp.path / "cache" / "benchhost" / "peak.json"));
  const std::string csv = bhtest::read_file(tmp.path / "first.csv");
  EXPECT_NE(csv.find("peak_tflops,peak_source,mfu_datasheet,datasheet_peak_tflops,datasheet_source\n"),
            std::string::npos);
  EXPECT_NE(csv.find("no datasheet peak for this CPU"), std::string::npos) << csv;

  const auto [cached, console2] = record("", "cached");
  if (source.find("busy meanwhile") == std::string::npos) {
    EXPECT_EQ(cached["peak_tflops"], first["peak_tflops"]);
    EXPECT_NE(cached["peak_source"].get<std::string>().find("(cached)"), std::string::npos) << cached.dump(2);
  } else {
    // Calibrated on a busy machine (a test suite beside it): the second run measures again
    // (Note [Peak cache]) and the cache holds what that run used.
    const auto entries = nlohmann::json::parse(bhtest::read_file(tmp.path / "cache" / "benchhost" / "peak.json"))["entries"];
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_DOUBLE_EQ(entries.begin().value()["tflops"].get<double>(), cached["peak_tflops"].get<double>());
  }

  const auto [given, console3] = record("--peak-tflops 2", "given");
  EXPECT_EQ(given["peak_tflops"], 2.0);
  EXPECT_EQ(given["peak_source"], "--peak-tflops 2 (given on the command line)");
  EXPECT_NEAR(given["mfu"].get<double>(), given["achieved_tflops"].get<double>() / 2, 1e-15);

  const auto [off, console4] = record("--calibrate-peak off", "off");
  EXPECT_TRUE(off["mfu"].is_null());
  EXPECT_TRUE(off["achieved_tflops"].is_number());
  EXPECT_NE(off["mfu_note"].get<std::string>().find("--calibrate-peak off"), std::string::npos) << off.dump(2);
  EXPECT_EQ(off["datasheet_source"], "no datasheet peak for this CPU");
}

TEST(Peak, MfuAboveOneIsFlaggedInTheMessage) {
  bhtest::TempDir tmp("peak_above");
  const auto report = tmp.path / "r.json";
  // A peak far below what the toy reaches: MFU > 1 must be said, not reported silently.
  const auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin toy --mode train -b 4 -w 1 -i 5 "
                                                   "--peak-tflops 1e-12 -o '{}'",
                                                   bhtest::plugin_dir().string(), report.string()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const auto r = nlohmann::json::parse(bhtest::read_file(report))["results"][0];
  EXPECT_GT(r["mfu"].get<double>(), 1);
  EXPECT_NE(r["message"].get<std::string>().find("above 100%"), std::string::npos) << r.dump(2);
}

// A peak above the datasheet's (a wrong datasheet row, a --peak-tflops typo) and an MFU above 1
// against either peak are said in the message; MFU scales with the device count.
TEST(Peak, PeakAboveTheDatasheetIsFlagged) {
  RunPeaks p;
  p.peak_tflops = 2;
  p.peak_source = "--peak-tflops 2 (given on the command line)";
  p.datasheet = {1.5, "NVIDIA H100 SXM5 datasheet, dense bf16"};
  RunRecord r;
  r.achieved_tflops = 1.8;
  apply_peaks(r, p, 1);
  EXPECT_DOUBLE_EQ(*r.mfu, 0.9);
  EXPECT_DOUBLE_EQ(*r.mfu_datasheet, 1.2);
  EXPECT_EQ(r.datasheet_source, "NVIDIA H100 SXM5 datasheet, dense bf16");
  EXPECT_NE(r.message.find("the peak 2 TFLOP/s is above the datasheet's 1.5 TFLOP/s"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("MFU against the datasheet peak is 120.0% (above 100%)"), std::string::npos) << r.message;
  RunRecord two;
  two.achieved_tflops = 1.8;
  apply_peaks(two, p, 2);
  EXPECT_DOUBLE_EQ(*two.mfu, 0.45);
  // No peak: the reason, and still the datasheet figure.
  RunPeaks none;
  none.why = "peak calibration is off (--calibrate-peak off) and no --peak-tflops was given";
  none.datasheet = p.datasheet;
  RunRecord r3;
  r3.achieved_tflops = 0.3;
  apply_peaks(r3, none, 1);
  EXPECT_FALSE(r3.mfu.has_value());
  EXPECT_EQ(r3.mfu_note, none.why);
  EXPECT_DOUBLE_EQ(*r3.mfu_datasheet, 0.2);
  EXPECT_EQ(r3.message, "");
}
