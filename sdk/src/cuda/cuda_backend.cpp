// The CUDA device backend: caching device allocator, pinned host allocator, copies, streams and
// the environment facts of the loaded CUDA libraries. Built into libbenchhost_sdk_cuda.so, which
// registers this backend from a static initialiser when the SDK loads it (Note [Device backends]).
#include <cublasLt.h>
#include <cudnn.h>
#include <cuda_runtime.h>
#ifdef BENCHHOST_HAVE_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "benchhost/device.hpp"
#include "cuda/cuda_check.hpp"

namespace benchhost {
namespace {

// Free blocks by size and live blocks by pointer, with the figures MemoryStats reports. Shared
// by the device and the pinned-host allocators; not thread-safe: the owner holds its mutex.
struct BlockCache {
  std::multimap<std::size_t, void*> free_blocks;
  std::unordered_map<void*, std::size_t> live;
  MemoryStats stats;

  /// A cached block of size in [size, size + slack], now live; nullptr if none fits.
  void* take(std::size_t size, std::size_t slack) {
    auto it = free_blocks.lower_bound(size);
    if (it == free_blocks.end() || it->first > size + slack) return nullptr;
    void* p = it->second;
    const std::size_t block = it->first;
    free_blocks.erase(it);
    note_live(p, block);
    return p;
  }
  /// A block just obtained from the system.
  void add_fresh(void* p, std::size_t size) {
    stats.reserved_bytes += size;
    note_live(p, size);
  }
  /// Back into the cache; unknown pointers are ignored.
  void give_back(void* p) {
    auto it = live.find(p);
    if (it == live.end()) return;
    stats.current_bytes -= it->second;
    free_blocks.emplace(it->second, p);
    live.erase(it);
  }
  /// Return every cached block to the system through `release_fn(ptr)`.
  template <class F>
  void release(F&& release_fn) {
    for (auto& [size, p] : free_blocks) {
      release_fn(p);
      stats.reserved_bytes -= size;
    }
    free_blocks.clear();
  }

 private:
  void note_live(void* p, std::size_t size) {
    live[p] = size;
    stats.current_bytes += size;
    stats.peak_bytes = std::max(stats.peak_bytes, stats.current_bytes);
    ++stats.num_allocs;
  }
};

// The lock and cache plumbing both allocators share; subclasses implement allocate() and how
// cached blocks go back to the system.
class CachingAllocatorBase : public Allocator {
 public:
  void deallocate(void* ptr, std::size_t) noexcept override {
    if (!ptr) return;
    std::lock_guard lock(mu_);
    cache_.give_back(ptr);
  }
  MemoryStats stats() const override {
    std::lock_guard lock(mu_);
    return cache_.stats;
  }
  void reset_peak() override {
    std::lock_guard lock(mu_);
    cache_.stats.peak_bytes = cache_.stats.current_bytes;
  }

 protected:
  mutable std::mutex mu_;
  BlockCache cache_;
};

// Note [Caching allocator]
// cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, far too much for
// the per-step activations of a training loop. Freed blocks are kept in a size-ordered free list
// per device and handed out again for any request that fits within 25% slack (large blocks) or
// exactly by 512-byte size class (small blocks). Blocks are never split: simpler, and the
// workloads here allocate the same shapes every step, so reuse is near perfect after step one.
// On cudaMalloc failure the cache is returned to the driver and the allocation retried once;
// if that fails too, OutOfMemory carries the requested size and the allocator's figures.
class CudaCachingAllocator final : public CachingAllocatorBase {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}
  ~CudaCachingAllocator() override = default;  // the driver reclaims memory at exit

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) bytes = 1;
    const std::size_t rounded = round(bytes);
    std::lock_guard lock(mu_);
    if (void* p = cache_.take(rounded, rounded < kSmall ? 0 : rounded / 4)) return p;
    void* p = nullptr;
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    cudaError_t err = cudaMalloc(&p, rounded);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the error state before retrying
      release_cached_locked();
      err = cudaMalloc(&p, rounded);
    }
    if (prev >= 0) cudaSetDevice(prev);
    if (err != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw OutOfMemory(
          fmt::format("cuda:{} out of memory: tried to allocate {} bytes ({:.2f} GiB); {} bytes in "
                      "use by benchhost, {} reserved, device has {} free of {} ({})",
                      device_, bytes, bytes / 1073741824.0, cache_.stats.current_bytes,
                      cache_.stats.reserved_bytes, free_b, total_b, cudaGetErrorString(err)),
          bytes, __FILE__, __LINE__);
    }
    cache_.add_fresh(p, rounded);
    return p;
  }

  void empty_cache() override {
    std::lock_guard lock(mu_);
    release_cached_locked();
  }

 private:
  static constexpr std::size_t kSmall = 1 << 20;
  static std::size_t round(std::size_t b) {
    if (b < kSmall) return (b + 511) / 512 * 512;
    return (b + (2 << 20) - 1) / (2 << 20) * (2 << 20);  // 2 MiB granules for large blocks
  }
  void release_cached_locked() {
    int prev = -1;
    cudaGetDevice(&prev);
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    cache_.release([](void* p) { cudaFree(p); });
    if (prev >= 0) cudaSetDevice(prev);
  }

  int device_;
};

// Page-locked host memory for H2D copies that overlap compute. Cached like device blocks, since
// cudaHostAlloc is even slower than cudaMalloc.
class PinnedHostAllocator final : public CachingAllocatorBase {
 public:
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) bytes = 1;
    std::lock_guard lock(mu_);
    if (void* p = cache_.take(bytes, bytes / 4)) return p;
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw OutOfMemory(fmt::format("pinned host allocation of {} bytes failed: {}", bytes,
                                    cudaGetErrorString(err)), bytes, __FILE__, __LINE__);
    }
    cache_.add_fresh(p, bytes);
    return p;
  }
  void empty_cache() override {
    std::lock_guard lock(mu_);
    cache_.release([](void* p) { cudaFreeHost(p); });
  }
};

