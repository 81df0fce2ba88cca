#pragma once
/// @file peak.hpp  The device peak that MFU is measured against: calibrated with the SDK's own
/// GEMM, given on the command line, or from a vendor datasheet.
///
/// Note [Calibrated MFU]
/// MFU = achieved FLOP/s / peak FLOP/s, and the figure is only as honest as its denominator. A
/// datasheet peak is often not reachable (boost clocks, sparsity figures, a PCIe part read as SXM)
/// and for CPUs there is none we can name, so MFU against it ranged from 104% to 156% in user
/// reports. The host therefore measures the achievable peak: the best dense GEMM rate of the SDK's
/// own matmul path, exactly as workloads call it (nn::matmul with the dtypes the precision policy
/// chooses: oneDNN f32 on the CPU, bf16/fp16 there through the registry's f32 promotion; cuBLASLt
/// f32, tf32 (Tf32Scope), bf16 and fp16 on CUDA, and nn::matmul_fp8 for fp8), on square sizes big
/// enough to saturate the device, repeated until `target_seconds` of work, best repetition. It
/// runs with the threads the run uses and is cached per machine and build (Note [Peak cache]).
///
/// A record then carries two MFUs, each naming its source:
///   - `mfu` against `peak_tflops`: --peak-tflops when given (the user's number), else the
///     calibrated peak (`peak_source` says the GEMM, sizes, threads, library and date);
///   - `mfu_datasheet` against `datasheet_peak_tflops` where a vendor datasheet gives one for this
///     device and precision (`datasheet_source`), otherwise null with "no datasheet peak ...".
/// A measured peak above the datasheet's, an MFU above 1, or a calibration on a busy machine
/// (which lowers the peak and so inflates MFU) is said in the record's message.
///
/// Note [Peak cache]
/// One JSON file, $XDG_CACHE_HOME/benchhost/peak.json (else ~/.cache/benchhost/peak.json), maps a
/// key to a measurement. The key is everything that changes the answer: device kind and name (CPU
/// model, GPU name and clock), threads, precision, benchhost version and git revision (dirty
/// included), and the GEMM library's version (oneDNN; cuBLASLt). Writers hold an flock on
/// peak.json.lock while they read, merge and rename a temporary file over the cache, so parallel
/// runs (ctest -j, ranks) never see a torn file or drop each other's entries; the measurement
/// itself runs outside the lock. A file that does not parse is ignored with a warning and
/// rewritten. An entry measured on a busy machine (machine_load.busy) is a low peak: each run
/// measures again until a quiet measurement replaces it (of two busy ones the higher is kept), so
/// a calibration taken during a test suite does not stay. The test suite points XDG_CACHE_HOME at the build tree (tests/common/test_cache_home.cpp), so
/// tests share one calibration per build and never write a user's cache.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/device.hpp"
#include "machine_load.hpp"

