// Per-class Dice over cases, merged across ranks. See metrics/dice.hpp.
#include "benchhost/metrics/dice.hpp"

#include <limits>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"

namespace benchhost::metrics {

namespace {

// A class map as host u8 whatever its integer dtype and device; values checked against C.
std::vector<std::uint8_t> host_classes(const Tensor& t, int num_classes, const char* what) {
  const Tensor h = t.to(Device::cpu()).contiguous();
  const std::int64_t n = h.numel();
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
  auto take = [&](auto* p) {
    for (std::int64_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::int64_t>(p[i]);
      BH_CHECK_AS(InvalidArgument, v >= 0 && v < num_classes, "dice: {} value {} at element {} is outside [0, {})",
                  what, v, i, num_classes);
      out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v);
    }
  };
  switch (h.dtype()) {
    case DType::u8: take(h.data<std::uint8_t>()); break;
    case DType::i32: take(h.data<std::int32_t>()); break;
    case DType::i64: take(h.data<std::int64_t>()); break;
    default: BH_THROW(InvalidArgument, "dice: {} must be a u8, i32 or i64 class map, got {}", what, dtype_name(h.dtype()));
  }
  return out;
}

}  // namespace

DiceScore::DiceScore(int num_classes) : num_classes_(num_classes) {
  BH_CHECK_AS(InvalidArgument, num_classes >= 2 && num_classes <= 256,
              "dice: needs 2..256 classes (class 0 is the background), got {}", num_classes);
  reset();
}

void DiceScore::reset() {
  dice_sums_.assign(static_cast<std::size_t>(num_classes_ - 1), 0.0);
  cases_ = 0;
}

void DiceScore::add(const Tensor& prediction, const Tensor& label) {
  BH_CHECK_AS(InvalidArgument, prediction.shape() == label.shape(),
              "dice: prediction {} and label {} differ in shape", shape_str(prediction.shape()),
              shape_str(label.shape()));
  const std::vector<std::uint8_t> p = host_classes(prediction, num_classes_, "prediction");
  const std::vector<std::uint8_t> t = host_classes(label, num_classes_, "label");
  const auto C = static_cast<std::size_t>(num_classes_);
  std::vector<std::int64_t> pred_count(C, 0), label_count(C, 0), both(C, 0);
  for (std::size_t i = 0; i < p.size(); ++i) {
    ++pred_count[p[i]];
    ++label_count[t[i]];
    both[p[i]] += p[i] == t[i];
  }
  constexpr double kSmooth = 1e-6;  // smooth_nr = smooth_dr in the reference
  for (std::size_t c = 1; c < C; ++c)
    dice_sums_[c - 1] += (2.0 * static_cast<double>(both[c]) + kSmooth) /
                         (static_cast<double>(pred_count[c] + label_count[c]) + kSmooth);
  ++cases_;
}

std::vector<double> DiceScore::per_class(Communicator* comm) const {
  std::vector<double> sums = dice_sums_;
  double cases = static_cast<double>(cases_);
  if (comm != nullptr && comm->size() > 1) {
    sums.push_back(cases);
    sums = allreduce_values(*comm, std::move(sums), ReduceOp::sum);
    cases = sums.back();
    sums.pop_back();
  }
  for (double& s : sums) s = cases > 0 ? s / cases : std::numeric_limits<double>::quiet_NaN();
  return sums;
}

double DiceScore::mean(Communicator* comm) const {
  const std::vector<double> pc = per_class(comm);
  double total = 0;
  for (double v : pc) total += v;
  return total / static_cast<double>(pc.size());
}

}  // namespace benchhost::metrics
