#include "environment.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <boost/version.hpp>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/tbb/version.h>

#include "benchhost/device.hpp"
#include "benchhost/version.hpp"

namespace benchhost::host {

using nlohmann::ordered_json;

const std::vector<std::string>& environment_allow_list() {
  static const std::vector<std::string> list{
      "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES", "KMP_BLOCKTIME",
      "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_ALGO", "NCCL_PROTO",
      "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE",
      "DNNL_CPU_RUNTIME", "ONEDNN_MAX_CPU_ISA", "BENCHHOST_PLUGIN_PATH"};
  return list;
}

namespace {
std::string os_pretty_name() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "unknown";
}

long long mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

int physical_cores() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, phys, core;
  std::set<std::string> ids;
  while (std::getline(in, line)) {
    auto value = [&] { auto c = line.find(':'); return c == std::string::npos ? std::string() : line.substr(c + 2); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) {
      core = value();
      ids.insert(phys + "/" + core);
    }
  }
  return static_cast<int>(ids.size());
}
}  // namespace

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "unknown";
}

ordered_json environment_fingerprint(const std::vector<PluginVersion>& plugins) {
  ordered_json env;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  env["host"] = host;
  struct utsname u {};
  uname(&u);
  env["cpu"] = {{"model", cpu_model()},
                {"logical_cores", std::thread::hardware_concurrency()},
                {"physical_cores", physical_cores()},
                {"architecture", u.machine}};
  env["memory_bytes"] = mem_total_bytes();
  env["os"] = os_pretty_name();
  env["kernel"] = fmt::format("{} {}", u.sysname, u.release);
#if defined(__clang__)
  env["compiler"] = fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  env["compiler"] = fmt::format("gcc {}", __VERSION__);
#else
  env["compiler"] = "unknown";
#endif
  env["benchhost"] = {{"version", BENCHHOST_VERSION_STRING},
                      {"git_revision", BENCHHOST_GIT_REVISION},
                      {"git_dirty", BENCHHOST_GIT_DIRTY != 0},
                      {"abi", fmt::format("{}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR)}};
  ordered_json pl = ordered_json::array();
  for (const auto& p : plugins) pl.push_back({{"name", p.name}, {"version", p.version}, {"abi", p.abi}, {"path", p.path}});
  env["plugins"] = pl;
  // Versions of the libraries actually loaded (runtime queries where the library offers one).
  const dnnl_version_t* dv = dnnl_version();
  ordered_json libs;
  libs["onetbb"] = TBB_runtime_version();
  libs["onednn"] = fmt::format("{}.{}.{}{}", dv->major, dv->minor, dv->patch,
                               dv->hash && *dv->hash ? fmt::format(" ({})", dv->hash) : std::string());
  libs["fmt"] = fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100);
  libs["boost"] = fmt::format("{}.{}.{}", BOOST_VERSION / 100000, BOOST_VERSION / 100 % 1000, BOOST_VERSION % 100);
  libs["nlohmann_json"] = fmt::format("{}.{}.{}", NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR,
                                      NLOHMANN_JSON_VERSION_PATCH);
  env["libraries"] = libs;
  ordered_json cuda = ordered_json::object();
  std::string why;
  if (device_available(Device::cuda(0), &why)) {
    try {
      for (const auto& [k, v] : device_backend(DeviceType::cuda).environment()) cuda[k] = v;
    } catch (const std::exception& e) {
      cuda["error"] = e.what();
    }
  } else {
    cuda["available"] = false;
    cuda["reason"] = why;
  }
  env["cuda"] = cuda;
  ordered_json vars = ordered_json::object();
  for (const auto& name : environment_allow_list())
    if (const char* v = std::getenv(name.c_str())) vars[name] = v;
  env["environment_variables"] = vars;
  return env;
}

// Note [Threads of a run]
// --threads (default: the machine's hardware threads, shared among a node's ranks) is what a plugin
// hands set_num_threads in setup: oneTBB's global limit and the OpenMP team of the thread that calls
// it. OpenMP teams started from other threads (a DataLoader worker that calls an op) take
// OMP_NUM_THREADS, read once when libgomp loads; so a supervised worker, a fresh process, gets
// OMP_NUM_THREADS=--threads unless the user set it, and every pool agrees on one number. Under a
// launcher or --no-isolation the process is already running: there the user's environment stands.
// The OpenMP wait policy is left to the user (libgomp's default spins for a while, then sleeps):
// which is faster depends on the workload and on what else runs (results/cpu/), and the report
// records it, with how busy the machine was (Note [A busy machine]).
std::vector<std::string> worker_threading_environment(const Settings& s) {
  std::vector<std::string> env;
  if (!std::getenv("OMP_NUM_THREADS")) env.push_back(fmt::format("OMP_NUM_THREADS={}", s.threads));
  return env;
}

ordered_json threading_settings(const Settings& s, bool supervised) {
  auto var = [](const char* name, const std::string& otherwise) -> ordered_json {
    const char* v = std::getenv(name);
    return v ? ordered_json(v) : ordered_json(otherwise);
  };
  const bool host_sets_omp = supervised && !std::getenv("OMP_NUM_THREADS");
  return {{"threads", s.threads},
          {"threads_given", s.threads_given},
          {"omp_num_threads", host_sets_omp ? ordered_json(std::to_string(s.threads))
                                            : var("OMP_NUM_THREADS", "unset: every hardware thread")},
          {"omp_num_threads_set_by_host", host_sets_omp},
          {"omp_wait_policy", var("OMP_WAIT_POLICY", "unset: libgomp spins for a while, then sleeps")},
          {"gomp_spincount", var("GOMP_SPINCOUNT", "unset")},
          {"hardware_threads", static_cast<int>(std::thread::hardware_concurrency())}};
}

}  // namespace benchhost::host
