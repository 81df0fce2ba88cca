// Samples, collation and the in-memory TensorDataset.
#include "benchhost/data/dataset.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "data/internal.hpp"

#include <fmt/ranges.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace benchhost::data {

TensorDict::TensorDict(std::initializer_list<std::pair<std::string, Tensor>> fields) {
  for (const auto& [name, value] : fields) set(name, value);
}

void TensorDict::set(std::string name, Tensor value) {
  for (auto& f : fields_) {
    if (f.first == name) {
      f.second = std::move(value);
      return;
    }
  }
  fields_.emplace_back(std::move(name), std::move(value));
}

bool TensorDict::has(std::string_view name) const {
  for (const auto& f : fields_)
    if (f.first == name) return true;
  return false;
}

const Tensor& TensorDict::at(std::string_view name) const {
  for (const auto& f : fields_)
    if (f.first == name) return f.second;
  BH_THROW(InvalidArgument, "no field '{}' in {{{}}}", name, fmt::join(names(), ", "));
}

Tensor& TensorDict::at(std::string_view name) {
  return const_cast<Tensor&>(static_cast<const TensorDict*>(this)->at(name));
}

std::vector<std::string> TensorDict::names() const {
  std::vector<std::string> out;
  out.reserve(fields_.size());
  for (const auto& f : fields_) out.push_back(f.first);
  return out;
}

std::string TensorDict::describe() const {
  std::string out;
  for (const auto& [name, t] : fields_) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{}: {} {}", name, t.defined() ? dtype_name(t.dtype()) : "undefined",
                       t.defined() ? shape_str(t.shape()) : "");
  }
  return out;
}

void check_index(std::int64_t index, std::int64_t size) {
  if (index < 0 || index >= size)
    BH_THROW(InvalidArgument, "index {} out of range for a dataset of {}", index, size);
}

Tensor empty_host(const Shape& shape, DType dtype, Allocator* alloc) {
  if (alloc == nullptr) return Tensor::empty(shape, dtype);
  // The checks Tensor::empty makes: no negative dimension, and a byte count that cannot overflow
  // (a batch of n samples multiplies a sample's size by n).
  std::int64_t product = 1;
  for (const auto d : shape) {
    BH_CHECK_AS(InvalidArgument, d >= 0, "negative dimension in shape {}", shape_str(shape));
    BH_CHECK_AS(InvalidArgument, !__builtin_mul_overflow(product, std::max<std::int64_t>(d, 1), &product) &&
                                     product <= (std::int64_t{1} << 56),
                "shape {} has more elements than any memory holds", shape_str(shape));
  }
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* ptr = bytes ? alloc->allocate(bytes) : nullptr;
  std::shared_ptr<void> owner(ptr, [alloc, bytes](void* p) {
    if (p) alloc->deallocate(p, bytes);
  });
  auto storage = std::make_shared<Storage>(ptr, bytes, Device::cpu(), std::move(owner));
  return Tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

std::string errno_message(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (which may not be buf).
  return std::string(strerror_r(err, buf, sizeof buf));
}

TensorDict collate(const std::vector<Sample>& samples) { return collate_into(samples, nullptr); }

TensorDict collate_into(const std::vector<Sample>& samples, Allocator* alloc) {
  if (samples.empty()) BH_THROW(InvalidArgument, "collate: no samples");
  const Sample& first = samples.front();
  TensorDict out;
  const auto n = static_cast<std::int64_t>(samples.size());
  for (const auto& [name, proto] : first.fields()) {
    BH_CHECK_AS(DataError, proto.defined(), "collate: field '{}' of sample 0 is undefined", name);
    Shape shape{n};
    shape.insert(shape.end(), proto.shape().begin(), proto.shape().end());
    Tensor batch = empty_host(shape, proto.dtype(), alloc);
    const std::size_t bytes = proto.nbytes();
    auto* dst = static_cast<std::uint8_t*>(batch.raw_data());
    // Validate every sample first (serially: the first mismatch in order is the one reported).
    for (std::int64_t i = 0; i < n; ++i) {
      const Sample& s = samples[static_cast<std::size_t>(i)];
      if (!s.has(name))
        BH_THROW(DataError, "collate: sample {} of the batch has no field '{}' (it has {{{}}})", i,
                 name, fmt::join(s.names(), ", "));
      const Tensor& t = s.at(name);
      if (t.shape() != proto.shape() || t.dtype() != proto.dtype())
        BH_THROW(DataError,
                 "collate: field '{}' of sample {} is {} {} but sample 0 has {} {}; pad samples to "
                 "one shape or give the loader a collate function",
                 name, i, dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(proto.dtype()),
                 shape_str(proto.shape()));
      BH_CHECK_AS(DataError, t.device().is_cpu(), "collate: field '{}' of sample {} is on {}",
                  name, i, t.device().str());
    }
    // Note [Collate copies]
    // The copy runs in the loader's serial output stage, so a large batch (images: ~600 KB a
    // sample) is copied by a tbb::parallel_for inside the loader's arena: threads that are
    // between samples take part, and the serial stage does not cap the loader's throughput.
    const std::string& field = name;  // a structured binding is not captured by clang < 16
    auto copy_one = [&](std::int64_t i) {
      const Tensor& t = samples[static_cast<std::size_t>(i)].at(field);
      if (t.is_contiguous()) {
        if (bytes) std::memcpy(dst + static_cast<std::size_t>(i) * bytes, t.raw_data(), bytes);
      } else {
        batch.select(0, i).copy_(t);
      }
    };
    if (static_cast<std::size_t>(n) * bytes >= (std::size_t{1} << 20) && n > 1) {
      tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n), [&](const tbb::blocked_range<std::int64_t>& r) {
        for (std::int64_t i = r.begin(); i < r.end(); ++i) copy_one(i);
      });
    } else {
      for (std::int64_t i = 0; i < n; ++i) copy_one(i);
    }
    out.set(name, std::move(batch));
  }
  if (samples.size() > 1) {
    for (std::size_t i = 1; i < samples.size(); ++i)
      if (samples[i].size() != first.size())
        BH_THROW(DataError, "collate: sample {} has fields {{{}}} but sample 0 has {{{}}}", i,
                 fmt::join(samples[i].names(), ", "), fmt::join(first.names(), ", "));
  }
  return out;
}

TensorDataset::TensorDataset(TensorDict tensors) : tensors_(std::move(tensors)) {
  if (tensors_.empty()) BH_THROW(InvalidArgument, "TensorDataset: no tensors");
  size_ = -1;
  for (const auto& [name, t] : tensors_.fields()) {
    if (!t.defined() || t.dim() < 1)
      BH_THROW(InvalidArgument, "TensorDataset: field '{}' needs at least one dimension", name);
    if (size_ < 0) size_ = t.size(0);
    if (t.size(0) != size_)
      BH_THROW(InvalidArgument, "TensorDataset: field '{}' has {} rows, the first field has {}",
               name, t.size(0), size_);
  }
}

Sample TensorDataset::get(const SampleContext& ctx) const {
  check_index(ctx.index, size_);
  Sample s;
  for (const auto& [name, t] : tensors_.fields()) s.set(name, t.select(0, ctx.index));
  return s;
}

}  // namespace benchhost::data
