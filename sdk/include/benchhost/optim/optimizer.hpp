#pragma once
/// @file optim/optimizer.hpp  First-order optimizers over nn::Parameter lists.
///
/// Note [Optimizer contract]
/// An optimizer holds non-owning pointers to parameters (nn::Module::parameters()) and owns its
/// per-parameter state (momentum, Adam moments, Adagrad accumulators), allocated as fp32 zeros
/// at construction on the parameter's device. Under mixed precision Parameter::value is the fp32
/// master copy (precision.hpp), so optimizers are fp32 only.
///   - step(lr) applies one update with learning rate `lr` to every parameter, reading
///     Parameter::grad and writing Parameter::value and the state. It does not zero gradients.
///   - step(schedule) takes the LR from schedule.lr(step_count()) (0-based index of this step).
///   - step_count() is the number of updates applied so far; the t used for Adam/LAMB bias
///     correction is step_count() after the increment (t = 1 on the first step).
/// Weight decay is applied only to parameters with Parameter::weight_decay == true; for LARS and
/// LAMB those with weight_decay == false form the "skip list" (no decay and no trust ratio).
///
/// Note [Sparse rows]
/// When Parameter::sparse_rows is defined (an i64 [n] tensor of unique row indices into the first
/// dimension), only those rows of the gradient are meaningful. The element-wise optimizers
/// (SGD, Adam, AdamW, Adagrad) then update only those rows of the weights and of the state;
/// other rows are untouched. For Adagrad without weight decay this equals the dense update on
/// the touched rows exactly (an untouched row has a zero gradient, which leaves its accumulator
/// and weight unchanged); for SGD-with-momentum and Adam it is the "lazy" update (state of
/// untouched rows is not decayed), as in PyTorch's SparseAdam. A sparse-row parameter with
/// weight_decay == true under a non-zero decay is refused (InvalidArgument: decay would touch
/// every row), as is LARS/LAMB with sparse rows (their norms need the whole tensor). Rows are
/// checked (in range, unique) on every step.
///
/// Threading: step() parallelises internally with oneTBB (over parameters and over elements);
/// the result does not depend on the thread count (norms use a deterministic reduction). Call it
/// from one thread at a time.
///
/// Devices: parameters may live on the CPU or on CUDA devices (state is allocated next to each
/// parameter). step() groups the parameters by device and applies each group with one
/// multi-tensor op ("optim_adam_multi", ...; see the op registry): on CUDA that is a few fused
/// launches for the whole group (multi_tensor_apply), with deterministic per-tensor norms for
/// LARS/LAMB, and no host synchronisation except the check of sparse_rows that live on the GPU
/// (one small copy per sparse parameter). Gradients must be on their parameter's device.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/nn/module.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::optim {

class Schedule;

namespace detail {
/// Trust ratios of the last LARS/LAMB step. Ratios computed on a GPU stay there until first
/// read (one copy then), so a step does not synchronise the host.
class TrustRatios {
 public:
  void reset(std::size_t n);
  /// Ratios of the parameters `index` (a CPU tensor is read at once).
  void set_pending(Tensor ratios, std::vector<std::size_t> index);
  float get(std::size_t i) const;

 private:
  mutable std::vector<float> host_;
  mutable std::vector<std::pair<Tensor, std::vector<std::size_t>>> pending_;
};
}  // namespace detail

/// A named tensor of optimizer state, e.g. {"exp_avg.encoder.layer.0.qkv.weight", tensor}.
struct StateTensor {
  std::string name;
  Tensor tensor;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::Parameter*> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Apply one update with learning rate `lr` (> 0 or == 0; negative throws InvalidArgument).
  void step(float lr);
  /// Apply one update with lr = schedule.lr(step_count()).
  void step(const Schedule& schedule);
  /// Zero every parameter's gradient and clear its sparse_rows.
  void zero_grad();

  /// Number of updates applied so far.
  std::int64_t step_count() const { return step_count_; }
  /// Learning rate used by the last step (0 before the first).
  float last_lr() const { return last_lr_; }
  const std::vector<nn::Parameter*>& parameters() const { return params_; }
  /// "sgd", "lars", "lamb", "adam", "adamw", "adagrad".
  virtual const char* name() const = 0;
  /// One line with the hyperparameters, for logs: "lamb(beta1=0.9, beta2=0.999, ...)".
  virtual std::string describe() const = 0;

  /// Handles (sharing storage) to every state tensor, plus "step" (i64 [1], a copy), in a fixed
  /// order: checkpoint them with nn::save_tensors().
  std::vector<StateTensor> state();
  /// Restore state saved by state(): every name must be present with the same shape
  /// (InvalidArgument naming the first problem otherwise); copies values in.
  void load_state(const std::vector<StateTensor>& saved);

 protected:
  /// Update all parameters with learning rate `lr`; step_count() already counts this step.
  virtual void update(float lr) = 0;
  /// Allocate one fp32 zero state slot per parameter, named "<slot>.<param name>".
  std::vector<Tensor>& add_state_slot(const std::string& slot, float initial_value = 0.0f);
  /// Throws InvalidArgument/Unsupported if p cannot be updated (dtype, device, grad shape, rows).
  void check_parameter(const nn::Parameter& p, bool allow_sparse_rows) const;

  std::vector<nn::Parameter*> params_;

 private:
  struct Slot {
    std::string name;
    std::vector<Tensor> tensors;  // one per parameter, same order as params_
  };
  std::int64_t step_count_ = 0;
  float last_lr_ = 0.0f;
  std::vector<std::unique_ptr<Slot>> slots_;  // stable addresses: subclasses keep pointers
  std::vector<Tensor> device_zeros_;          // f32 [1] zero per device, for zero_grad()
};

