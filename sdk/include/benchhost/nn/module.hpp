#pragma once
/// @file nn/module.hpp  Parameters and the module tree that models are built from.
///
/// Note [Modules and backward]
/// benchhost has no tape autograd. Each module computes its forward pass, keeps what its backward
/// pass needs (activations, masks) and implements backward explicitly, like llm.c's
/// <layer>_forward / <layer>_backward pairs; composite modules (a transformer block, a ResNet
/// bottleneck) call their children's backward in reverse order. backward() accumulates into
/// Parameter::grad (+=) and returns the gradient with respect to its input.
/// Ownership: a module owns its children (unique_ptr) and its parameters; parameters() returns
/// non-owning pointers valid for the module's lifetime. Not thread-safe: one training thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/tensor.hpp"

namespace benchhost {
class PrecisionPolicy;  // precision.hpp
}

namespace benchhost::nn {

struct Parameter {
  std::string name;        ///< full dotted name once collected: "encoder.layer.3.attention.qkv.weight"
  Tensor value;            ///< the weights (fp32 master copy under mixed precision)
  Tensor grad;             ///< same shape and device as value; zeroed by zero_grad()
  bool weight_decay = true;  ///< false for biases and norm parameters (LARS/LAMB skip lists)
  /// Sparse gradient (embedding tables): when sparse_rows is defined, only those rows of `grad`
  /// are meaningful and optimizers update only them (sparse_rows: i64 [n], unique, any order).
  Tensor sparse_rows;
  /// Set by data parallelism (comm/data_parallel.hpp) to start reducing a gradient as soon as it
  /// is final. Every layer calls mark_grad_ready() on each of its parameters at the end of its
  /// backward pass, once that parameter's gradient for the step is complete.
  std::function<void(Parameter&)> grad_ready_hook;
  void mark_grad_ready() {
    if (grad_ready_hook) grad_ready_hook(*this);
  }
};

class Module {
 public:
  explicit Module(std::string name = "") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }

  /// Register a parameter owned by this module. `grad` is allocated (zeros) alongside.
  Parameter& register_parameter(const std::string& name, Tensor value, bool weight_decay = true);
  /// Register a child module; returns a reference to it (owned by this module).
  template <class M>
  M& register_module(const std::string& name, std::unique_ptr<M> child) {
    child->name_ = name;
    M& ref = *child;
    children_.push_back(std::move(child));
    return ref;
  }

  /// All parameters of this module and its descendants, in registration order, with full names.
  std::vector<Parameter*> parameters();
  /// Number of scalar weights (sum of numel over parameters()).
  std::int64_t num_parameters();
  void zero_grad();
  /// Training mode (dropout active, batch norm uses batch statistics) vs evaluation mode.
  void train(bool on = true);
  bool is_training() const { return training_; }
  /// Buffers that are state but not trained (batch norm running statistics): saved with weights.
  Tensor& register_buffer(const std::string& name, Tensor value);
  std::vector<std::pair<std::string, Tensor*>> buffers();

  /// Move every parameter (value and gradient; sparse_rows stay where they are) and buffer of the
  /// tree to `device`, in place: Parameter and buffer addresses stay valid, the Tensors they hold
  /// are replaced. The usual order is construct, initialize() (seeded, on the CPU, so a CPU and a
  /// GPU run start from the same weights), then to(device), then build the optimizer (its state
  /// is allocated next to the parameters). Modules must reach their weights through their
  /// Parameter and buffer pointers, never through Tensor copies taken before the move.
  void to(Device device);

  /// Note [Layers under a precision policy]
  /// Make every module of the tree follow `policy` (copied; fp32 until set). The SDK's layers ask
  /// it for the dtype of their outputs per op class: under bf16, Linear multiplies bf16 copies of
  /// its input and weight (the weight copy is made per forward from the fp32 master and kept for
  /// backward), LayerNorm and Embedding store bf16 outputs computed in f32, and so on
  /// (precision.hpp's table); parameters, their gradients and the optimizer stay fp32. A layer's
  /// backward returns its input gradient in the dtype of its input. Call it after to(device),
  /// once the model is built; modules added later start at fp32.
  void set_precision(const PrecisionPolicy& policy);
  /// The policy this module follows (the fp32 policy until set_precision()).
  const PrecisionPolicy& precision() const;

 protected:
  /// Called by train() on every module of the tree.
  virtual void on_train_mode_change(bool) {}

 private:
  void collect(const std::string& prefix, std::vector<Parameter*>& out);
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);

  std::string name_;
  bool training_ = true;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> buffers_;
  std::vector<std::unique_ptr<Module>> children_;
  std::shared_ptr<const PrecisionPolicy> precision_;  // null: fp32
};

/// A module with one input and one output.
class Layer : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  /// Gradient w.r.t. the input of the last forward(); accumulates parameter gradients.
  virtual Tensor backward(const Tensor& dy) = 0;
};

}  // namespace benchhost::nn
