// Top-k and masked-LM accuracy accumulators. See metrics/accuracy.hpp.
#include "benchhost/metrics/accuracy.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"

namespace benchhost::metrics {

namespace {

// Labels as host i64, whatever their integer type and device.
Tensor host_labels(const Tensor& labels) {
  BH_CHECK_AS(InvalidArgument, labels.dtype() == DType::i64 || labels.dtype() == DType::i32,
              "accuracy: labels must be i32 or i64, got {}", dtype_name(labels.dtype()));
  return labels.to(Device::cpu()).to(DType::i64).contiguous();
}

}  // namespace

void CountAccuracy::add_counts(std::int64_t correct, std::int64_t counted) {
  BH_CHECK_AS(InvalidArgument, correct >= 0 && counted >= 0 && correct <= counted,
              "accuracy: {} correct of {} counted is not a valid count", correct, counted);
  correct_ += correct;
  counted_ += counted;
}

double CountAccuracy::compute(Communicator* comm) const {
  std::int64_t correct = correct_, counted = counted_;
  if (comm != nullptr && comm->size() > 1) {
    const auto sums = allreduce_values(*comm, std::vector<std::int64_t>{correct, counted}, ReduceOp::sum);
    correct = sums[0];
    counted = sums[1];
  }
  if (counted == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(correct) / static_cast<double>(counted);
}

std::int64_t CountAccuracy::total_counted(Communicator* comm) const {
  if (comm == nullptr || comm->size() == 1) return counted_;
  return allreduce_values(*comm, std::vector<std::int64_t>{counted_}, ReduceOp::sum)[0];
}

TopKAccuracy::TopKAccuracy(int k) : k_(k) {
  BH_CHECK_AS(InvalidArgument, k >= 1, "top-k accuracy needs k >= 1, got {}", k);
}

void TopKAccuracy::add(const Tensor& scores, const Tensor& labels) {
  BH_CHECK_AS(InvalidArgument, scores.dim() == 2 && labels.dim() == 1 && labels.size(0) == scores.size(0),
              "top-k accuracy: scores must be [N, C] and labels [N], got {} and {}", shape_str(scores.shape()),
              shape_str(labels.shape()));
  const std::int64_t n = scores.size(0), classes = scores.size(1);
  BH_CHECK_AS(InvalidArgument, k_ <= classes || n == 0, "top-{} accuracy over {} classes", k_, classes);
  const Tensor s = (scores.dtype() == DType::f32 ? scores : nn::cast(scores, DType::f32)).to(Device::cpu()).contiguous();
  const Tensor l = host_labels(labels);
  const float* p = s.data<float>();
  const std::int64_t* lab = l.data<std::int64_t>();
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t y = lab[i];
    BH_CHECK_AS(InvalidArgument, y >= 0 && y < classes, "top-k accuracy: label {} of row {} is outside [0, {})", y, i,
                classes);
    const float* row = p + i * classes;
    const float at = row[y];
    if (std::isnan(at)) continue;
    std::int64_t ahead = 0;  // classes ranked before the label
    for (std::int64_t c = 0; c < classes && ahead < k_; ++c) ahead += row[c] > at || (row[c] == at && c < y);
    correct += ahead < k_;
  }
  add_counts(correct, n);
}

void MaskedLmAccuracy::add(const Tensor& scores, const Tensor& labels) {
  BH_CHECK_AS(InvalidArgument, scores.dim() == 2 && labels.dim() == 1 && labels.size(0) == scores.size(0),
              "masked-LM accuracy: scores must be [M, V] and labels [M], got {} and {}", shape_str(scores.shape()),
              shape_str(labels.shape()));
  if (scores.size(0) == 0) return;
  // The arg-max runs where the scores are; only M indices cross to the host.
  const Tensor predicted = nn::amax(scores, 1).indices.to(Device::cpu()).contiguous();
  const Tensor l = host_labels(labels);
  const std::int64_t* pred = predicted.data<std::int64_t>();
  const std::int64_t* lab = l.data<std::int64_t>();
  std::int64_t correct = 0, counted = 0;
  for (std::int64_t i = 0; i < l.numel(); ++i) {
    if (lab[i] < 0) continue;
    ++counted;
    correct += pred[i] == lab[i];
  }
  add_counts(correct, counted);
}

}  // namespace benchhost::metrics
