// Memory budgets for fit checks (Note [Memory budgets], memory_budget.hpp).
#include "benchhost/memory_budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace benchhost {

namespace {

namespace fs = std::filesystem;

// The first number in a file; 0 when absent, unreadable or "max" (no limit).
double read_number(const fs::path& p) {
  std::ifstream in(p);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() ? v : 0;
}

double meminfo_kib(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k, unit;
  double kib = 0;
  while (in >> k >> kib >> unit)
    if (k == key) return kib;
  return 0;
}

}  // namespace

namespace detail {

MemoryBudget cgroup_memory(const std::string& proc_self_cgroup, const std::string& sysfs_cgroup_root) {
  // cgroup v2: "0::/path"; v1: "N:memory:/path" (or a list of controllers containing memory).
  std::string v2_path, v1_path;
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
    std::istringstream cs(controllers);
    for (std::string c; std::getline(cs, c, ',');)
      if (c == "memory") v1_path = path;
  }
  const fs::path root = sysfs_cgroup_root;
  // Walk from the process's cgroup up to the root: the tightest limit anywhere above applies.
  auto tightest = [&](const fs::path& base, const std::string& rel, const char* limit_file, const char* usage_file) {
    MemoryBudget best;
    fs::path dir = fs::path(rel).relative_path();
    for (;;) {
      const double limit = read_number(base / dir / limit_file);
      // cgroup v1 writes "no limit" as a huge page-rounded number.
      if (limit > 0 && limit < 1e18 && (best.capacity_bytes == 0 || limit < best.capacity_bytes)) {
        best.capacity_bytes = limit;
        best.available_bytes = std::max(0.0, limit - read_number(base / dir / usage_file));
        best.source = fmt::format("cgroup {} limit", (fs::path("/") / dir).lexically_normal().string());
      }
      if (dir.empty()) break;
      dir = dir.parent_path();
    }
    return best;
  };
  if (!v2_path.empty()) {
    MemoryBudget b = tightest(root, v2_path, "memory.max", "memory.current");
    if (b.capacity_bytes > 0) return b;
  }
  if (!v1_path.empty()) return tightest(root / "memory", v1_path, "memory.limit_in_bytes", "memory.usage_in_bytes");
  return {};
}

}  // namespace detail

MemoryBudget memory_budget(Device device) {
  MemoryBudget b;
  if (device.is_cuda()) {
    try {
      for (const auto& [k, v] : device_backend(DeviceType::cuda).environment())
        if (k == fmt::format("gpu{}_memory_bytes", device.index)) b.capacity_bytes = b.available_bytes = std::stod(v);
    } catch (const std::exception&) {
    }
    b.source = device.str();
    return b;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  b.capacity_bytes = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
  b.available_bytes = meminfo_kib("MemAvailable:") * 1024.0;
  b.source = "host memory (MemAvailable)";
  std::ifstream in("/proc/self/cgroup");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const MemoryBudget cg = detail::cgroup_memory(text, "/sys/fs/cgroup");
  if (cg.capacity_bytes > 0 && (b.capacity_bytes == 0 || cg.capacity_bytes < b.capacity_bytes)) b.capacity_bytes = cg.capacity_bytes;
  if (cg.capacity_bytes > 0 && (b.available_bytes == 0 || cg.available_bytes < b.available_bytes)) {
    b.available_bytes = cg.available_bytes;
    b.source = cg.source;
  }
  return b;
}

}  // namespace benchhost
