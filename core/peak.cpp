#include "peak.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"
#include "benchhost/threading.hpp"
#include "benchhost/version.hpp"
#include "cli.hpp"
#include "environment.hpp"
#include "events.hpp"
#include "reporters.hpp"

namespace benchhost::host {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<int> g_measurements{0};

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

// The CUDA backend's environment() value for `key` ("" when absent or no GPU).
std::string cuda_fact(const std::string& key) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) return {};
  try {
    for (const auto& [k, v] : device_backend(DeviceType::cuda).environment())
      if (k == key) return v;
  } catch (...) {
  }
  return {};
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Square sizes that saturate the device, smallest first: on a CPU oneDNN's GEMM is compute-bound
// from ~1k on (it blocks for the caches), on a GPU it takes ~8k to fill every SM's tensor cores.
// Not larger: the calibration runs while the workload holds its device memory (8192^2 f32 operands
// and output are 768 MiB).
std::vector<std::int64_t> default_sizes(const Device& d) {
  if (d.is_cpu()) return {512, 1024, 2048};
  return {4096, 8192};
}

// Random values in [-1, 1): constant inputs let some GPUs run cooler and faster than real data.
Tensor random_matrix(std::int64_t rows, std::int64_t cols, std::uint64_t seed, const Device& device) {
  Tensor t = Tensor::empty({rows, cols}, DType::f32, Device::cpu());
  Rng rng(seed);
  nn::init::uniform_(t, rng, -1.0f, 1.0f);
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

CalibrateMode parse_calibrate_mode(const std::string& name) {
  if (name == "auto") return CalibrateMode::auto_;
  if (name == "refresh") return CalibrateMode::refresh;
  if (name == "off") return CalibrateMode::off;
  BH_THROW(InvalidArgument, "option --calibrate-peak: '{}' is not one of auto, refresh, off", name);
}

const char* calibrate_mode_name(CalibrateMode m) noexcept {
  switch (m) {
    case CalibrateMode::auto_: return "auto";
    case CalibrateMode::refresh: return "refresh";
    case CalibrateMode::off: return "off";
  }
  return "auto";
}

std::string PeakMeasurement::describe() const {
  std::string s = fmt::format("measured: {} {}x{}x{}, {} thread{}, {}, {}{}", path, m, n, k, threads,
                              threads == 1 ? "" : "s", library, measured_utc.substr(0, 10),
                              from_cache ? " (cached)" : "");
  if (load && load->busy) s += "; the machine was busy meanwhile, so this peak is low and MFU against it high";
  return s;
}

fs::path default_peak_cache_file() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
    return fs::path(xdg) / "benchhost" / "peak.json";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "benchhost" / "peak.json";
  return fs::temp_directory_path() / "benchhost" / "peak.json";
}

std::string gpu_name(const Device& device) {
  if (!device.is_cuda()) return {};
  return cuda_fact(fmt::format("gpu{}_name", device.index));
}

std::string peak_cache_key(const PeakRequest& r) {
  std::string dev, lib;
  if (r.device.is_cpu()) {
    dev = "cpu " + cpu_model();
    lib = onednn_version();
  } else {
    dev = fmt::format("{} {} {} MHz", r.device.str(), gpu_name(r.device),
                      cuda_fact(fmt::format("gpu{}_clock_mhz", r.device.index)));
    lib = "cuBLASLt " + cuda_fact("cublaslt");
  }
  return fmt::format("{} | {} threads | {} | benchhost {} {}{} | {}", dev, r.threads, r.precision,
                     BENCHHOST_VERSION_STRING, BENCHHOST_GIT_REVISION, BENCHHOST_GIT_DIRTY ? "-dirty" : "", lib);
}

