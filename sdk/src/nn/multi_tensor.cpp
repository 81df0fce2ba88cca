// The caller side of the multi-tensor ops (Note [Multi-tensor optimizer ops] in
// multi_tensor.hpp): checking a parameter for the fp32 update paths and grouping parameters by
// device, for the optimizers, clipping, EMA and the loss scaler.
#include "nn/multi_tensor.hpp"

#include <algorithm>

#include <tbb/parallel_sort.h>

#include "benchhost/nn/module.hpp"

namespace benchhost::nn::detail {

void check_f32_parameter(const nn::Parameter& p, const char* what, bool need_grad,
                         bool allow_sparse_rows) {
  const std::string& n = p.name;
  BH_CHECK_AS(InvalidArgument, p.value.defined(), "{}: parameter '{}' has no value", what, n);
  const Device dev = p.value.device();
  if (!dev.is_cpu() && !dev.is_cuda())
    BH_THROW(Unsupported, "{}: parameter '{}' is on {}; optimizer updates exist for cpu and cuda "
             "tensors", what, n, dev.str());
  BH_CHECK_AS(InvalidArgument, p.value.dtype() == DType::f32,
              "{}: parameter '{}' is {}, expected f32 master weights (precision.hpp)", what, n,
              dtype_name(p.value.dtype()));
  BH_CHECK_AS(InvalidArgument, p.value.is_contiguous(), "{}: parameter '{}' is not contiguous",
              what, n);
  if (!need_grad) return;
  BH_CHECK_AS(InvalidArgument, p.grad.defined(), "{}: parameter '{}' has no gradient", what, n);
  BH_CHECK_AS(InvalidArgument, p.grad.shape() == p.value.shape() && p.grad.dtype() == DType::f32 &&
              p.grad.device() == dev && p.grad.is_contiguous(),
              "{}: gradient of '{}' is {}, expected a contiguous f32 {} tensor of shape {}", what,
              n, p.grad.describe(), dev.str(), shape_str(p.value.shape()));
  if (!p.sparse_rows.defined()) return;
  BH_CHECK_AS(InvalidArgument, allow_sparse_rows,
              "{}: parameter '{}' has a sparse-rows gradient, which {} does not support (its "
              "update needs the whole tensor); use adagrad or sgd for embedding tables", what, n,
              what);
  const Tensor& r = p.sparse_rows;
  BH_CHECK_AS(InvalidArgument, r.dtype() == DType::i64 && r.dim() == 1 && r.is_contiguous() &&
              (r.device().is_cpu() || r.device() == dev) && p.value.dim() >= 1,
              "{}: sparse_rows of '{}' is {}, expected a contiguous 1-d i64 tensor on the cpu or "
              "on {} (and a parameter with at least one dimension)", what, n, r.describe(), dev.str());
  const Tensor host = r.device().is_cpu() ? r : r.to(Device::cpu());
  const std::int64_t rows = p.value.size(0);
  const std::int64_t* idx = host.data<std::int64_t>();
  std::vector<std::int64_t> sorted(idx, idx + host.numel());
  tbb::parallel_sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, sorted[i] >= 0 && sorted[i] < rows,
                "{}: sparse_rows of '{}' holds row {}, outside [0, {})", what, n, sorted[i], rows);
    BH_CHECK_AS(InvalidArgument, i == 0 || sorted[i] != sorted[i - 1],
                "{}: sparse_rows of '{}' holds row {} twice; rows must be unique", what, n,
                sorted[i]);
  }
}

std::vector<DeviceGroup> group_by_device(const std::vector<nn::Parameter*>& params) {
  std::vector<DeviceGroup> groups;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Device d = params[i]->value.device();
    auto it = std::find_if(groups.begin(), groups.end(), [&](const DeviceGroup& g) { return g.device == d; });
    if (it == groups.end()) {
      groups.push_back({d, {}});
      it = groups.end() - 1;
    }
    it->index.push_back(i);
  }
  return groups;
}

Tensor rows_on(const nn::Parameter& p, Device device) {
  if (!p.sparse_rows.defined() || p.sparse_rows.device() == device) return p.sparse_rows;
  return p.sparse_rows.to(device);
}

}  // namespace benchhost::nn::detail
