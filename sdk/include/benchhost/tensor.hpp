#pragma once
/// @file tensor.hpp  A strided n-dimensional array on a device.
///
/// Ownership: a Tensor shares its Storage (reference counted); views (view, transpose, slice,
/// permute) share storage with their source. Copies of a Tensor object are cheap handles.
/// Threading: a Tensor may be read from many threads; writers must synchronise themselves.
/// Element access through data<T>() is for CPU tensors only (throws for device tensors).

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/dtype.hpp"
#include "benchhost/error.hpp"

namespace benchhost {

using Shape = std::vector<std::int64_t>;

/// Number of elements of a shape (1 for a scalar shape {}).
std::int64_t shape_numel(const Shape& shape);
/// Row-major (C-contiguous) strides of a shape, in elements.
Shape contiguous_strides(const Shape& shape);
/// "[2, 3, 4]"
std::string shape_str(const Shape& shape);

/// A block of device memory. Frees through the allocator it came from.
class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  /// Wrap memory owned elsewhere (e.g. an mmap'd file); `keep_alive` is released with the storage.
  Storage(void* data, std::size_t bytes, Device device, std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for wrapped memory
  std::shared_ptr<void> keep_alive_;
};

class Tensor {
 public:
  Tensor() = default;

  // ---- creation ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = Device::cpu());
  /// Copy host values into a new tensor (on `device`).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor from_vector_i64(const std::vector<std::int64_t>& values, const Shape& shape,
                                Device device = Device::cpu());
  static Tensor from_vector_i32(const std::vector<std::int32_t>& values, const Shape& shape,
                                Device device = Device::cpu());
  /// A tensor over existing storage.
  Tensor(std::shared_ptr<Storage> storage, std::int64_t offset_elems, Shape shape, Shape strides,
         DType dtype);

  // ---- properties ----
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  /// Size of dimension d; negative d counts from the end.
  std::int64_t size(std::int64_t d) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  std::size_t element_size() const { return dtype_size(dtype_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  std::int64_t storage_offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // ---- element access ----
  /// Pointer to the first element (storage base + offset). Checks the dtype for typed access.
  void* raw_data() const;
  template <class T> T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  /// Read one element of a CPU tensor as double (any dtype, any strides). Slow; for tests.
  double item(std::initializer_list<std::int64_t> index = {}) const;
  /// Copy a CPU or device tensor to a host vector<float> (converting from any numeric dtype).
  std::vector<float> to_float_vector() const;

  // ---- views (share storage) ----
  /// New shape with the same elements; requires a contiguous tensor. One dimension may be -1.
  Tensor view(Shape shape) const;
  /// Like view, but copies when the tensor is not contiguous.
  Tensor reshape(Shape shape) const;
  Tensor transpose(std::int64_t a, std::int64_t b) const;
  Tensor permute(const std::vector<std::int64_t>& order) const;
  /// Elements [start, end) along `dim`.
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end) const;
  /// Remove dimension `dim` by selecting `index`.
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;

  // ---- copies ----
  Tensor contiguous() const;
  Tensor clone() const;
  /// Copy to another device (a contiguous copy; returns *this if already there).
  Tensor to(Device device) const;
  /// Convert to another dtype (CPU: direct; device tensors use the device's cast op).
  Tensor to(DType dtype) const;
  /// Copy src into this tensor (same shape; any devices; converts dtype on CPU).
  void copy_(const Tensor& src);
  void fill_(double value);
  void zero_();

  /// "Tensor[f32, cpu, [2, 3]]"
  std::string describe() const;

 private:
  void check_dtype(DType want) const;

  std::shared_ptr<Storage> storage_;
  std::int64_t offset_ = 0;  // in elements
  Shape shape_;
  Shape strides_;  // in elements
  DType dtype_ = DType::f32;
};

}  // namespace benchhost
