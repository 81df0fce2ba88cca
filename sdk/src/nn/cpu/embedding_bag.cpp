// CPU embedding bags: gather + pool forward, sorted scatter backward.
//
// Layout: weight rows are contiguous f32 [R, D]; out / dout are f32 [B, D]. Forward runs one
// oneTBB task per block of bags; each bag's rows are summed in index order in f32 (the same order
// PyTorch's CPU EmbeddingBag uses), then scaled for mean pooling.
//
// Backward groups the N looked-up positions by row: a stable counting sort (O(N + R)) when the
// table is not much larger than N, else a parallel sort of packed (row, position) keys. Each
// unique row is then owned by exactly one task, which adds the gradients of its bags in position
// order: no atomics, and the sums are bitwise independent of the thread count.
#include "benchhost/nn/embedding_bag.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include "benchhost/error.hpp"

namespace benchhost::nn {

const char* bag_pooling_name(BagPooling p) noexcept { return p == BagPooling::sum ? "sum" : "mean"; }

BagPooling parse_bag_pooling(const std::string& name) {
  if (name == "sum") return BagPooling::sum;
  if (name == "mean") return BagPooling::mean;
  BH_THROW(InvalidArgument, "unknown embedding bag pooling '{}' (choose sum or mean)", name);
}

namespace {

// A view of (indices, offsets) as "bag b = positions [begin(b), end(b))" with typed row ids.
struct BagView {
  const void* idx = nullptr;
  bool idx64 = false;
  const std::int64_t* offsets = nullptr;  // null: fixed hotness
  std::int64_t hotness = 0;
  std::int64_t bags = 0;
  std::int64_t total = 0;  // N

  std::int64_t begin(std::int64_t b) const { return offsets ? offsets[b] : b * hotness; }
  std::int64_t end(std::int64_t b) const { return offsets ? offsets[b + 1] : (b + 1) * hotness; }
  std::int64_t row(std::int64_t pos) const {
    return idx64 ? static_cast<const std::int64_t*>(idx)[pos]
                 : static_cast<const std::int32_t*>(idx)[pos];
  }
};

BagView make_view(const Tensor& indices, const Tensor& offsets) {
  BH_CHECK_AS(InvalidArgument, indices.defined(), "embedding bag: indices are undefined");
  BH_CHECK_AS(InvalidArgument, indices.device().is_cpu(),
              "embedding bag (cpu): indices must be a CPU tensor, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument, indices.dtype() == DType::i32 || indices.dtype() == DType::i64,
              "embedding bag: indices must be i32 or i64, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument, indices.is_contiguous(),
              "embedding bag: indices must be contiguous, got {}", indices.describe());
  BagView v;
  v.idx = indices.raw_data();
  v.idx64 = indices.dtype() == DType::i64;
  v.total = indices.numel();
  if (!offsets.defined()) {
    BH_CHECK_AS(InvalidArgument, indices.dim() == 2,
                "embedding bag: without offsets, indices must be [bags, hotness], got {}",
                indices.describe());
    v.bags = indices.size(0);
    v.hotness = indices.size(1);
    return v;
  }
  BH_CHECK_AS(InvalidArgument, indices.dim() == 1,
              "embedding bag: with offsets, indices must be 1-D, got {}", indices.describe());
  BH_CHECK_AS(InvalidArgument,
              offsets.dtype() == DType::i64 && offsets.dim() == 1 && offsets.numel() >= 1 &&
                  offsets.is_contiguous() && offsets.device().is_cpu(),
              "embedding bag: offsets must be a contiguous CPU i64 [bags + 1], got {}",
              offsets.describe());
  v.offsets = offsets.data<std::int64_t>();
  v.bags = offsets.numel() - 1;
  BH_CHECK_AS(InvalidArgument, v.offsets[0] == 0 && v.offsets[v.bags] == v.total,
              "embedding bag: offsets must start at 0 and end at the number of indices ({}), got "
              "{} .. {}", v.total, v.offsets[0], v.offsets[v.bags]);
  for (std::int64_t b = 0; b < v.bags; ++b)
    BH_CHECK_AS(InvalidArgument, v.offsets[b] <= v.offsets[b + 1],
                "embedding bag: offsets must not decrease (offsets[{}] = {} > offsets[{}] = {})", b,
                v.offsets[b], b + 1, v.offsets[b + 1]);
  return v;
}

void check_f32_matrix(const Tensor& t, const char* what) {
  BH_CHECK_AS(InvalidArgument,
              t.defined() && t.dtype() == DType::f32 && t.dim() == 2 && t.is_contiguous() &&
                  t.device().is_cpu(),
              "embedding bag (cpu): {} must be a contiguous CPU f32 matrix, got {}", what,
              t.defined() ? t.describe() : std::string("undefined"));
}

}  // namespace

std::int64_t embedding_bag_count(const Tensor& indices, const Tensor& offsets) {
  return make_view(indices, offsets).bags;
}

void embedding_bag_forward(Tensor& out, const Tensor& weight, const Tensor& indices,
                           const Tensor& offsets, BagPooling pooling) {
  const BagView v = make_view(indices, offsets);
  check_f32_matrix(weight, "weight");
  check_f32_matrix(out, "out");
  const std::int64_t rows = weight.size(0), dim = weight.size(1);
  BH_CHECK_AS(InvalidArgument, out.size(0) == v.bags && out.size(1) == dim,
              "embedding bag: out must be [{}, {}], got {}", v.bags, dim, out.describe());
  const float* w = weight.data<float>();
  float* o = out.data<float>();
  std::atomic<std::int64_t> bad_pos{-1};

  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, v.bags, 16),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t b = r.begin(); b != r.end(); ++b) {
      float* dst = o + b * dim;
      std::fill(dst, dst + dim, 0.0f);
      const std::int64_t lo = v.begin(b), hi = v.end(b);
      for (std::int64_t p = lo; p < hi; ++p) {
        const std::int64_t row = v.row(p);
        if (row < 0 || row >= rows) [[unlikely]] {
          std::int64_t expected = -1;
          bad_pos.compare_exchange_strong(expected, p);
          continue;
        }
        const float* src = w + row * dim;
        for (std::int64_t d = 0; d < dim; ++d) dst[d] += src[d];
      }
      if (pooling == BagPooling::mean && hi > lo) {
        const float s = 1.0f / static_cast<float>(hi - lo);
        for (std::int64_t d = 0; d < dim; ++d) dst[d] *= s;
      }
    }
  });
  if (const std::int64_t p = bad_pos.load(); p >= 0)
    BH_THROW(InvalidArgument, "embedding bag: row id {} at position {} is outside the table [0, {})",
             v.row(p), p, rows);
}

