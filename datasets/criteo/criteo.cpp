// MLPerf Criteo multi-hot layout: memory-mapped days, npz members located in place.
#include "criteo.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "benchhost/data/npy.hpp"
#include "benchhost/error.hpp"

namespace benchhost::criteo {

const std::array<std::int64_t, kNumSparse>& mlperf_table_sizes() {
  static const std::array<std::int64_t, kNumSparse> sizes = {
      40000000, 39060, 17295, 7424, 20265, 3,        7122,     1543,     63,
      40000000, 3067956, 405282, 10,  2209,  11938,  155,      4,        976,
      14,       40000000, 40000000, 40000000, 590152, 12973, 108, 36};
  return sizes;
}

const std::array<std::int64_t, kNumSparse>& mlperf_multi_hot_sizes() {
  static const std::array<std::int64_t, kNumSparse> sizes = {
      3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
  return sizes;
}

DayFiles day_files(const std::string& dir, int day) {
  return {fmt::format("{}/day_{}_dense.npy", dir, day), fmt::format("{}/day_{}_labels.npy", dir, day),
          fmt::format("{}/day_{}_sparse_multi_hot.npz", dir, day)};
}

Batch make_batch(std::int64_t rows, const std::vector<std::int64_t>& hotness) {
  Batch b;
  b.dense = Tensor::empty({rows, kNumDense}, DType::f32);
  b.labels = Tensor::empty({rows}, DType::f32);
  for (std::int64_t h : hotness) b.sparse.push_back(Tensor::empty({rows, h}, DType::i32));
  return b;
}

// ---- memory mapping ----

struct MultiHotDay::Mapping {
  std::string path;
  const std::uint8_t* data = nullptr;
  std::size_t bytes = 0;

  explicit Mapping(std::string p) : path(std::move(p)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      BH_THROW(DataError, "cannot open {}: {} (generate data with make_criteo_synthetic, or point "
                          "the data directory at MLPerf's preprocessed Criteo multi-hot files)",
               path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      BH_THROW(DataError, "cannot stat {}: {}", path, std::strerror(e));
    }
    bytes = static_cast<std::size_t>(st.st_size);
    if (bytes > 0) {
      void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        BH_THROW(DataError, "cannot memory-map {} ({} bytes): {}", path, bytes, std::strerror(e));
      }
      data = static_cast<const std::uint8_t*>(p);
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data) ::munmap(const_cast<std::uint8_t*>(data), bytes);
  }
  std::span<const std::uint8_t> span() const { return {data, bytes}; }
};

namespace {

// The members of the sparse .npz, located in place by the SDK's zip reader (every offset checked).
// Only stored members can be mapped; a compressed one is a DataError that says how to fix the file.
std::vector<data::NpzMember> stored_members(std::span<const std::uint8_t> z, const std::string& path) {
  std::vector<data::NpzMember> members = data::npz_members(z, path);
  for (const auto& m : members)
    if (m.method != 0)
      BH_THROW(DataError, "{}: member {} is compressed (zip method {}); the multi-hot layout must "
                          "be written with numpy.savez (stored), not savez_compressed, so it can "
                          "be memory-mapped", path, m.name, m.method);
  return members;
}

}  // namespace

MultiHotDay::MultiHotDay(const std::string& dir, int day) {
  const DayFiles f = day_files(dir, day);
  // Dense features.
  maps_.push_back(std::make_unique<Mapping>(f.dense));
  const auto dh = data::parse_npy_header(maps_.back()->span(), f.dense);
  if (dh.dtype != DType::f32 || dh.shape.size() != 2 || dh.shape[1] != kNumDense)
    BH_THROW(DataError, "{}: expected f32 [N, {}] dense features, got {} {}", f.dense, kNumDense,
             dtype_name(dh.dtype), shape_str(dh.shape));
  rows_ = dh.shape[0];
  dense_ = maps_.back()->data + dh.data_offset;
  // Labels.
  maps_.push_back(std::make_unique<Mapping>(f.labels));
  const auto lh = data::parse_npy_header(maps_.back()->span(), f.labels);
  const bool shape_ok = (lh.shape.size() == 2 && lh.shape[1] == 1) || lh.shape.size() == 1;
  if (!(lh.dtype == DType::i32 || lh.dtype == DType::f32) || !shape_ok)
    BH_THROW(DataError, "{}: expected i32 [N, 1] labels, got {} {}", f.labels,
             dtype_name(lh.dtype), shape_str(lh.shape));
  if (lh.shape[0] != rows_)
    BH_THROW(DataError, "{} has {} rows but {} has {}", f.labels, lh.shape[0], f.dense, rows_);
  labels_f32_ = lh.dtype == DType::f32;
  labels_ = maps_.back()->data + lh.data_offset;
  // Sparse multi-hot members "0" .. "25".
  maps_.push_back(std::make_unique<Mapping>(f.sparse));
  const Mapping& z = *maps_.back();
  const auto members = stored_members(z.span(), f.sparse);
  sparse_.assign(kNumSparse, nullptr);
  hotness_.assign(kNumSparse, 0);
  for (const auto& m : members) {
    std::string key = m.name;
    if (key.size() > 4 && key.ends_with(".npy")) key.resize(key.size() - 4);
    int k = -1;
    try {
      std::size_t used = 0;
      k = std::stoi(key, &used);
      if (used != key.size()) k = -1;
    } catch (...) {
    }
    if (k < 0 || k >= kNumSparse) continue;  // unknown members are ignored
    const std::string where = fmt::format("{} member {}", f.sparse, m.name);
    const auto h = data::parse_npy_header({z.data + m.data_offset, m.size}, where);
    if (h.dtype != DType::i32 || h.shape.size() != 2)
      BH_THROW(DataError, "{}: expected i32 [N, hotness] row ids, got {} {}", where,
               dtype_name(h.dtype), shape_str(h.shape));
    if (h.shape[0] != rows_)
      BH_THROW(DataError, "{} has {} rows but {} has {}", where, h.shape[0], f.dense, rows_);
    sparse_[k] = z.data + m.data_offset + h.data_offset;
    hotness_[k] = h.shape[1];
  }
  for (int k = 0; k < kNumSparse; ++k)
    if (!sparse_[k])
      BH_THROW(DataError, "{} has no member \"{}.npy\" (categorical feature {} of {})", f.sparse, k,
               k, kNumSparse);
}

MultiHotDay::~MultiHotDay() = default;

void MultiHotDay::copy_rows(std::int64_t first, std::int64_t count, Batch& out,
                            std::int64_t out_row, const std::vector<std::int64_t>& table_sizes) const {
  BH_CHECK_AS(InvalidArgument, first >= 0 && count >= 0 && first + count <= rows_,
              "criteo day: rows [{}, {}) outside [0, {})", first, first + count, rows_);
  // Bad values are data errors naming the file and row, not a training run that "passes" on
  // them: a non-finite dense feature (the loss would be NaN or silently off), a label that is not
  // a click or not-click (BCE with a label of 5 goes negative).
  float* dense = out.dense.data<float>() + out_row * kNumDense;
  std::memcpy(dense, dense_ + first * kNumDense * 4, static_cast<std::size_t>(count) * kNumDense * 4);
  for (std::int64_t i = 0; i < count * kNumDense; ++i)
    if (!std::isfinite(dense[i]))
      BH_THROW(DataError, "{} row {}: dense feature {} is {} (the features must be finite)", maps_[0]->path,
               first + i / kNumDense, i % kNumDense, dense[i]);
  float* lab = out.labels.data<float>() + out_row;
  for (std::int64_t i = 0; i < count; ++i) {
    if (labels_f32_) {
      std::memcpy(&lab[i], labels_ + (first + i) * 4, 4);
      if (lab[i] != 0.0f && lab[i] != 1.0f)
        BH_THROW(DataError, "{} row {}: label {} is not 0 or 1", maps_[1]->path, first + i, lab[i]);
    } else {
      std::int32_t v;
      std::memcpy(&v, labels_ + (first + i) * 4, 4);
      if (v != 0 && v != 1) BH_THROW(DataError, "{} row {}: label {} is not 0 or 1", maps_[1]->path, first + i, v);
      lab[i] = static_cast<float>(v);
    }
  }
  for (int k = 0; k < kNumSparse; ++k) {
    const std::int64_t h = hotness_[k];
    std::int32_t* dst = out.sparse[k].data<std::int32_t>() + out_row * h;
    std::memcpy(dst, sparse_[k] + first * h * 4, static_cast<std::size_t>(count * h) * 4);
    const std::int64_t mod = table_sizes[k];
    for (std::int64_t i = 0; i < count * h; ++i) {
      std::int64_t v = dst[i] % mod;
      dst[i] = static_cast<std::int32_t>(v < 0 ? v + mod : v);
    }
  }
}

CriteoMultiHot::CriteoMultiHot(const std::string& dir, int num_days, Split split,
                               std::vector<std::int64_t> table_sizes)
    : table_sizes_(std::move(table_sizes)) {
  BH_CHECK_AS(InvalidArgument, num_days >= 2,
              "criteo: need at least 2 days (training days + the evaluation day), got {}", num_days);
  BH_CHECK_AS(InvalidArgument, static_cast<int>(table_sizes_.size()) == kNumSparse,
              "criteo: need {} table sizes, got {}", kNumSparse, table_sizes_.size());
  for (std::int64_t t : table_sizes_)
    BH_CHECK_AS(InvalidArgument, t > 0 && t <= (std::int64_t{1} << 31),
                "criteo: table size {} must be in [1, 2^31]", t);
  std::vector<int> day_ids;
  if (split == Split::train)
    for (int d = 0; d + 1 < num_days; ++d) day_ids.push_back(d);
  else
    day_ids.push_back(num_days - 1);
  for (int d : day_ids) {
    auto day = std::make_unique<MultiHotDay>(dir, d);
    if (hotness_.empty()) hotness_ = day->hotness();
    if (day->hotness() != hotness_)
      BH_THROW(DataError, "criteo: day {} of {} has different multi-hot sizes than day {}", d, dir,
               day_ids.front());
    std::int64_t begin = 0, end = day->rows();
    if (split == Split::validation) end = (day->rows() + 1) / 2;
    if (split == Split::test) begin = (day->rows() + 1) / 2;
    day_first_.push_back(size_);
    day_begin_.push_back(begin);
    day_end_.push_back(end);
    size_ += end - begin;
    days_.push_back(std::move(day));
  }
}

CriteoMultiHot::~CriteoMultiHot() = default;

void CriteoMultiHot::read_rows(std::int64_t first, std::int64_t count, Batch& out) const {
  BH_CHECK_AS(InvalidArgument, first >= 0 && count >= 0 && first + count <= size_,
              "criteo: samples [{}, {}) outside the split's [0, {})", first, first + count, size_);
  BH_CHECK_AS(InvalidArgument, out.size() >= count && out.sparse.size() == kNumSparse,
              "criteo: the batch holds {} samples, {} requested", out.size(), count);
  std::int64_t done = 0;
  for (std::size_t d = 0; d < days_.size() && done < count; ++d) {
    const std::int64_t day_size = day_end_[d] - day_begin_[d];
    const std::int64_t g = first + done;
    if (g >= day_first_[d] + day_size) continue;
    const std::int64_t local = g - day_first_[d];
    const std::int64_t n = std::min(count - done, day_size - local);
    days_[d]->copy_rows(day_begin_[d] + local, n, out, done, table_sizes_);
    done += n;
  }
}

}  // namespace benchhost::criteo