PeakMeasurement measure_peak(const PeakRequest& r) {
  ++g_measurements;
  const PrecisionPolicy policy = PrecisionPolicy::create(r.precision, r.device);  // Unsupported: tf32/fp8 on CPU
  const OpPrecision& mm = policy.op(OpClass::matmul);
  PeakMeasurement out;
  out.precision = r.precision;
  out.threads = r.threads;
  if (r.device.is_cpu()) {
    out.device_name = cpu_model();
    out.library = onednn_version();
    out.path = policy.emulated() ? fmt::format("SDK matmul {} (oneDNN f32 via f32 promotion)", dtype_name(mm.storage))
                                 : "SDK matmul f32 (oneDNN)";
    if (r.threads > 0) set_num_threads(r.threads);
  } else {
    out.device_name = gpu_name(r.device);
    out.library = "cuBLASLt " + cuda_fact("cublaslt");
    out.path = mm.fp8_scaled ? "SDK matmul_fp8 e4m3 x e4m3 -> bf16 (cuBLASLt)"
                             : fmt::format("SDK matmul {}{} (cuBLASLt)", dtype_name(mm.storage),
                                           mm.tf32 ? " tf32" : "");
  }
  const auto math = policy.math_scope();
  const std::vector<std::int64_t> sizes = r.sizes.empty() ? default_sizes(r.device) : r.sizes;
  const LoadWindow load(r.local_processes);
  const auto begin = Clock::now();
  // Each size gets an equal share of the time; a repetition on the GPU is a batch of calls between
  // two synchronisations, so launch gaps do not count against it.
  const double share = r.target_seconds / static_cast<double>(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::int64_t n = sizes[i];
    const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    // A size whose one call would take longer than its share at the rate seen so far is left out
    // (a slow or busy CPU): its warm-up and two timed calls would overrun the budget threefold.
    if (i > 0 && out.tflops > 0 && flops / (out.tflops * 1e12) > share) break;
    Tensor a32 = random_matrix(n, n, 11 + i, r.device), b32 = random_matrix(n, n, 23 + i, r.device);
    std::function<void()> gemm;
    Tensor a, b, a_inv, b_inv;
    if (mm.fp8_scaled) {
      const Tensor one = Tensor::full({1}, 1.0, DType::f32, r.device);
      a = nn::fp8_cast_scaled(a32, one, DType::f8e4m3);
      b = nn::fp8_cast_scaled(b32, one, DType::f8e4m3);
      a_inv = b_inv = one;
      gemm = [&] { (void)nn::matmul_fp8(a, b, a_inv, b_inv, DType::bf16); };
    } else {
      a = mm.storage == DType::f32 ? a32 : nn::cast(a32, mm.storage);
      b = mm.storage == DType::f32 ? b32 : nn::cast(b32, mm.storage);
      gemm = [&] { (void)nn::matmul(a, b); };
    }
    gemm();  // primitive / heuristic creation and first-touch, untimed
    synchronize(r.device);
    int calls = 1;
    const auto size_begin = Clock::now();
    for (int rep = 0; rep < 2 || std::chrono::duration<double>(Clock::now() - size_begin).count() < share; ++rep) {
      const auto t0 = Clock::now();
      for (int c = 0; c < calls; ++c) gemm();
      synchronize(r.device);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      out.repetitions += calls;
      const double tflops = flops * calls / s / 1e12;
      if (tflops > out.tflops) {
        out.tflops = tflops;
        out.m = out.n = out.k = n;
      }
      // GPU: grow the batch until a repetition takes ~10 ms, so timer and launch noise stay small.
      if (!r.device.is_cpu() && s < 0.01 && calls < 1024) calls *= 2;
      if (rep > 10000) break;
    }
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  out.load = load.finish();
  out.measured_utc = utc_now();
  return out;
}

int peak_measurements_taken() { return g_measurements.load(); }

namespace {

nlohmann::json to_json(const PeakMeasurement& m) {
  nlohmann::json j{{"tflops", m.tflops},       {"m", m.m},
                   {"n", m.n},                 {"k", m.k},
                   {"precision", m.precision}, {"path", m.path},
                   {"device_name", m.device_name}, {"library", m.library},
                   {"threads", m.threads},     {"repetitions", m.repetitions},
                   {"seconds", m.seconds},     {"measured_utc", m.measured_utc}};
  if (m.load)
    j["machine_load"] = {{"cpus", m.load->cpus},
                         {"seconds", m.load->seconds},
                         {"other_cpus", m.load->other_cpus},
                         {"steal_fraction", m.load->steal_fraction},
                         {"load_average", m.load->load_average},
                         {"busy", m.load->busy}};
  return j;
}

PeakMeasurement from_json(const nlohmann::json& j) {
  PeakMeasurement m;
  m.tflops = j.at("tflops").get<double>();
  m.m = j.at("m").get<std::int64_t>();
  m.n = j.at("n").get<std::int64_t>();
  m.k = j.at("k").get<std::int64_t>();
  m.precision = j.at("precision").get<std::string>();
  m.path = j.at("path").get<std::string>();
  m.device_name = j.at("device_name").get<std::string>();
  m.library = j.at("library").get<std::string>();
  m.threads = j.at("threads").get<int>();
  m.repetitions = j.at("repetitions").get<int>();
  m.seconds = j.at("seconds").get<double>();
  m.measured_utc = j.at("measured_utc").get<std::string>();
  if (j.contains("machine_load")) {
    const auto& l = j["machine_load"];
    MachineLoad load;
    load.cpus = l.at("cpus").get<int>();
    load.seconds = l.at("seconds").get<double>();
    load.other_cpus = l.at("other_cpus").get<double>();
    load.steal_fraction = l.at("steal_fraction").get<double>();
    load.load_average = l.at("load_average").get<double>();
    load.busy = l.at("busy").get<bool>();
    m.load = load;
  }
  if (!(std::isfinite(m.tflops) && m.tflops > 0))
    BH_THROW(InvalidArgument, "tflops {} is not a positive rate", m.tflops);
  m.from_cache = true;
  return m;
}

// An flock on `<cache>.lock` for the read-merge-write of Note [Peak cache]; released on destruction.
class CacheLock {
 public:
  explicit CacheLock(const fs::path& cache) {
    std::error_code ec;
    fs::create_directories(cache.parent_path(), ec);
    fd_ = ::open((cache.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

// The cache's entries; an unreadable or corrupt file gives none and a warning.
nlohmann::json read_entries(const fs::path& cache, std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!fs::exists(cache, ec)) return nlohmann::json::object();
  try {
    std::ifstream in(cache);
    std::stringstream text;
    text << in.rdbuf();
    const auto j = nlohmann::json::parse(text.str());
    const auto& entries = j.at("entries");
    if (!entries.is_object()) BH_THROW(InvalidArgument, "'entries' is not an object");
    return entries;
  } catch (const std::exception& e) {
    if (warnings)
      warnings->push_back(fmt::format("ignoring the corrupt peak cache {} ({}); it is rewritten with this measurement",
                                      cache.string(), e.what()));
    return nlohmann::json::object();
  }
}

}  // namespace

PeakMeasurement calibrated_peak(const PeakRequest& r, CalibrateMode mode, const fs::path& cache_file,
                                std::vector<std::string>* warnings) {
  const std::string key = peak_cache_key(r);
  std::optional<PeakMeasurement> cached_busy;
  if (mode == CalibrateMode::auto_) {
    CacheLock lock(cache_file);
    std::vector<std::string> read_warnings;
    const nlohmann::json entries = read_entries(cache_file, &read_warnings);
    if (entries.contains(key)) {
      try {
        PeakMeasurement cached = from_json(entries[key]);
        if (!(cached.load && cached.load->busy)) return cached;
        cached_busy = std::move(cached);  // Note [Peak cache]: measured again
      } catch (const std::exception& e) {
        read_warnings.push_back(fmt::format("ignoring the corrupt entry for this machine in the peak cache {} ({}); "
                                            "it is re-measured", cache_file.string(), e.what()));
      }
    }
    if (warnings) warnings->insert(warnings->end(), read_warnings.begin(), read_warnings.end());
  }
  PeakMeasurement m = measure_peak(r);
  // A busy machine only lowers a peak: a quiet measurement replaces a busy cached one, and of two
  // busy ones the higher stays.
  if (cached_busy && m.load && m.load->busy && cached_busy->tflops >= m.tflops) return *cached_busy;
  try {
    CacheLock lock(cache_file);
    nlohmann::json entries = read_entries(cache_file, mode == CalibrateMode::auto_ ? nullptr : warnings);
    entries[key] = to_json(m);
    nlohmann::json file{{"format", "benchhost peak cache 1"}, {"entries", entries}};
    write_file_atomically(cache_file, file.dump(2) + "\n");
  } catch (const std::exception& e) {
    if (warnings) warnings->push_back(fmt::format("the measured peak could not be cached: {}", e.what()));
  }
  return m;
}

DatasheetPeak datasheet_peak(const Device& device, const std::string& gpu, const std::string& precision) {
  DatasheetPeak d;
  if (device.is_cpu()) {
    d.source = "no datasheet peak for this CPU";
    return d;
  }
  // Dense (no sparsity) tensor-core peaks, TFLOP/s, from NVIDIA's product datasheets; fp32 is
  // the CUDA-core rate. More specific names first ("H100 PCIe" before "H100").
  struct Row {
    const char* match;
    const char* datasheet;
    double fp32, tf32, fp16, bf16, fp8;
  };
  static const Row table[] = {
      {"H100 PCIe", "NVIDIA H100 PCIe datasheet", 51.2, 378, 756, 756, 1513},
      {"H100", "NVIDIA H100 SXM5 datasheet", 67, 494.7, 989.4, 989.4, 1978.9},
      {"H200", "NVIDIA H200 SXM datasheet", 67, 494.7, 989.4, 989.4, 1978.9},
      {"A100", "NVIDIA A100 SXM datasheet", 19.5, 156, 312, 312, 0},
      {"L40S", "NVIDIA L40S datasheet", 91.6, 183, 362, 362, 733},
      {"V100", "NVIDIA V100 SXM2 datasheet", 15.7, 0, 125, 0, 0}};
  for (const auto& row : table) {
    if (gpu.find(row.match) == std::string::npos) continue;
    const double v = precision == "fp32"   ? row.fp32
                     : precision == "tf32" ? row.tf32
                     : precision == "fp16" ? row.fp16
                     : precision == "bf16" ? row.bf16
                     : precision == "fp8"  ? row.fp8
                                           : 0;
    if (v > 0) {
      d.tflops = v;
      d.source = fmt::format("{}, dense {}", row.datasheet, precision);
    } else {
      d.source = fmt::format("the {} gives no {} peak", row.datasheet, precision);
    }
    return d;
  }
  d.source = fmt::format("no datasheet peak known for GPU '{}'", gpu.empty() ? "unknown" : gpu);
  return d;
}

RunPeaks run_peaks(const Settings& s, int local_processes) {
  static std::mutex mutex;
  static std::map<std::string, RunPeaks> resolved;
  const Device device = parse_device(s.device);
  const std::string memo =
      fmt::format("{}|{}|{}|{}|{}", s.device, s.precision, s.threads, s.peak_tflops, s.calibrate_peak);
  std::lock_guard<std::mutex> guard(mutex);
  if (auto it = resolved.find(memo); it != resolved.end()) return it->second;
  RunPeaks p;
  p.datasheet = datasheet_peak(device, gpu_name(device), s.precision);
  if (s.peak_tflops > 0) {
    p.peak_tflops = s.peak_tflops;
    p.peak_source = fmt::format("--peak-tflops {} (given on the command line)", s.peak_tflops);
  } else if (parse_calibrate_mode(s.calibrate_peak) == CalibrateMode::off) {
    p.why = "peak calibration is off (--calibrate-peak off) and no --peak-tflops was given";
  } else {
    PeakRequest req;
    req.device = device;
    req.precision = s.precision;
    req.threads = s.threads;
    req.local_processes = local_processes;
    try {
      const PeakMeasurement m =
          calibrated_peak(req, parse_calibrate_mode(s.calibrate_peak), default_peak_cache_file(), &p.warnings);
      p.peak_tflops = m.tflops;
      p.peak_source = m.describe();
      p.calibration_busy = m.load && m.load->busy;
      if (p.calibration_busy)
        p.warnings.push_back(fmt::format("the peak was calibrated on a busy machine ({}); rerun with --calibrate-peak "
                                         "refresh on an idle machine", m.load->describe()));
    } catch (const std::exception& e) {
      p.why = fmt::format("the peak could not be calibrated: {}", e.what());
    }
  }
  resolved[memo] = p;
  return p;
}

void fill_mfu(RunRecord& r, const Settings& s, double flops_per_sample, int devices, int local_processes) {
  if (!r.samples_per_second) return;
  if (flops_per_sample <= 0) {
    r.mfu_note = "the plugin declares no FLOPs per sample";
    return;
  }
  r.achieved_tflops = flops_per_sample * *r.samples_per_second / 1e12;
  apply_peaks(r, run_peaks(s, local_processes), devices);
}

void apply_peaks(RunRecord& r, const RunPeaks& p, int devices) {
  const double achieved = r.achieved_tflops.value_or(0) * 1e12;
  std::vector<std::string> notes = p.warnings;
  r.datasheet_source = p.datasheet.source;
  if (p.datasheet.tflops > 0) {
    r.datasheet_peak_tflops = p.datasheet.tflops;
    r.mfu_datasheet = achieved / (p.datasheet.tflops * 1e12 * devices);
    if (*r.mfu_datasheet > 1)
      notes.push_back(fmt::format("MFU against the datasheet peak is {:.1f}% (above 100%): the FLOPs per sample or the "
                                  "datasheet figure is wrong", *r.mfu_datasheet * 100));
  }
  if (p.peak_tflops > 0) {
    r.peak_tflops = p.peak_tflops;
    r.peak_source = p.peak_source;
    r.mfu = achieved / (p.peak_tflops * 1e12 * devices);
    if (*r.mfu > 1)
      notes.push_back(fmt::format("MFU is {:.1f}% (above 100% of the peak, {}): the FLOPs per sample overcount or the "
                                  "peak is too low", *r.mfu * 100, p.peak_source));
    if (p.datasheet.tflops > 0 && p.peak_tflops > p.datasheet.tflops)
      notes.push_back(fmt::format("the peak {:.4g} TFLOP/s is above the datasheet's {:.4g} TFLOP/s ({})", p.peak_tflops,
                                  p.datasheet.tflops, p.datasheet.source));
  } else {
    r.mfu_note = p.why;
  }
  for (const auto& n : notes) r.message += (r.message.empty() ? "" : "; ") + n;
}

}  // namespace benchhost::host
