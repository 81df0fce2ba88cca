#include "benchhost/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/ranges.h>

#include "benchhost/error.hpp"

namespace benchhost::optim {

namespace {

void check_lr(float lr, const char* what, const char* schedule) {
  BH_CHECK_AS(InvalidArgument, std::isfinite(lr) && lr >= 0.0f,
              "{}: {} must be finite and >= 0, got {}", schedule, what, lr);
}

void check_step(std::int64_t step, const char* schedule) {
  BH_CHECK_AS(InvalidArgument, step >= 0, "{}: step must be >= 0, got {}", schedule, step);
}

void check_span(std::int64_t warmup, std::int64_t total, const char* schedule) {
  BH_CHECK_AS(InvalidArgument, warmup >= 0 && total > warmup,
              "{}: need 0 <= warmup_steps < total_steps, got warmup_steps={} total_steps={}",
              schedule, warmup, total);
}

// Linear warm-up (Note [Schedule step indexing]); only called for step < warmup.
float warmup_lr(float base, std::int64_t step, std::int64_t warmup) {
  return static_cast<float>(static_cast<double>(base) * static_cast<double>(step + 1) /
                            static_cast<double>(warmup));
}

double progress(std::int64_t step, std::int64_t warmup, std::int64_t total) {
  return static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
}

}  // namespace

ConstantSchedule::ConstantSchedule(float lr) : lr_(lr) { check_lr(lr, "lr", "constant"); }
float ConstantSchedule::lr(std::int64_t step) const {
  check_step(step, "constant");
  return lr_;
}
std::string ConstantSchedule::describe() const { return fmt::format("constant(lr={})", lr_); }

WarmupPolySchedule::WarmupPolySchedule(WarmupPolyOptions o) : opt_(o) {
  check_lr(o.base_lr, "base_lr", "warmup_poly");
  check_lr(o.end_lr, "end_lr", "warmup_poly");
  check_span(o.warmup_steps, o.total_steps, "warmup_poly");
  BH_CHECK_AS(InvalidArgument, o.power > 0.0f, "warmup_poly: power must be > 0, got {}", o.power);
}

float WarmupPolySchedule::lr(std::int64_t step) const {
  check_step(step, "warmup_poly");
  if (step < opt_.warmup_steps) return warmup_lr(opt_.base_lr, step, opt_.warmup_steps);
  if (step >= opt_.total_steps) return opt_.end_lr;
  const double p = progress(step, opt_.warmup_steps, opt_.total_steps);
  return static_cast<float>(opt_.end_lr + (static_cast<double>(opt_.base_lr) - opt_.end_lr) *
                                              std::pow(1.0 - p, static_cast<double>(opt_.power)));
}

std::string WarmupPolySchedule::describe() const {
  return fmt::format("warmup_poly(base_lr={}, warmup_steps={}, total_steps={}, power={}, end_lr={})",
                     opt_.base_lr, opt_.warmup_steps, opt_.total_steps, opt_.power, opt_.end_lr);
}

WarmupCosineSchedule::WarmupCosineSchedule(WarmupCosineOptions o) : opt_(o) {
  check_lr(o.base_lr, "base_lr", "warmup_cosine");
  check_lr(o.min_lr, "min_lr", "warmup_cosine");
  check_span(o.warmup_steps, o.total_steps, "warmup_cosine");
}

float WarmupCosineSchedule::lr(std::int64_t step) const {
  check_step(step, "warmup_cosine");
  if (step < opt_.warmup_steps) return warmup_lr(opt_.base_lr, step, opt_.warmup_steps);
  if (step >= opt_.total_steps) return opt_.min_lr;
  const double p = progress(step, opt_.warmup_steps, opt_.total_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return static_cast<float>(opt_.min_lr + coeff * (static_cast<double>(opt_.base_lr) - opt_.min_lr));
}

std::string WarmupCosineSchedule::describe() const {
  return fmt::format("warmup_cosine(base_lr={}, warmup_steps={}, total_steps={}, min_lr={})",
                     opt_.base_lr, opt_.warmup_steps, opt_.total_steps, opt_.min_lr);
}

WarmupStepSchedule::WarmupStepSchedule(WarmupStepOptions o) : opt_(std::move(o)) {
  check_lr(opt_.base_lr, "base_lr", "warmup_step");
  BH_CHECK_AS(InvalidArgument, opt_.warmup_steps >= 0, "warmup_step: warmup_steps must be >= 0");
  BH_CHECK_AS(InvalidArgument, opt_.gamma > 0.0f && std::isfinite(opt_.gamma),
              "warmup_step: gamma must be > 0, got {}", opt_.gamma);
  BH_CHECK_AS(InvalidArgument, std::is_sorted(opt_.milestones.begin(), opt_.milestones.end()),
              "warmup_step: milestones must be ascending");
}

float WarmupStepSchedule::lr(std::int64_t step) const {
  check_step(step, "warmup_step");
  if (step < opt_.warmup_steps) return warmup_lr(opt_.base_lr, step, opt_.warmup_steps);
  const auto passed = std::upper_bound(opt_.milestones.begin(), opt_.milestones.end(), step) -
                      opt_.milestones.begin();
  return static_cast<float>(opt_.base_lr * std::pow(static_cast<double>(opt_.gamma),
                                                    static_cast<double>(passed)));
}

std::string WarmupStepSchedule::describe() const {
  return fmt::format("warmup_step(base_lr={}, warmup_steps={}, milestones=[{}], gamma={})",
                     opt_.base_lr, opt_.warmup_steps, fmt::join(opt_.milestones, ", "), opt_.gamma);
}

std::int64_t steps_for_epochs(double epochs, std::int64_t steps_per_epoch) {
  BH_CHECK_AS(InvalidArgument, epochs >= 0.0 && std::isfinite(epochs) && steps_per_epoch >= 0,
              "steps_for_epochs: need epochs >= 0 ({}) and steps_per_epoch >= 0 ({})", epochs,
              steps_per_epoch);
  return static_cast<std::int64_t>(std::ceil(epochs * static_cast<double>(steps_per_epoch) - 1e-9));
}

}  // namespace benchhost::optim