Tensor embedding_bag_backward(const Tensor& dout, const Tensor& indices, const Tensor& offsets,
                              BagPooling pooling, Tensor& grad_weight) {
  const BagView v = make_view(indices, offsets);
  check_f32_matrix(dout, "dout");
  check_f32_matrix(grad_weight, "grad_weight");
  const std::int64_t rows = grad_weight.size(0), dim = grad_weight.size(1);
  BH_CHECK_AS(InvalidArgument, dout.size(0) == v.bags && dout.size(1) == dim,
              "embedding bag backward: dout must be [{}, {}], got {}", v.bags, dim, dout.describe());
  const std::int64_t n = v.total;
  for (std::int64_t p = 0; p < n; ++p) {
    const std::int64_t row = v.row(p);
    BH_CHECK_AS(InvalidArgument, row >= 0 && row < rows,
                "embedding bag backward: row id {} at position {} is outside the table [0, {})",
                row, p, rows);
  }

  // Bag of each position (ragged layout only) and the per-bag scale.
  std::vector<std::int32_t> bag_of;
  if (v.offsets) {
    bag_of.resize(static_cast<std::size_t>(n));
    for (std::int64_t b = 0; b < v.bags; ++b)
      for (std::int64_t p = v.begin(b); p < v.end(b); ++p) bag_of[p] = static_cast<std::int32_t>(b);
  }
  auto bag_at = [&](std::int64_t pos) -> std::int64_t {
    return v.offsets ? bag_of[pos] : pos / v.hotness;
  };

  // Group positions by row (ascending row, ascending position within a row).
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));  // positions, grouped
  std::vector<std::int64_t> seg_start;                             // U + 1 boundaries into order
  std::vector<std::int64_t> unique_rows;
  if (rows <= 4 * n + 4096) {
    std::vector<std::int64_t> count(static_cast<std::size_t>(rows) + 1, 0);
    for (std::int64_t p = 0; p < n; ++p) ++count[v.row(p) + 1];
    for (std::int64_t r = 0; r < rows; ++r) {
      if (count[r + 1] > 0) unique_rows.push_back(r);
      count[r + 1] += count[r];
    }
    seg_start.reserve(unique_rows.size() + 1);
    for (std::int64_t r : unique_rows) seg_start.push_back(count[r]);
    seg_start.push_back(n);
    for (std::int64_t p = 0; p < n; ++p) order[count[v.row(p)]++] = p;
  } else {
    std::vector<std::pair<std::int64_t, std::int64_t>> keys(static_cast<std::size_t>(n));
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 4096),
                      [&](const tbb::blocked_range<std::int64_t>& r) {
      for (std::int64_t p = r.begin(); p != r.end(); ++p) keys[p] = {v.row(p), p};
    });
    tbb::parallel_sort(keys.begin(), keys.end());
    for (std::int64_t i = 0; i < n; ++i) {
      order[i] = keys[i].second;
      if (i == 0 || keys[i].first != keys[i - 1].first) {
        unique_rows.push_back(keys[i].first);
        seg_start.push_back(i);
      }
    }
    seg_start.push_back(n);
  }

  const float* g = dout.data<float>();
  float* gw = grad_weight.data<float>();
  const std::int64_t num_unique = static_cast<std::int64_t>(unique_rows.size());
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, num_unique, 8),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t u = r.begin(); u != r.end(); ++u) {
      float* dst = gw + unique_rows[u] * dim;
      for (std::int64_t i = seg_start[u]; i < seg_start[u + 1]; ++i) {
        const std::int64_t b = bag_at(order[i]);
        const float* src = g + b * dim;
        if (pooling == BagPooling::mean) {
          const float s = 1.0f / static_cast<float>(v.end(b) - v.begin(b));
          for (std::int64_t d = 0; d < dim; ++d) dst[d] += s * src[d];
        } else {
          for (std::int64_t d = 0; d < dim; ++d) dst[d] += src[d];
        }
      }
    }
  });
  return Tensor::from_vector_i64(unique_rows, {num_unique});
}

