#pragma once
/// @file optim/ema.hpp  Exponential moving average of weights, swapped in for evaluation.
///
/// shadow = decay * shadow + (1 - decay) * value after each optimizer step (update()). With
/// warmup enabled the decay used at update n (1-based) is min(decay, (1 + n) / (10 + n)), as
/// TensorFlow's ExponentialMovingAverage with num_updates, so early averages are not dominated
/// by the random initialisation. The shadow copies start equal to the weights at construction.
/// Ownership: the Ema owns fp32 shadow tensors; parameters are borrowed and must outlive it.
/// Not thread-safe. Parameters may live on the CPU or on CUDA devices: the shadows live next to
/// them and update() is one multi-tensor op per device ("multi_tensor_lerp", no host sync).

#include <cstdint>
#include <vector>

#include "benchhost/nn/module.hpp"

namespace benchhost::optim {

class Ema {
 public:
  /// decay in [0, 1). Throws InvalidArgument otherwise.
  Ema(std::vector<nn::Parameter*> params, float decay, bool warmup = false);

  /// Fold the current weights into the averages. Throws InvalidArgument while swapped in.
  void update();
  /// Exchange weights and averages by copying values (not handles: layers may keep handles to a
  /// parameter's storage). Call once before evaluation and once after to restore the weights.
  void swap();
  bool swapped() const { return swapped_; }
  /// Decay used by the last update().
  float last_decay() const { return last_decay_; }
  std::int64_t num_updates() const { return num_updates_; }
  /// The average of parameter i (while not swapped; while swapped this holds the live weights).
  const Tensor& shadow(std::size_t i) const { return shadow_.at(i); }

 private:
  std::vector<nn::Parameter*> params_;
  std::vector<Tensor> shadow_;
  float decay_;
  bool warmup_;
  bool swapped_ = false;
  float last_decay_ = 0.0f;
  std::int64_t num_updates_ = 0;
};

/// Swap an Ema in for the lifetime of the guard (evaluation), and back on scope exit.
class EmaSwapGuard {
 public:
  explicit EmaSwapGuard(Ema& ema) : ema_(ema) { ema_.swap(); }
  ~EmaSwapGuard() { ema_.swap(); }
  EmaSwapGuard(const EmaSwapGuard&) = delete;
  EmaSwapGuard& operator=(const EmaSwapGuard&) = delete;

 private:
  Ema& ema_;
};

}  // namespace benchhost::optim