namespace benchhost::host {

struct Settings;

/// --calibrate-peak: auto (use the cache, measure when it has no entry), refresh (measure and
/// replace the entry), off (no calibration: MFU only against --peak-tflops).
enum class CalibrateMode { auto_, refresh, off };
CalibrateMode parse_calibrate_mode(const std::string& name);  ///< InvalidArgument for other names
const char* calibrate_mode_name(CalibrateMode m) noexcept;

/// What to calibrate.
struct PeakRequest {
  Device device = Device::cpu();
  std::string precision = "fp32";  ///< fp32, tf32, fp16, bf16, fp8
  int threads = 1;                 ///< CPU threads (set_num_threads) for the GEMM
  int local_processes = 1;         ///< this run's processes on the node (for the load window)
  double target_seconds = 0.4;     ///< work per precision, over all sizes
  std::vector<std::int64_t> sizes; ///< square M = N = K; empty: the device's defaults
};

/// One calibration.
struct PeakMeasurement {
  double tflops = 0;          ///< best repetition's dense FLOP/s (2 M N K / s) / 1e12
  std::int64_t m = 0, n = 0, k = 0;  ///< the shape that reached it
  std::string precision;      ///< as requested
  std::string path;           ///< "SDK matmul f32 (oneDNN)", "SDK matmul bf16 (oneDNN via f32 promotion)", ...
  std::string device_name;    ///< CPU model or GPU name
  std::string library;        ///< "oneDNN 3.0.0", "cuBLASLt 12.8.4"
  int threads = 0;
  int repetitions = 0;        ///< timed GEMM calls over all sizes
  double seconds = 0;         ///< wall time of the calibration
  std::string measured_utc;   ///< "2026-11-26T03:58:12Z"
  std::optional<MachineLoad> load;  ///< how busy the machine was meanwhile
  bool from_cache = false;
  /// "measured: SDK matmul f32 (oneDNN) 2048x2048x2048, 2 threads, oneDNN 2.6.3, 2026-11-26 (cached)"
  std::string describe() const;
};

/// Where the cache lives: $XDG_CACHE_HOME/benchhost/peak.json, else $HOME/.cache/benchhost/peak.json.
std::filesystem::path default_peak_cache_file();

/// The cache key for `r` on this machine and build (Note [Peak cache]).
std::string peak_cache_key(const PeakRequest& r);

/// Measures now (no cache). Unsupported where the device cannot run the precision (tf32 or fp8
/// on the CPU, fp8 before sm_90); DeviceError where the device is missing.
PeakMeasurement measure_peak(const PeakRequest& r);

/// The cached measurement for `r` (mode auto), or a new one written to `cache_file` (auto on a
/// miss, refresh always). `warnings` receives what a user should know (a corrupt cache ignored, a
/// cache that could not be written). Throws what measure_peak throws.
PeakMeasurement calibrated_peak(const PeakRequest& r, CalibrateMode mode, const std::filesystem::path& cache_file,
                                std::vector<std::string>* warnings);

/// measure_peak calls made by this process (tests check that a cached peak is not re-measured).
int peak_measurements_taken();

/// A vendor datasheet's dense peak for a device and precision.
struct DatasheetPeak {
  double tflops = 0;   ///< 0: none known
  std::string source;  ///< "NVIDIA H100 SXM5 datasheet, dense bf16", or why there is none
};
/// GPUs by name (H100 SXM/PCIe, H200, A100, L40S, V100); CPUs have none ("no datasheet peak for
/// this CPU"). `gpu_name` as the CUDA backend reports it.
DatasheetPeak datasheet_peak(const Device& device, const std::string& gpu_name, const std::string& precision);

/// The name the CUDA backend reports for `device` ("NVIDIA H100 80GB HBM3"), "" if none.
std::string gpu_name(const Device& device);

/// Both peaks for a run's records, resolved once per (device, precision, threads) per process.
struct RunPeaks {
  double peak_tflops = 0;      ///< per device; 0: none (then `why`)
  std::string peak_source;
  bool calibration_busy = false;  ///< measured on a busy machine
  std::string why;             ///< why there is no peak_tflops
  std::vector<std::string> warnings;  ///< for the record's message
  DatasheetPeak datasheet;
};
RunPeaks run_peaks(const Settings& s, int local_processes);

struct RunRecord;
/// Sets achieved_tflops, mfu, peak_tflops, peak_source, mfu_datasheet, datasheet_peak_tflops,
/// datasheet_source and the warnings of Note [Calibrated MFU] on a record whose
/// samples_per_second is set. `devices` multiplies the per-device peaks.
void fill_mfu(RunRecord& r, const Settings& s, double flops_per_sample, int devices, int local_processes);
/// The MFU part of fill_mfu for a record whose achieved_tflops is set, given the peaks.
void apply_peaks(RunRecord& r, const RunPeaks& peaks, int devices);

}  // namespace benchhost::host