std::string version_str(int v, int major_div, int minor_div, int minor_mod) {
  return fmt::format("{}.{}", v / major_div, (v / minor_div) % minor_mod);
}

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend() {
    cudaError_t err = cudaGetDeviceCount(&count_);
    if (err != cudaSuccess) {
      cudaGetLastError();
      count_ = 0;
      why_ = cudaGetErrorString(err);
    }
    for (int i = 0; i < count_; ++i) allocators_.push_back(std::make_unique<CudaCachingAllocator>(i));
  }
  DeviceType type() const override { return DeviceType::cuda; }
  int device_count() const override { return count_; }
  std::string unavailable_reason() const override { return why_; }
  Allocator& allocator(int index) override {
    BH_CHECK_AS(Unsupported, index >= 0 && index < count_,
                "cuda:{} requested but {} CUDA device(s) are visible{}{}", index, count_,
                why_.empty() ? "" : ": ", why_);
    return *allocators_[static_cast<std::size_t>(index)];
  }
  Allocator& host_pinned_allocator() override { return pinned_; }
  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes,
            StreamHandle stream) override {
    if (bytes == 0) return;
    cudaMemcpyKind kind = cudaMemcpyDefault;  // unified addressing tells the direction
    if (dst_dev.is_cuda()) BH_CHECK_CUDA(cudaSetDevice(dst_dev.index));
    else if (src_dev.is_cuda()) BH_CHECK_CUDA(cudaSetDevice(src_dev.index));
    if (stream) {
      // A side stream (cudaStreamNonBlocking) does not wait for the legacy default stream, where
      // the ops run (Note [CUDA op streams]). The caching allocator hands out a block as soon as
      // it is freed, while ops queued on the default stream may still use it, and the source may
      // still be being written there: so the copy first waits for the work queued there so far.
      cudaEvent_t queued = nullptr;
      BH_CHECK_CUDA(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
      cudaError_t wait_for_default_stream = cudaEventRecord(queued, cudaStreamLegacy);
      if (wait_for_default_stream == cudaSuccess)
        wait_for_default_stream = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), queued, 0);
      cudaEventDestroy(queued);
      BH_CHECK_CUDA(wait_for_default_stream);
      BH_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(stream)));
    } else {
      BH_CHECK_CUDA(cudaMemcpy(dst, src, bytes, kind));
    }
  }
  void synchronize(int index, StreamHandle stream) override {
    BH_CHECK_CUDA(cudaSetDevice(index));
    if (stream) BH_CHECK_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    else BH_CHECK_CUDA(cudaDeviceSynchronize());
  }
  StreamHandle create_stream(int index) override {
    BH_CHECK_CUDA(cudaSetDevice(index));
    cudaStream_t s = nullptr;
    BH_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void destroy_stream(int index, StreamHandle stream) override {
    cudaSetDevice(index);
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  std::string describe(int index) const override {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, index) != cudaSuccess) return fmt::format("cuda:{} (unavailable)", index);
    return fmt::format("{}, {:.1f} GiB, sm_{}{}, {} SMs", p.name, p.totalGlobalMem / 1073741824.0,
                       p.major, p.minor, p.multiProcessorCount);
  }
  std::vector<std::pair<std::string, std::string>> environment() const override {
    std::vector<std::pair<std::string, std::string>> env;
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    env.emplace_back("cuda_runtime", version_str(rt, 1000, 10, 100));
    env.emplace_back("cuda_driver", drv ? version_str(drv, 1000, 10, 100) : "none");
    std::size_t cudnn = cudnnGetVersion();
    env.emplace_back("cudnn", fmt::format("{}.{}.{}", cudnn / 10000, (cudnn / 100) % 100, cudnn % 100));
    std::size_t lt = cublasLtGetVersion();
    env.emplace_back("cublaslt", fmt::format("{}.{}.{}", lt / 10000, (lt / 100) % 100, lt % 100));
#ifdef BENCHHOST_HAVE_NCCL
    int nccl = 0;
    if (ncclGetVersion(&nccl) == ncclSuccess)
      env.emplace_back("nccl", fmt::format("{}.{}.{}", nccl / 10000, (nccl / 100) % 100, nccl % 100));
#endif
    env.emplace_back("gpu_count", std::to_string(count_));
    for (int i = 0; i < count_; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
      int clock_khz = 0, mem_clock_khz = 0;
      cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, i);
      cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, i);
      std::string prefix = fmt::format("gpu{}_", i);
      env.emplace_back(prefix + "name", p.name);
      env.emplace_back(prefix + "memory_bytes", std::to_string(p.totalGlobalMem));
      env.emplace_back(prefix + "compute_capability", fmt::format("{}.{}", p.major, p.minor));
      env.emplace_back(prefix + "sm_count", std::to_string(p.multiProcessorCount));
      env.emplace_back(prefix + "clock_mhz", std::to_string(clock_khz / 1000));
      env.emplace_back(prefix + "memory_clock_mhz", std::to_string(mem_clock_khz / 1000));
    }
    if (!why_.empty()) env.emplace_back("cuda_error", why_);
    return env;
  }

 private:
  int count_ = 0;
  std::string why_;
  std::vector<std::unique_ptr<CudaCachingAllocator>> allocators_;
  PinnedHostAllocator pinned_;
};

struct Registrar {
  Registrar() {
    static CudaBackend backend;
    register_device_backend(&backend);
  }
} registrar;

}  // namespace
}  // namespace benchhost
