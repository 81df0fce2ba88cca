#include "benchhost/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

namespace benchhost {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    // Past a zero dimension too, so a shape of no elements can still overflow here.
    BH_CHECK_AS(InvalidArgument, !__builtin_mul_overflow(s, shape[i], &s),
                "shape {} has more elements than any memory holds", shape_str(shape));
  }
  return st;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Storage::Storage(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  allocator_ = &allocator_for(device);
  data_ = allocator_->allocate(bytes);
}

Storage::Storage(void* data, std::size_t bytes, Device device, std::shared_ptr<void> keep_alive)
    : data_(data), bytes_(bytes), device_(device), keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, bytes_);
}

namespace {

// Dimensions are non-negative, and the product of the non-zero ones stays far inside int64 so that
// numel, byte sizes and contiguous strides (which multiply past a zero dimension) cannot overflow.
void check_shape(const Shape& shape) {
  std::int64_t product = 1;
  for (auto s : shape) {
    BH_CHECK_AS(InvalidArgument, s >= 0, "negative dimension in shape {}", shape_str(shape));
    BH_CHECK_AS(InvalidArgument, !__builtin_mul_overflow(product, std::max<std::int64_t>(s, 1), &product) &&
                                     product <= (std::int64_t{1} << 56),
                "shape {} has more elements than any memory holds", shape_str(shape));
  }
}

// Read/write one element of any dtype as double (CPU only).
double load(const void* p, DType t) {
  switch (t) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::f64: return *static_cast<const double*>(p);
    case DType::f16: return half_to_float(*static_cast<const std::uint16_t*>(p));
    case DType::bf16: return bf16_to_float(*static_cast<const std::uint16_t*>(p));
    case DType::f8e4m3: return e4m3_to_float(*static_cast<const std::uint8_t*>(p));
    case DType::f8e5m2: return e5m2_to_float(*static_cast<const std::uint8_t*>(p));
    case DType::i32: return *static_cast<const std::int32_t*>(p);
    case DType::i64: return static_cast<double>(*static_cast<const std::int64_t*>(p));
    case DType::u8: return *static_cast<const std::uint8_t*>(p);
    case DType::boolean: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0;
}

// A double to an integer type: NaN is 0 and values out of range clamp to the nearest end (a cast of
// an out-of-range double is undefined behaviour; found by fuzz_idx through a label file).
template <class I>
I saturate(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

void store(void* p, DType t, double v) {
  switch (t) {
    case DType::f32: *static_cast<float*>(p) = static_cast<float>(v); break;
    case DType::f64: *static_cast<double*>(p) = v; break;
    case DType::f16: *static_cast<std::uint16_t*>(p) = float_to_half(static_cast<float>(v)); break;
    case DType::bf16: *static_cast<std::uint16_t*>(p) = float_to_bf16(static_cast<float>(v)); break;
    case DType::f8e4m3: *static_cast<std::uint8_t*>(p) = float_to_e4m3(static_cast<float>(v)); break;
    case DType::f8e5m2: *static_cast<std::uint8_t*>(p) = float_to_e5m2(static_cast<float>(v)); break;
    case DType::i32: *static_cast<std::int32_t*>(p) = saturate<std::int32_t>(v); break;
    case DType::i64: *static_cast<std::int64_t*>(p) = saturate<std::int64_t>(v); break;
    case DType::u8: *static_cast<std::uint8_t*>(p) = saturate<std::uint8_t>(v); break;
    case DType::boolean: *static_cast<bool*>(p) = v != 0; break;
  }
}

// Visit every element offset (in elements, relative to the tensor's first element) in row-major
// order of the logical shape.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, F&& f) {
  const std::int64_t n = shape_numel(shape);
  if (n == 0) return;
  const std::size_t d = shape.size();
  std::vector<std::int64_t> idx(d, 0);
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (std::size_t k = d; k-- > 0;) {
      if (++idx[k] < shape[k]) {
        off += strides[k];
        break;
      }
      off -= strides[k] * (shape[k] - 1);
      idx[k] = 0;
    }
  }
}

}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, std::int64_t offset_elems, Shape shape,
               Shape strides, DType dtype)
    : storage_(std::move(storage)), offset_(offset_elems), shape_(std::move(shape)),
      strides_(std::move(strides)), dtype_(dtype) {
  BH_CHECK(shape_.size() == strides_.size(), "shape {} and strides {} differ in rank",
           shape_str(shape_), shape_str(strides_));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  auto bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(bytes, device);
  return Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

template <class T>
static Tensor from_host(const std::vector<T>& values, const Shape& shape, Device device) {
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(values.size()) == shape_numel(shape),
              "{} values do not fill shape {}", values.size(), shape_str(shape));
  Tensor host = Tensor::empty(shape, dtype_of<T>(), Device::cpu());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  return device.is_cpu() ? host : host.to(device);
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, Device d) { return from_host(v, s, d); }
Tensor Tensor::from_vector_i64(const std::vector<std::int64_t>& v, const Shape& s, Device d) { return from_host(v, s, d); }
Tensor Tensor::from_vector_i32(const std::vector<std::int32_t>& v, const Shape& s, Device d) { return from_host(v, s, d); }