// ---- SGD ----------------------------------------------------------------------------------------

struct SgdOptions {
  float momentum = 0.0f;      ///< 0 disables the momentum buffer
  bool nesterov = false;      ///< Nesterov momentum (requires momentum > 0)
  float weight_decay = 0.0f;  ///< L2 added to the gradient: g += wd * w (decay params only)
};

/// PyTorch-style SGD (dampening 0): d = g + wd*w; buf = momentum*buf + d;
/// d = nesterov ? d + momentum*buf : buf; w -= lr*d.
class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<nn::Parameter*> params, SgdOptions options = {});
  const char* name() const override { return "sgd"; }
  std::string describe() const override;
  const SgdOptions& options() const { return opt_; }

 private:
  void update(float lr) override;
  SgdOptions opt_;
  std::vector<Tensor>* momentum_ = nullptr;
};

// ---- LARS ---------------------------------------------------------------------------------------

struct LarsOptions {
  float momentum = 0.9f;
  float weight_decay = 0.0f;  ///< MLPerf ResNet-50: 5e-5 (with global batch 3k+)
  float eta = 0.001f;         ///< trust coefficient
  float epsilon = 0.0f;       ///< added to the trust-ratio denominator
};

/// LARS as in the MLPerf ResNet-50 reference (momentum applied to the LR-scaled update):
///   decay param:  ratio = eta*||w|| / (||g|| + wd*||w|| + eps)  (1 if ||w|| or ||g|| is 0)
///                 v = momentum*v + lr*ratio*(g + wd*w);  w -= v
///   skip param:   v = momentum*v + lr*g;  w -= v          (no decay, no trust ratio)
class Lars final : public Optimizer {
 public:
  Lars(std::vector<nn::Parameter*> params, LarsOptions options = {});
  const char* name() const override { return "lars"; }
  std::string describe() const override;
  const LarsOptions& options() const { return opt_; }
  /// Trust ratio applied to parameter i by the last step (1 for skip-list parameters).
  float last_trust_ratio(std::size_t i) const { return trust_.get(i); }

 private:
  void update(float lr) override;
  LarsOptions opt_;
  std::vector<Tensor>* velocity_ = nullptr;
  detail::TrustRatios trust_;
};

// ---- LAMB ---------------------------------------------------------------------------------------

struct LambOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-6f;
  float weight_decay = 0.01f;  ///< decoupled, added to the Adam update (decay params only)
  bool bias_correction = true;
};

/// LAMB as used by MLPerf BERT:
///   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  m^ = m/(1-b1^t);  v^ = v/(1-b2^t)
///   u = m^/(sqrt(v^)+eps) + wd*w          (wd term only for decay params)
///   ratio = ||w||/||u|| (1 if either is 0; 1 for skip-list params);  w -= lr*ratio*u
class Lamb final : public Optimizer {
 public:
  Lamb(std::vector<nn::Parameter*> params, LambOptions options = {});
  const char* name() const override { return "lamb"; }
  std::string describe() const override;
  const LambOptions& options() const { return opt_; }
  float last_trust_ratio(std::size_t i) const { return trust_.get(i); }

 private:
  void update(float lr) override;
  LambOptions opt_;
  std::vector<Tensor>* m_ = nullptr;
  std::vector<Tensor>* v_ = nullptr;
  detail::TrustRatios trust_;
};

// ---- Adam / AdamW -------------------------------------------------------------------------------

struct AdamOptions {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
};

/// Adam (Kingma & Ba) with L2 weight decay added to the gradient (g += wd*w), as torch.optim.Adam:
///   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;  w -= lr * m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
class Adam : public Optimizer {
 public:
  Adam(std::vector<nn::Parameter*> params, AdamOptions options = {});
  const char* name() const override { return "adam"; }
  std::string describe() const override;
  const AdamOptions& options() const { return opt_; }

 protected:
  Adam(std::vector<nn::Parameter*> params, AdamOptions options, bool decoupled);

 private:
  void update(float lr) override;
  AdamOptions opt_;
  bool decoupled_;
  std::vector<Tensor>* m_ = nullptr;
  std::vector<Tensor>* v_ = nullptr;
};

/// AdamW (Loshchilov & Hutter): decoupled decay, w -= lr*(adam_update + wd*w).
class AdamW final : public Adam {
 public:
  AdamW(std::vector<nn::Parameter*> params, AdamOptions options = {.weight_decay = 0.01f});
  const char* name() const override { return "adamw"; }
};

// ---- Adagrad ------------------------------------------------------------------------------------

struct AdagradOptions {
  float epsilon = 1e-10f;
  float initial_accumulator = 0.0f;
  float weight_decay = 0.0f;  ///< L2 added to the gradient; refused for sparse-row parameters
  float lr_decay = 0.0f;      ///< lr_t = lr / (1 + (t-1)*lr_decay)
};

/// Adagrad (torch.optim.Adagrad): g += wd*w; acc += g^2; w -= lr_t * g / (sqrt(acc) + eps).
/// Dense and sparse rows (Note [Sparse rows]).
class Adagrad final : public Optimizer {
 public:
  Adagrad(std::vector<nn::Parameter*> params, AdagradOptions options = {});
  const char* name() const override { return "adagrad"; }
  std::string describe() const override;
  const AdagradOptions& options() const { return opt_; }

 private:
  void update(float lr) override;
  AdagradOptions opt_;
  std::vector<Tensor>* acc_ = nullptr;
};

}  // namespace benchhost::optim