Tensor merge_sorted_rows(const Tensor& a, const Tensor& b) {
  if (!a.defined() || a.numel() == 0) return b;
  if (!b.defined() || b.numel() == 0) return a;
  BH_CHECK_AS(InvalidArgument, a.dtype() == DType::i64 && b.dtype() == DType::i64,
              "merge_sorted_rows: row lists must be i64, got {} and {}", a.describe(), b.describe());
  const std::int64_t* pa = a.data<std::int64_t>();
  const std::int64_t* pb = b.data<std::int64_t>();
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(a.numel() + b.numel()));
  std::set_union(pa, pa + a.numel(), pb, pb + b.numel(), std::back_inserter(out));
  const auto size = static_cast<std::int64_t>(out.size());
  return Tensor::from_vector_i64(out, {size});
}

void zero_sparse_grad(Parameter& p) {
  if (!p.sparse_rows.defined()) return;
  check_f32_matrix(p.grad, "grad");
  const std::int64_t dim = p.grad.size(1), n = p.sparse_rows.numel();
  const std::int64_t* rows = p.sparse_rows.data<std::int64_t>();
  float* g = p.grad.data<float>();
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 64),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t i = r.begin(); i != r.end(); ++i)
      std::memset(g + rows[i] * dim, 0, static_cast<std::size_t>(dim) * sizeof(float));
  });
  p.sparse_rows = Tensor();
}

EmbeddingBag::EmbeddingBag(std::int64_t num_rows, std::int64_t dim, BagPooling pooling,
                           bool sparse_grad, Device device)
    : num_rows_(num_rows), dim_(dim), pooling_(pooling), sparse_grad_(sparse_grad) {
  BH_CHECK_AS(InvalidArgument, num_rows > 0 && dim > 0,
              "EmbeddingBag needs num_rows > 0 and dim > 0, got [{}, {}]", num_rows, dim);
  BH_CHECK_AS(Unsupported, device.is_cpu(),
              "EmbeddingBag: only the CPU implementation is built (the CUDA one is not written yet)");
  weight_ = &register_parameter("weight", Tensor::zeros({num_rows, dim}, DType::f32, device),
                                /*weight_decay=*/false);
}

Tensor EmbeddingBag::forward(const Tensor& indices, const Tensor& offsets) {
  const std::int64_t bags = embedding_bag_count(indices, offsets);
  Tensor out = Tensor::empty({bags, dim_}, DType::f32, weight_->value.device());
  embedding_bag_forward(out, weight_->value, indices, offsets, pooling_);
  last_indices_ = indices;
  last_offsets_ = offsets;
  return out;
}

void EmbeddingBag::backward(const Tensor& dout) {
  BH_CHECK_AS(InvalidArgument, last_indices_.defined(),
              "EmbeddingBag::backward called before forward");
  Tensor touched = embedding_bag_backward(dout.is_contiguous() ? dout : dout.contiguous(),
                                          last_indices_, last_offsets_, pooling_, weight_->grad);
  if (sparse_grad_) weight_->sparse_rows = merge_sorted_rows(weight_->sparse_rows, touched);
  weight_->mark_grad_ready();
}

void EmbeddingBag::zero_grad_fast() {
  if (sparse_grad_)
    zero_sparse_grad(*weight_);
  else
    weight_->grad.zero_();
}

}  // namespace benchhost::nn