std::int64_t Tensor::size(std::int64_t d) const {
  std::int64_t nd = dim();
  if (d < 0) d += nd;
  BH_CHECK_AS(InvalidArgument, d >= 0 && d < nd, "dimension {} out of range for {}", d, describe());
  return shape_[static_cast<std::size_t>(d)];
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  BH_CHECK(storage_, "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<std::int64_t>(element_size());
}

void Tensor::check_dtype(DType want) const {
  BH_CHECK_AS(InvalidArgument, dtype_ == want, "tensor has dtype {} but {} was requested",
              dtype_name(dtype_), dtype_name(want));
}

double Tensor::item(std::initializer_list<std::int64_t> index) const {
  BH_CHECK(device().is_cpu(), "item() needs a CPU tensor, got {}", describe());
  BH_CHECK_AS(InvalidArgument, index.size() == shape_.size() || (index.size() == 0 && numel() == 1),
              "item(): {} indices for a {}-d tensor", index.size(), dim());
  std::int64_t off = 0;
  std::size_t k = 0;
  for (auto i : index) {
    BH_CHECK_AS(InvalidArgument, i >= 0 && i < shape_[k], "index {} out of range in dim {} of {}",
                i, k, describe());
    off += i * strides_[k++];
  }
  return load(static_cast<const char*>(raw_data()) + off * static_cast<std::int64_t>(element_size()), dtype_);
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<float> out(static_cast<std::size_t>(host.numel()));
  const char* base = static_cast<const char*>(host.raw_data());
  const auto es = static_cast<std::int64_t>(host.element_size());
  if (host.dtype() == DType::f32 && host.is_contiguous()) {
    if (!out.empty()) std::memcpy(out.data(), base, out.size() * sizeof(float));
    return out;
  }
  for_each_offset(host.shape_, host.strides_, [&](std::int64_t i, std::int64_t off) {
    out[static_cast<std::size_t>(i)] = static_cast<float>(load(base + off * es, host.dtype()));
  });
  return out;
}

Tensor Tensor::view(Shape shape) const {
  BH_CHECK_AS(InvalidArgument, is_contiguous(), "view() of a non-contiguous tensor {}; use reshape()",
              describe());
  std::int64_t known = 1;
  int infer = -1;
  Shape given = shape;  // with the -1 as 1, checked so that the products below cannot overflow
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      BH_CHECK_AS(InvalidArgument, infer < 0, "view(): more than one -1 in {}", shape_str(shape));
      infer = static_cast<int>(i);
      given[i] = 1;
    }
  }
  check_shape(given);
  for (std::size_t i = 0; i < shape.size(); ++i)
    if (static_cast<int>(i) != infer) known *= shape[i];
  if (infer >= 0) {
    BH_CHECK_AS(InvalidArgument, known != 0 && numel() % known == 0,
                "view(): cannot infer -1 in {} for {} elements", shape_str(shape), numel());
    shape[static_cast<std::size_t>(infer)] = numel() / known;
  }
  BH_CHECK_AS(InvalidArgument, shape_numel(shape) == numel(), "view(): shape {} does not match {}",
              shape_str(shape), describe());
  return Tensor(storage_, offset_, shape, contiguous_strides(shape), dtype_);
}

Tensor Tensor::reshape(Shape shape) const {
  return is_contiguous() ? view(std::move(shape)) : contiguous().view(std::move(shape));
}

