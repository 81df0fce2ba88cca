#pragma once
/// @file optim/schedule.hpp  Learning-rate schedules, expressed per optimizer step.
///
/// Note [Schedule step indexing]
/// lr(step) takes the 0-based index of the update about to be applied (Optimizer::step_count()
/// before the update). Linear warm-up over W steps gives lr(s) = base * (s + 1) / W for s < W,
/// so the first update already moves (as Megatron-LM counts) and update W-1 uses the full base
/// LR. Decay then runs over steps [W, total_steps): with progress p = (s - W) / (total - W),
///   polynomial: end + (base - end) * (1 - p)^power
///   cosine:     min + (base - min) * (1 + cos(pi * p)) / 2
///   step:       base * gamma^(number of milestones <= s)
/// and for s >= total_steps the schedule stays at its end value. Epoch-based MLPerf settings
/// (ResNet-50's warm-up epochs) convert with steps_for_epochs().
///
/// Schedules are immutable after construction and safe to call from any thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace benchhost::optim {

class Schedule {
 public:
  virtual ~Schedule() = default;
  /// Learning rate for the update with 0-based index `step` (>= 0).
  virtual float lr(std::int64_t step) const = 0;
  /// One line for logs: "warmup_poly(base=..., warmup=..., total=..., power=2, end=...)".
  virtual std::string describe() const = 0;
};

/// The same LR at every step.
class ConstantSchedule final : public Schedule {
 public:
  explicit ConstantSchedule(float lr);
  float lr(std::int64_t step) const override;
  std::string describe() const override;

 private:
  float lr_;
};

struct WarmupPolyOptions {
  float base_lr = 0.0f;             ///< peak LR, reached at the end of warm-up
  std::int64_t warmup_steps = 0;    ///< 0 = no warm-up
  std::int64_t total_steps = 0;     ///< decay ends here (> warmup_steps)
  float power = 1.0f;               ///< 1 = linear decay; MLPerf ResNet-50 uses 2
  float end_lr = 0.0f;              ///< LR at and after total_steps
};
/// Linear warm-up then polynomial decay (MLPerf ResNet-50 LARS: power 2; BERT LAMB: power 1).
class WarmupPolySchedule final : public Schedule {
 public:
  explicit WarmupPolySchedule(WarmupPolyOptions options);
  float lr(std::int64_t step) const override;
  std::string describe() const override;
  const WarmupPolyOptions& options() const { return opt_; }

 private:
  WarmupPolyOptions opt_;
};

struct WarmupCosineOptions {
  float base_lr = 0.0f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;  ///< end of the cosine (> warmup_steps)
  float min_lr = 0.0f;           ///< GPT-3 MLPerf: 10% of the peak
};
/// Linear warm-up then cosine decay to min_lr (GPT-3 / Megatron-LM).
class WarmupCosineSchedule final : public Schedule {
 public:
  explicit WarmupCosineSchedule(WarmupCosineOptions options);
  float lr(std::int64_t step) const override;
  std::string describe() const override;
  const WarmupCosineOptions& options() const { return opt_; }

 private:
  WarmupCosineOptions opt_;
};

struct WarmupStepOptions {
  float base_lr = 0.0f;
  std::int64_t warmup_steps = 0;
  std::vector<std::int64_t> milestones;  ///< ascending step indices where LR is multiplied
  float gamma = 0.1f;
};
/// Linear warm-up then step decay by gamma at each milestone.
class WarmupStepSchedule final : public Schedule {
 public:
  explicit WarmupStepSchedule(WarmupStepOptions options);
  float lr(std::int64_t step) const override;
  std::string describe() const override;
  const WarmupStepOptions& options() const { return opt_; }

 private:
  WarmupStepOptions opt_;
};

/// Steps covered by `epochs` (fractional allowed) at `steps_per_epoch`, rounded up:
/// steps_for_epochs(2, 1251) == 2502. Throws InvalidArgument for negative inputs.
std::int64_t steps_for_epochs(double epochs, std::int64_t steps_per_epoch);

}  // namespace benchhost::optim
