// The public functions of nn/embedding_bag.hpp and the EmbeddingBag layer: layout checks, output
// allocation and dispatch through the op registry. The ops ("embedding_bag_forward",
// "embedding_bag_backward", "zero_rows") are declared, next to their CPU implementations, in
// nn/cpu/embedding_bag.cpp (CUDA: nn/cuda/embedding_bag.cu).
#include "benchhost/nn/embedding_bag.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/precision.hpp"
#include "nn/embedding_bag_common.hpp"

namespace benchhost::nn {

using namespace embedding_bag_detail;

const char* bag_pooling_name(BagPooling p) noexcept { return p == BagPooling::sum ? "sum" : "mean"; }

BagPooling parse_bag_pooling(const std::string& name) {
  if (name == "sum") return BagPooling::sum;
  if (name == "mean") return BagPooling::mean;
  BH_THROW(InvalidArgument, "unknown embedding bag pooling '{}' (choose sum or mean)", name);
}

std::int64_t embedding_bag_count(const Tensor& indices, const Tensor& offsets) {
  if (indices.defined() && !indices.device().is_cpu()) {
    // Device-resident ids: the count comes from the shapes alone (reading offsets would cost a
    // synchronising copy); the device kernels check the ids and offsets themselves.
    if (!offsets.defined()) {
      BH_CHECK_AS(InvalidArgument, indices.dim() == 2,
                  "embedding bag: without offsets, indices must be [bags, hotness], got {}",
                  indices.describe());
      return indices.size(0);
    }
    BH_CHECK_AS(InvalidArgument, indices.dim() == 1 && offsets.dim() == 1 && offsets.numel() >= 1,
                "embedding bag: with offsets, indices must be 1-D and offsets [bags + 1], got {} and {}",
                indices.describe(), offsets.describe());
    return offsets.numel() - 1;
  }
  return make_view(indices, offsets).bags;
}

void embedding_bag_forward(Tensor& out, const Tensor& weight, const Tensor& indices,
                           const Tensor& offsets, BagPooling pooling) {
  OpCall c;
  c.inputs = {weight, indices, offsets};
  c.outputs = {out};
  c.attrs.set("pooling", pooling == BagPooling::sum ? 0 : 1);
  dispatch("embedding_bag_forward", c);
}

Tensor embedding_bag_backward(const Tensor& dout, const Tensor& indices, const Tensor& offsets,
                              BagPooling pooling, Tensor& grad_weight) {
  const std::int64_t n = indices.defined() ? indices.numel() : 0;
  OpCall c;
  c.inputs = {dout, indices, offsets};
  c.outputs = {grad_weight, Tensor::empty({n}, DType::i64), Tensor::empty({1}, DType::i64)};
  c.attrs.set("pooling", pooling == BagPooling::sum ? 0 : 1);
  dispatch("embedding_bag_backward", c);
  const std::int64_t touched = c.outputs[2].data<std::int64_t>()[0];
  return c.outputs[1].slice(0, 0, touched);
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
  BH_CHECK_AS(InvalidArgument,
              p.grad.defined() && p.grad.dtype() == DType::f32 && p.grad.dim() == 2 &&
                  p.grad.is_contiguous(),
              "zero_sparse_grad: the gradient of '{}' must be a contiguous f32 matrix, got {}",
              p.name, p.grad.defined() ? p.grad.describe() : std::string("undefined"));
  OpCall c;
  c.inputs = {p.sparse_rows};
  c.outputs = {p.grad};
  OpRegistry::instance().select(OpRegistry::instance().get("zero_rows"), c, p.grad.device().type).run(c);
  p.sparse_rows = Tensor();
}

EmbeddingBag::EmbeddingBag(std::int64_t num_rows, std::int64_t dim, BagPooling pooling,
                           bool sparse_grad, Device device)
    : num_rows_(num_rows), dim_(dim), pooling_(pooling), sparse_grad_(sparse_grad) {
  BH_CHECK_AS(InvalidArgument, num_rows > 0 && dim > 0,
              "EmbeddingBag needs num_rows > 0 and dim > 0, got [{}, {}]", num_rows, dim);
  weight_ = &register_parameter("weight", Tensor::zeros({num_rows, dim}, DType::f32, device),
                                /*weight_decay=*/false);
}

Tensor EmbeddingBag::forward(const Tensor& indices, const Tensor& offsets) {
  const std::int64_t bags = embedding_bag_count(indices, offsets);
  Tensor out = Tensor::empty({bags, dim_}, DType::f32, weight_->value.device());
  embedding_bag_forward(out, weight_->value, indices, offsets, pooling_);
  last_indices_ = indices;
  last_offsets_ = offsets;
  // Pooled in f32 from the f32 table; stored in the embedding class's type (nn/module.hpp,
  // Note [Layers under a precision policy]).
  return cast(out, precision().storage_dtype(OpClass::embedding));
}

void EmbeddingBag::backward(const Tensor& dout) {
  BH_CHECK_AS(InvalidArgument, last_indices_.defined(),
              "EmbeddingBag::backward called before forward");
  // The scatter adds into the f32 table gradient, so it reads an f32 dout ([bags, dim]: small).
  const Tensor d = cast(dout, DType::f32);
  Tensor touched = embedding_bag_backward(d.is_contiguous() ? d : d.contiguous(), last_indices_,
                                          last_offsets_, pooling_, weight_->grad);
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