static std::int64_t wrap_dim(std::int64_t d, std::int64_t nd, const Tensor& t) {
  if (d < 0) d += nd;
  BH_CHECK_AS(InvalidArgument, d >= 0 && d < nd, "dimension out of range for {}", t.describe());
  return d;
}

Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  a = wrap_dim(a, dim(), *this);
  b = wrap_dim(b, dim(), *this);
  Shape sh = shape_, st = strides_;
  std::swap(sh[a], sh[b]);
  std::swap(st[a], st[b]);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& order) const {
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(order.size()) == dim(),
              "permute(): {} dims given for {}", order.size(), describe());
  Shape sh(order.size()), st(order.size());
  std::vector<bool> seen(order.size(), false);
  for (std::size_t i = 0; i < order.size(); ++i) {
    auto d = wrap_dim(order[i], dim(), *this);
    BH_CHECK_AS(InvalidArgument, !seen[d], "permute(): dimension {} repeated", d);
    seen[d] = true;
    sh[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end) const {
  d = wrap_dim(d, dim(), *this);
  BH_CHECK_AS(InvalidArgument, 0 <= start && start <= end && end <= shape_[d],
              "slice [{}, {}) out of range for dim {} of {}", start, end, d, describe());
  Shape sh = shape_;
  sh[d] = end - start;
  return Tensor(storage_, offset_ + start * strides_[d], sh, strides_, dtype_);
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrap_dim(d, dim(), *this);
  BH_CHECK_AS(InvalidArgument, 0 <= index && index < shape_[d], "select index {} out of range for {}",
              index, describe());
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, offset_ + index * strides_[d], sh, st, dtype_);
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  if (d < 0) d += dim() + 1;
  BH_CHECK_AS(InvalidArgument, d >= 0 && d <= dim(), "unsqueeze dim out of range for {}", describe());
  Shape sh = shape_, st = strides_;
  std::int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::flatten(std::int64_t start, std::int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), *this);
  end = wrap_dim(end, dim(), *this);
  Shape sh(shape_.begin(), shape_.begin() + start);
  std::int64_t m = 1;
  for (auto i = start; i <= end; ++i) m *= shape_[i];
  sh.push_back(m);
  sh.insert(sh.end(), shape_.begin() + end + 1, shape_.end());
  return reshape(sh);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, d);
  DeviceBackend& b = device_backend(d.is_cpu() ? src.device().type : d.type);
  b.copy(out.raw_data(), d, src.raw_data(), src.device(), nbytes());
  return out;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype_) return *this;
  BH_CHECK_AS(Unsupported, device().is_cpu(), "dtype conversion of device tensors goes through the "
              "cast op (nn/ops.hpp), not Tensor::to: {}", describe());
  Tensor out = empty(shape_, t, device());
  out.copy_(*this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  BH_CHECK_AS(InvalidArgument, src.shape_ == shape_, "copy_: shape {} into {}", shape_str(src.shape_),
              shape_str(shape_));
  if (numel() == 0) return;
  if (src.dtype_ == dtype_ && src.is_contiguous() && is_contiguous()) {
    Device dd = device(), sd = src.device();
    DeviceBackend& b = device_backend(dd.is_cpu() ? sd.type : dd.type);
    b.copy(raw_data(), dd, src.raw_data(), sd, nbytes());
    return;
  }
  BH_CHECK_AS(Unsupported, device().is_cpu() && src.device().is_cpu(),
              "strided or converting copy between {} and {} must go through the device's ops",
              src.describe(), describe());
  char* dst = static_cast<char*>(raw_data());
  const char* s = static_cast<const char*>(src.raw_data());
  const auto des = static_cast<std::int64_t>(element_size());
  const auto ses = static_cast<std::int64_t>(src.element_size());
  // Gather source offsets in logical order, then scatter into destination order.
  std::vector<std::int64_t> src_off(static_cast<std::size_t>(numel()));
  for_each_offset(src.shape_, src.strides_, [&](std::int64_t i, std::int64_t off) { src_off[i] = off; });
  if (src.dtype_ == dtype_) {
    for_each_offset(shape_, strides_, [&](std::int64_t i, std::int64_t off) {
      std::memcpy(dst + off * des, s + src_off[i] * ses, static_cast<std::size_t>(des));
    });
  } else {
    for_each_offset(shape_, strides_, [&](std::int64_t i, std::int64_t off) {
      store(dst + off * des, dtype_, load(s + src_off[i] * ses, src.dtype_));
    });
  }
}

// Note [Device fill]
// The device backend interface has copies but no memset, so a device tensor is filled by copying
// one small host chunk of the value and then doubling the filled prefix with device-to-device
// copies: log2(numel / chunk) copies and no host buffer the size of the tensor (zeroing a large
// gradient each step stays cheap). Copies on the default stream keep the order with the ops.
void Tensor::fill_(double value) {
  if (numel() == 0) return;
  if (!device().is_cpu()) {
    BH_CHECK_AS(Unsupported, is_contiguous(), "fill_ of a strided device tensor {}: fill a contiguous one",
                describe());
    constexpr std::int64_t kChunk = 16384;
    const std::int64_t n = numel(), first = std::min(n, kChunk);
    const auto es = static_cast<std::int64_t>(element_size());
    Tensor host = full({first}, value, dtype_, Device::cpu());
    DeviceBackend& b = device_backend(device().type);
    char* dst = static_cast<char*>(raw_data());
    b.copy(dst, device(), host.raw_data(), Device::cpu(), static_cast<std::size_t>(first * es));
    for (std::int64_t done = first; done < n;) {
      const std::int64_t step = std::min(done, n - done);
      b.copy(dst + done * es, device(), dst, device(), static_cast<std::size_t>(step * es));
      done += step;
    }
    return;
  }
  char* base = static_cast<char*>(raw_data());
  const auto es = static_cast<std::int64_t>(element_size());
  if (is_contiguous() && dtype_ == DType::f32) {
    std::fill_n(reinterpret_cast<float*>(base), numel(), static_cast<float>(value));
    return;
  }
  std::vector<char> one(static_cast<std::size_t>(es));
  store(one.data(), dtype_, value);
  for_each_offset(shape_, strides_, [&](std::int64_t, std::int64_t off) {
    std::memcpy(base + off * es, one.data(), static_cast<std::size_t>(es));
  });
}

void Tensor::zero_() {
  if (numel() == 0) return;
  if (is_contiguous() && device().is_cpu()) {
    std::memset(raw_data(), 0, nbytes());
    return;
  }
  fill_(0.0);
}

std::string Tensor::describe() const {
  if (!defined()) return "Tensor[undefined]";
  return fmt::format("Tensor[{}, {}, {}]", dtype_name(dtype_), device().str(), shape_str(shape_));
}

}  // namespace benchhost
