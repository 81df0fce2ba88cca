#include "benchhost/device.hpp"

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_map>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "benchhost/error.hpp"

namespace benchhost {

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view num = text.substr(5);
    int idx = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), idx);
    if (ec == std::errc() && p == num.data() + num.size() && idx >= 0) return Device::cuda(idx);
  }
  BH_THROW(InvalidArgument, "bad device '{}': expected cpu, cuda or cuda:N (N >= 0)", text);
}

namespace {

// Note [CPU allocator]
// 64-byte aligned (one cache line, the widest AVX-512 vector) so oneDNN and vectorised loops
// never see a split load at the start of a tensor. Blocks of 256 KiB and more are cached: glibc
// serves them with mmap and returns them with munmap, so a training step that frees and
// re-allocates its activations pays a page fault for every 4 KiB page it touches again (about a
// sixth of a transformer block's time when measured). Freed large blocks go to a size-ordered
// free list and are reused for any request within 1/8 of their size; the cache is bounded
// (kMaxCachedBytes) and is returned to the system before an allocation is reported as failed.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) bytes = 1;
    const std::size_t rounded = round(bytes);
    void* p = nullptr;
    if (rounded >= kCacheMin) {
      std::lock_guard lock(mu_);
      auto it = free_.lower_bound(rounded);
      if (it != free_.end() && it->first <= rounded + rounded / 8) {
        p = it->second;
        cached_bytes_ -= it->first;
        sizes_[p] = it->first;
        free_.erase(it);
      }
    }
    if (!p) p = fresh(rounded, bytes);
    std::size_t now = current_.fetch_add(bytes) + bytes;
    std::size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {}
    ++allocs_;
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    if (!ptr) return;
    if (bytes == 0) bytes = 1;
    current_.fetch_sub(bytes);
    if (round(bytes) >= kCacheMin) {
      std::lock_guard lock(mu_);
      auto it = sizes_.find(ptr);
      if (it != sizes_.end()) {
        const std::size_t size = it->second;
        sizes_.erase(it);
        if (cached_bytes_ + size <= kMaxCachedBytes) {
          free_.emplace(size, ptr);
          cached_bytes_ += size;
          return;
        }
      }
    }
    std::free(ptr);
  }
  MemoryStats stats() const override {
    std::lock_guard lock(mu_);
    // reserved: bytes handed out plus bytes held in the cache.
    return {current_.load(), peak_.load(), current_.load() + cached_bytes_, allocs_.load()};
  }
  void reset_peak() override { peak_.store(current_.load()); }
  void empty_cache() override { release_cache(); }

 private:
  static constexpr std::size_t kCacheMin = 256 << 10;
  static constexpr std::size_t kMaxCachedBytes = std::size_t(4) << 30;
  static std::size_t round(std::size_t b) {
    return b < kCacheMin ? (b + 63) / 64 * 64 : (b + (64 << 10) - 1) / (64 << 10) * (64 << 10);
  }
  void* fresh(std::size_t rounded, std::size_t bytes) {
    void* p = std::aligned_alloc(64, rounded);
    if (!p && rounded >= kCacheMin) {
      release_cache();
      p = std::aligned_alloc(64, rounded);
    }
    if (!p) {
      throw OutOfMemory(fmt::format("CPU allocation of {} bytes ({:.2f} GiB) failed: host memory "
                                    "exhausted ({} bytes in use by benchhost)",
                                    bytes, bytes / 1073741824.0, current_.load()),
                        bytes, __FILE__, __LINE__);
    }
    if (rounded >= kCacheMin) {
      std::lock_guard lock(mu_);
      sizes_[p] = rounded;
    }
    return p;
  }
  void release_cache() {
    std::lock_guard lock(mu_);
    for (auto& [size, p] : free_) {
      std::free(p);
    }
    free_.clear();
    cached_bytes_ = 0;
  }

  std::atomic<std::size_t> current_{0}, peak_{0}, allocs_{0};
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> free_;             // cached large blocks by size
  std::unordered_map<void*, std::size_t> sizes_;       // live large blocks -> rounded size
  std::size_t cached_bytes_ = 0;
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "unknown CPU";
}

class CpuBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::cpu; }
  int device_count() const override { return 1; }
  Allocator& allocator(int) override { return alloc_; }
  Allocator& host_pinned_allocator() override { return alloc_; }
  void copy(void* dst, Device, const void* src, Device, std::size_t bytes, StreamHandle) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize(int, StreamHandle) override {}
  StreamHandle create_stream(int) override { return nullptr; }
  void destroy_stream(int, StreamHandle) override {}
  std::string describe(int) const override {
    return fmt::format("{} ({} hardware threads)", cpu_model_name(),
                       std::thread::hardware_concurrency());
  }

 private:
  CpuAllocator alloc_;
};

struct Registry {
  std::mutex mu;
  std::array<DeviceBackend*, kNumDeviceTypes> backends{};
  std::array<std::string, kNumDeviceTypes> load_error{};
  bool cuda_load_tried = false;
};

Registry& registry() {
  static Registry r;
  // Never destroyed: tensors held by other static objects may be freed after main() returns.
  static CpuBackend* cpu = new CpuBackend;
  static bool init = [] {
    r.backends[static_cast<int>(DeviceType::cpu)] = cpu;
    return true;
  }();
  (void)init;
  return r;
}

// Directory holding libbenchhost_sdk.so, so the CUDA library beside it is found wherever the
// SDK is installed.
std::string sdk_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&sdk_library_dir), &info) && info.dli_fname) {
    std::string path = info.dli_fname;
    auto slash = path.rfind('/');
    if (slash != std::string::npos) return path.substr(0, slash + 1);
  }
  return {};
}

void try_load_cuda(Registry& r) {
  if (r.cuda_load_tried) return;
  r.cuda_load_tried = true;
#ifdef BENCHHOST_BUILT_WITH_CUDA
  // Only next to this library, by full path: a bare name would search LD_LIBRARY_PATH and run
  // paths, where a stray copy (or an empty entry: the current directory) could stand in.
  const std::string dir = sdk_library_dir();
  if (dir.empty()) {
    r.load_error[static_cast<int>(DeviceType::cuda)] =
        "the CUDA backend library could not be loaded: the directory of libbenchhost_sdk is unknown";
    return;
  }
  std::string candidates[] = {dir + "libbenchhost_sdk_cuda.so"};
  std::string errors;
  for (const auto& c : candidates) {
    // The library's static initialiser calls register_device_backend(); the lock is released
    // around dlopen for that reason (see device_backend()).
    r.mu.unlock();
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    r.mu.lock();
    if (h) return;
    const char* e = dlerror();
    errors += fmt::format("\n  {}: {}", c, e ? e : "unknown error");
  }
  r.load_error[static_cast<int>(DeviceType::cuda)] =
      "the CUDA backend library could not be loaded:" + errors;
#else
  r.load_error[static_cast<int>(DeviceType::cuda)] =
      "this benchhost was built without CUDA (configure with -DBENCHHOST_CUDA=ON on a machine "
      "with the CUDA toolkit and cuDNN)";
#endif
}

}  // namespace

void register_device_backend(DeviceBackend* backend) {
  Registry& r = registry();
  // Called from a library initialiser, possibly while device_backend() waits in dlopen.
  r.backends[static_cast<int>(backend->type())] = backend;
}

DeviceBackend& device_backend(DeviceType type) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  auto idx = static_cast<int>(type);
  if (!r.backends[idx] && type == DeviceType::cuda) try_load_cuda(r);
  if (!r.backends[idx]) {
    BH_THROW(Unsupported, "device type {} is not available: {}",
             type == DeviceType::cuda ? "cuda" : "cpu", r.load_error[idx]);
  }
  return *r.backends[idx];
}

bool device_available(Device device, std::string* why) {
  try {
    DeviceBackend& b = device_backend(device.type);
    int n = b.device_count();
    if (device.index >= n) {
      if (why) {
        std::string reason = b.unavailable_reason();
        *why = fmt::format("{} requested but {} {} device(s) are visible{}{}", device.str(), n,
                           device.is_cuda() ? "cuda" : "cpu", reason.empty() ? "" : ": ", reason);
      }
      return false;
    }
    return true;
  } catch (const Error& e) {
    if (why) *why = e.message();
    return false;
  }
}

void synchronize(Device d) { device_backend(d.type).synchronize(d.index); }

}  // namespace benchhost
