#pragma once
/// @file device.hpp  Devices, allocators and the per-device-type backend registry.
///
/// Note [Device backends]
/// Device code is registered per device type, like c10's DeviceGuardImplInterface: the CPU
/// backend is built into libbenchhost_sdk; the CUDA backend lives in libbenchhost_sdk_cuda.so,
/// which device_backend(DeviceType::cuda) loads on first use. A machine without CUDA, or without a
/// GPU driver, gets an Unsupported error that says why, never a crash.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace benchhost {

enum class DeviceType : std::uint8_t { cpu = 0, cuda = 1 };
constexpr int kNumDeviceTypes = 2;

/// A device: type plus index ("cpu", "cuda:0").
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  ///< "cpu" or "cuda:N"
  friend bool operator==(const Device&, const Device&) = default;
};

/// Parse "cpu", "cuda" (= cuda:0) or "cuda:N". Throws InvalidArgument.
Device parse_device(std::string_view text);

/// Memory statistics of one allocator, in bytes.
struct MemoryStats {
  std::size_t current_bytes = 0;   ///< bytes handed out and not yet freed
  std::size_t peak_bytes = 0;      ///< high-water mark of current_bytes
  std::size_t reserved_bytes = 0;  ///< bytes held from the system (>= current for caching allocators)
  std::size_t num_allocs = 0;      ///< number of allocate() calls
};

/// An allocator for one device. Thread-safe. allocate() throws OutOfMemory (with the requested
/// size) on failure; it never returns nullptr for bytes > 0.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  /// Return cached blocks to the system (no-op for non-caching allocators).
  virtual void empty_cache() {}
};

/// Opaque stream handle (cudaStream_t on CUDA, nullptr = default stream / CPU).
using StreamHandle = void*;

/// What a device type provides. Implementations are singletons owned by the registry.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual DeviceType type() const = 0;
  virtual int device_count() const = 0;
  /// Why device_count() is 0 (no driver, no device), for error messages; "" when devices exist.
  virtual std::string unavailable_reason() const { return {}; }
  virtual Allocator& allocator(int index) = 0;
  /// Pinned (page-locked) host memory for fast transfers; CPU backend returns the CPU allocator.
  virtual Allocator& host_pinned_allocator() = 0;
  /// Copy bytes: src and dst may be on this device type or on the host (src_dev/dst_dev say which).
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, std::size_t bytes,
                    StreamHandle stream = nullptr) = 0;
  /// Block until all work queued on the device (or on `stream`, if given) has finished.
  virtual void synchronize(int index, StreamHandle stream = nullptr) = 0;
  virtual StreamHandle create_stream(int index) = 0;
  virtual void destroy_stream(int index, StreamHandle stream) = 0;
  /// Human description: "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90" / CPU model.
  virtual std::string describe(int index) const = 0;
  /// Versions of the libraries this backend actually loaded and device facts, for the report's
  /// environment fingerprint: {"cuda_runtime": "13.0", "cudnn": "9.13.0", "gpu_name": ...}.
  virtual std::vector<std::pair<std::string, std::string>> environment() const { return {}; }
};

/// The backend for a device type (loads the CUDA library on first use). Throws Unsupported.
DeviceBackend& device_backend(DeviceType type);
/// Whether the backend can be had here (no exception; `why` receives the reason if not).
bool device_available(Device device, std::string* why = nullptr);
/// Called by a backend library at load time.
void register_device_backend(DeviceBackend* backend);

/// Shorthands.
inline Allocator& allocator_for(Device d) { return device_backend(d.type).allocator(d.index); }
void synchronize(Device d);

}  // namespace benchhost
