// Synthetic batches and samples (Note [Synthetic sources] in synthetic.hpp).
#include "benchhost/data/synthetic.hpp"

#include <chrono>
#include <cmath>
#include <numeric>

namespace benchhost::data {

namespace {

template <class T>
void fill_int(T* p, std::int64_t n, Rng& rng, double low, double high) {
  const auto lo = static_cast<std::int64_t>(std::ceil(low));
  const auto hi = static_cast<std::int64_t>(std::ceil(high));  // exclusive
  const auto span = static_cast<std::uint64_t>(std::max<std::int64_t>(hi - lo, 1));
  for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(lo + static_cast<std::int64_t>(rng.below(span)));
}

void check_fields(const std::vector<FieldSpec>& fields) {
  if (fields.empty()) BH_THROW(InvalidArgument, "synthetic data: no fields declared");
  for (const auto& f : fields) {
    if (f.name.empty()) BH_THROW(InvalidArgument, "synthetic data: a field has no name");
    for (auto d : f.shape)
      if (d < 0) BH_THROW(InvalidArgument, "synthetic data: field '{}' has shape {}", f.name, shape_str(f.shape));
    if (!(f.high >= f.low))
      BH_THROW(InvalidArgument, "synthetic data: field '{}' has range [{}, {})", f.name, f.low, f.high);
  }
}

}  // namespace

void fill_uniform(Tensor& t, Rng& rng, double low, double high) {
  BH_CHECK_AS(InvalidArgument, t.device().is_cpu() && t.is_contiguous(),
              "fill_uniform needs a contiguous CPU tensor, got {}", t.describe());
  const std::int64_t n = t.numel();
  const auto flo = static_cast<float>(low), fhi = static_cast<float>(high);
  switch (t.dtype()) {
    case DType::f32: { auto* p = t.data<float>(); for (std::int64_t i = 0; i < n; ++i) p[i] = rng.uniform(flo, fhi); break; }
    case DType::f64: { auto* p = t.data<double>(); for (std::int64_t i = 0; i < n; ++i) p[i] = rng.uniform(flo, fhi); break; }
    case DType::f16: { auto* p = static_cast<std::uint16_t*>(t.raw_data()); for (std::int64_t i = 0; i < n; ++i) p[i] = float_to_half(rng.uniform(flo, fhi)); break; }
    case DType::bf16: { auto* p = static_cast<std::uint16_t*>(t.raw_data()); for (std::int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(rng.uniform(flo, fhi)); break; }
    case DType::f8e4m3: { auto* p = static_cast<std::uint8_t*>(t.raw_data()); for (std::int64_t i = 0; i < n; ++i) p[i] = float_to_e4m3(rng.uniform(flo, fhi)); break; }
    case DType::f8e5m2: { auto* p = static_cast<std::uint8_t*>(t.raw_data()); for (std::int64_t i = 0; i < n; ++i) p[i] = float_to_e5m2(rng.uniform(flo, fhi)); break; }
    case DType::i32: fill_int(t.data<std::int32_t>(), n, rng, low, high); break;
    case DType::i64: fill_int(t.data<std::int64_t>(), n, rng, low, high); break;
    case DType::u8: fill_int(t.data<std::uint8_t>(), n, rng, std::max(low, 0.0), std::min(high, 256.0)); break;
    case DType::boolean: { auto* p = static_cast<std::uint8_t*>(t.raw_data()); for (std::int64_t i = 0; i < n; ++i) p[i] = rng.next_u32() & 1u; break; }
  }
}

SyntheticSource::SyntheticSource(std::vector<FieldSpec> fields, std::int64_t batch_size,
                                 std::int64_t batches_per_epoch, Device device, std::uint64_t seed)
    : fields_(std::move(fields)), batch_size_(batch_size), batches_per_epoch_(std::max<std::int64_t>(batches_per_epoch, 0)) {
  check_fields(fields_);
  if (batch_size_ < 1) BH_THROW(InvalidArgument, "synthetic data: batch size {} must be at least 1", batch_size_);
  std::uint64_t stream = 0;
  for (const auto& f : fields_) {
    Shape shape{batch_size_};
    shape.insert(shape.end(), f.shape.begin(), f.shape.end());
    Tensor host = Tensor::empty(shape, f.dtype);
    Rng rng(seed, stream++);
    fill_uniform(host, rng, f.low, f.high);
    tensors_.set(f.name, device.is_cpu() ? host : host.to(device));
  }
  indices_.resize(static_cast<std::size_t>(batch_size_));
  std::iota(indices_.begin(), indices_.end(), std::int64_t{0});
}

void SyntheticSource::start_epoch(std::int64_t epoch, std::int64_t position) {
  if (position < 0) BH_THROW(InvalidArgument, "synthetic data: resume position {} is negative", position);
  epoch_ = epoch;
  batch_in_epoch_ = position / batch_size_;
}

std::optional<Batch> SyntheticSource::next() {
  if (epoch_ < 0) BH_THROW(InvalidArgument, "SyntheticSource::next() called before start_epoch()");
  const auto t0 = std::chrono::steady_clock::now();
  if (batches_per_epoch_ > 0 && batch_in_epoch_ >= batches_per_epoch_) return std::nullopt;
  Batch b;
  b.tensors = tensors_;
  b.indices = indices_;
  b.epoch = epoch_;
  ++batch_in_epoch_;
  b.position = batch_in_epoch_ * batch_size_;
  stats_.batches += 1;
  stats_.samples += batch_size_;
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

SyntheticDataset::SyntheticDataset(std::vector<FieldSpec> fields, std::int64_t size, std::uint64_t seed)
    : fields_(std::move(fields)), size_(size), seed_(seed) {
  check_fields(fields_);
  if (size_ < 0) BH_THROW(InvalidArgument, "synthetic data: dataset size {} is negative", size_);
}

Sample SyntheticDataset::get(const SampleContext& ctx) const {
  check_index(ctx.index, size_);
  Sample s;
  // Stream per (index, field): a sample does not depend on the epoch or on other samples.
  Rng rng(seed_, static_cast<std::uint64_t>(ctx.index));
  for (const auto& f : fields_) {
    Tensor t = Tensor::empty(f.shape, f.dtype);
    fill_uniform(t, rng, f.low, f.high);
    s.set(f.name, std::move(t));
  }
  return s;
}

}  // namespace benchhost::data
