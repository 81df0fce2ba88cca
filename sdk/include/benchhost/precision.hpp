#pragma once
/// @file precision.hpp  Precision policies and dynamic loss scaling.
///
/// Note [Precision policies]
/// A workload never hard-codes a dtype: it asks the policy, per op class, which type an op's
/// outputs are stored in and which type its arithmetic runs in. The tables (CUDA):
///
///   op class     fp32      tf32           fp16       bf16        fp8 (Hopper)
///   matmul       f32/f32   f32/f32 +tf32  f16/f16    bf16/bf16   bf16/e4m3 (grads e5m2), scaled
///   conv         f32/f32   f32/f32 +tf32  f16/f16    bf16/bf16   bf16/bf16
///   attention    f32/f32   f32/f32 +tf32  f16/f16    bf16/bf16   bf16/bf16
///   norm         f32/f32   f32/f32        f16/f32    bf16/f32    bf16/f32
///   softmax      f32/f32   f32/f32        f32/f32    f32/f32     f32/f32
///   loss         f32/f32   f32/f32        f32/f32    f32/f32     f32/f32
///   elementwise  f32/f32   f32/f32        f16/f32    bf16/f32    bf16/f32
///   embedding    f32/f32   f32/f32        f16/f32    bf16/f32    bf16/f32
///   optimizer    f32/f32   f32/f32        f32/f32    f32/f32     f32/f32
///   (storage / compute; every class accumulates in f32: OpPrecision::accumulate)
///
/// Master weights (Parameter::value) and optimizer state are always fp32. fp16 adds dynamic loss
/// scaling (DynamicLossScaler); bf16 has fp32's exponent range and needs none. fp8 is
/// Transformer-Engine style: matmul inputs are cast to e4m3 (forward) or e5m2 (gradients) with a
/// per-tensor scale computed from an amax history (Fp8Options, Fp8DelayedScaling).
///
/// Note [Precision on CPU]
/// tf32 is a CUDA math mode and fp8 needs Hopper tensor cores: on CPU both are Unsupported
/// (SKIPPED), never silently run as fp32. fp16 and bf16 on CPU are supported as *emulation*
/// (policy.emulated() == true): activations are real f16/bf16 tensors with the storage types of
/// the table, and the CPU ops, which compute in fp32, read them through the registry's f32
/// promotion and round their outputs once (nn/registry.hpp, Note [Half-precision promotion]).
/// That reproduces the numerics (rounding, fp16 overflow and hence loss scaling) of mixed
/// precision; it says nothing about mixed-precision speed (the conversions make it slower than
/// fp32), and reports carry "emulated" in the policy's describe() so a CPU fp16 number is never
/// mistaken for a fast one. Models follow a policy through nn::Module::set_precision().
///
/// Device requirements on CUDA: fp16 needs sm_70+, tf32 and bf16 need sm_80+ (Ampere), fp8
/// needs sm_90+ (Hopper). Note that the policy only decides types; the CUDA kernels that execute
/// them live with the ops (an op that lacks a path for its policy's type throws Unsupported).
///
/// Threading: a PrecisionPolicy is an immutable value, safe to share. A DynamicLossScaler is
/// owned by one training loop and not thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/dtype.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost {

enum class Precision : std::uint8_t { fp32, tf32, fp16, bf16, fp8 };
/// "fp32", "tf32", "fp16", "bf16", "fp8".
const char* precision_name(Precision p) noexcept;
/// Parses the names above (also "float32", "float16", "half", "bfloat16"); InvalidArgument else.
Precision parse_precision(std::string_view name);

/// The classes of ops the policy decides for.
enum class OpClass : std::uint8_t {
  matmul, conv, attention, norm, softmax, loss, elementwise, embedding, optimizer
};
constexpr int kNumOpClasses = 9;
/// "matmul", "conv", ...
const char* op_class_name(OpClass c) noexcept;

/// The decision for one op class.
struct OpPrecision {
  DType storage = DType::f32;     ///< dtype of the op's output activations (and saved tensors)
  DType compute = DType::f32;     ///< dtype the arithmetic reads its inputs in
  DType accumulate = DType::f32;  ///< dtype of sums / dot-product accumulators
  bool tf32 = false;              ///< CUDA: allow TF32 tensor-core math for f32 inputs
  bool fp8_scaled = false;        ///< inputs are cast to fp8 with per-tensor scales (Fp8Options)
  DType fp8_grad = DType::f32;    ///< when fp8_scaled: dtype of gradients in backward (e5m2)
};

/// Dynamic loss scaling (fp16). Defaults follow torch.cuda.amp.GradScaler and apex.
struct LossScaleOptions {
  float init_scale = 65536.0f;       ///< 2^16
  float growth_factor = 2.0f;        ///< scale *= growth after growth_interval clean steps
  float backoff_factor = 0.5f;       ///< scale *= backoff on overflow
  std::int64_t growth_interval = 2000;
  float min_scale = 1.0f;            ///< backoff never goes below this
  float max_scale = 16777216.0f;     ///< 2^24; growth never goes above this
};

/// fp8 (Hopper) per-tensor scaling, Transformer-Engine style ("delayed scaling").
struct Fp8Options {
  DType forward = DType::f8e4m3;    ///< activations and weights in forward matmuls
  DType backward = DType::f8e5m2;   ///< gradients in backward matmuls (wider range)
  int amax_history_len = 1024;      ///< amax of the last N steps per tensor
  bool amax_use_max = true;         ///< scale from max of the history (else most recent amax)
  int margin = 0;                   ///< scale = 2^-margin * fp8_max / amax
};

/// What a device can do, as far as precision is concerned. query() asks the device backend;
/// tests build one by hand to check the CUDA decisions on a machine without a GPU.
struct DeviceCaps {
  Device device = Device::cpu();
  int sm_major = 0;  ///< CUDA compute capability (0 for CPU or unknown)
  int sm_minor = 0;
  std::string name;  ///< "cpu", "NVIDIA H100 80GB HBM3"
  /// CPU: {cpu}. CUDA: reads "gpu<N>_compute_capability" ("9.0") from the backend's
  /// environment(), else "sm_XY" in describe(). Throws Unsupported if the device cannot be had.
  static DeviceCaps query(Device device);
  static DeviceCaps cuda(int sm_major, int sm_minor, std::string name = "");
};

class PrecisionPolicy {
 public:
  /// The fp32 policy on CPU.
  PrecisionPolicy();
  /// Policy `name` for `device`; Unsupported with the reason if the device cannot run it
  /// (e.g. "precision tf32 is a CUDA math mode; on cpu run fp32 (or bf16/fp16 emulation)").
  static PrecisionPolicy create(std::string_view name, Device device);
  static PrecisionPolicy create(Precision precision, const DeviceCaps& caps);
  /// Whether create() would succeed; `why` receives the Unsupported message if not.
  static bool supported(Precision precision, const DeviceCaps& caps, std::string* why = nullptr);
  /// For Workload::check_support of a workload built from the SDK's layers: "" when a model that
  /// follows this policy through Module::set_precision() can train in precision `name` on
  /// `device`, else why not (an unknown name, a missing device, or supported() saying no). Under
  /// fp8 only Linear layers run fp8 products (nn/layers.hpp, Note [fp8 Linear]); a workload
  /// whose work is mostly elsewhere (convolutions) should refuse fp8 itself.
  static std::string layers_support(std::string_view name, Device device);

  Precision precision() const { return precision_; }
  const char* name() const { return precision_name(precision_); }
  Device device() const { return caps_.device; }
  const OpPrecision& op(OpClass c) const { return ops_[static_cast<int>(c)]; }
  DType storage_dtype(OpClass c) const { return op(c).storage; }
  DType compute_dtype(OpClass c) const { return op(c).compute; }
  /// Always f32: Parameter::value and optimizer state.
  DType master_weight_dtype() const { return DType::f32; }
  /// True for fp16: use a DynamicLossScaler with loss_scale_options().
  bool uses_loss_scaling() const { return precision_ == Precision::fp16; }
  /// True on CPU for fp16/bf16 (Note [Precision on CPU]).
  bool emulated() const { return emulated_; }
  const LossScaleOptions& loss_scale_options() const { return loss_scale_; }
  const Fp8Options& fp8_options() const { return fp8_; }
  /// Adjust the policy's parameters (e.g. from a workload's options) before use.
  PrecisionPolicy& set_loss_scale_options(const LossScaleOptions& o);
  PrecisionPolicy& set_fp8_options(const Fp8Options& o);
  /// "bf16 on cpu (emulated: fp32 arithmetic, outputs rounded to bf16)"; one line for reports.
  std::string describe() const;
  /// A table of the decisions, one line per op class, for logs and --verbose.
  std::string table() const;
  /// The policy's arithmetic mode for the calling thread while the returned scope lives
  /// (Note [Math modes]): TF32 tensor-core math on for tf32, explicitly off for every other
  /// policy (so an fp32 run is true fp32 even inside a tf32 caller); the previous mode comes
  /// back when the scope ends. Hold it on the thread that runs the step:
  ///   auto math = policy.math_scope();  // then forward/backward/optimizer
  /// On CPU it only sets the flag (CPU ops ignore it; a CPU tf32 policy cannot be created).
  nn::Tf32Scope math_scope() const { return nn::Tf32Scope(op(OpClass::matmul).tf32); }

 private:
  Precision precision_ = Precision::fp32;
  DeviceCaps caps_;
  bool emulated_ = false;
  OpPrecision ops_[kNumOpClasses];
  LossScaleOptions loss_scale_;
  Fp8Options fp8_;
};

/// Delayed per-tensor scaling of one fp8 tensor (Transformer Engine's recipe), device-agnostic
/// bookkeeping for the fp8 matmul path: before a cast to fp8 the values are multiplied by
/// scale(); the fp8 product is multiplied back by scale_inv(). After each step the tensor's
/// amax (max |x| of the unscaled values, measured by the kernel) is recorded; the scale for the
/// next step is fp8_max / max(amax history) / 2^margin (or the most recent amax when
/// Fp8Options::amax_use_max is false). A zero or non-finite amax keeps the previous scale.
/// Not thread-safe; one per fp8 tensor (weights, activations, gradients of each matmul).
///
/// The measurements come from the fp8 ops (op registry): "fp8_cast_scaled" casts with scale()
/// and writes the amax of its input, "matmul_fp8" takes the scale_inv() of both operands as
/// device scalars (cuBLASLt scale pointers) and writes the amax of its output; both amaxes are
/// f32 [1] tensors on the device, read back (4 bytes) for record_amax().
class Fp8DelayedScaling {
 public:
  /// fp8_type: f8e4m3 or f8e5m2 (InvalidArgument otherwise). Starts at scale 1.
  Fp8DelayedScaling(DType fp8_type, const Fp8Options& options = {});
  float scale() const { return scale_; }
  float scale_inv() const { return 1.0f / scale_; }
  /// Largest finite value of the type: 448 (e4m3) or 57344 (e5m2).
  float fp8_max() const { return fp8_max_; }
  DType type() const { return type_; }
  /// Record this step's amax and recompute the scale.
  void record_amax(float amax);
  /// The amax values in the history window, oldest first (at most amax_history_len).
  std::vector<float> history() const;

 private:
  DType type_;
  Fp8Options opt_;
  float fp8_max_;
  float scale_ = 1.0f;
  std::vector<float> ring_;
  std::size_t next_ = 0;
  std::size_t filled_ = 0;
};

/// Round the fp32 values of a CPU tensor in place through `storage` (f16, bf16, e4m3, e5m2;
/// f32 is a no-op): the emulation step of Note [Precision on CPU]. fp16 overflow becomes Inf,
/// as on a GPU. Throws InvalidArgument for a non-f32 tensor or a non-floating storage type.
void round_to_storage(Tensor& t, DType storage);

/// True if every gradient (only the sparse_rows for sparse parameters) is finite. CPU or CUDA
/// gradients ("multi_tensor_scale_check" per device; one 4-byte copy back per CUDA device).
bool grads_finite(const std::vector<nn::Parameter*>& params);

/// Dynamic loss scaling for fp16 training.
///
/// Per step:  loss_for_backward = scaler.scale_loss(loss)  (or seed backward with scaler.scale())
///            backward ...
///            if (scaler.unscale_and_update(params)) optimizer.step(lr);
///            zero_grad
/// unscale_and_update() multiplies every gradient by 1/scale, checks them for Inf/NaN, and
/// updates the scale: on overflow scale *= backoff (not below min_scale), the step is counted
/// as skipped and false is returned (the caller must not apply it; the gradients are garbage);
/// after growth_interval consecutive clean steps scale *= growth (not above max_scale).
/// Gradients may live on the CPU or on CUDA devices: unscaling and the Inf/NaN check are one
/// fused multi-tensor op per device ("multi_tensor_scale_check") whose found_inf flag stays on
/// the device; reading it is the one small device-to-host copy (and sync) per step.
class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScaleOptions options = {});

  float scale() const { return scale_; }
  float scale_loss(float loss) const { return loss * scale_; }
  /// Multiply gradients by 1/scale and report whether all are finite. Does not update the scale.
  bool unscale(const std::vector<nn::Parameter*>& params) const;
  /// Record one step's outcome and adjust the scale. Returns !found_overflow.
  bool update(bool found_overflow);
  /// unscale() then update(); true when the optimizer step should be applied.
  bool unscale_and_update(const std::vector<nn::Parameter*>& params);

  std::int64_t steps() const { return steps_; }                  ///< update() calls
  std::int64_t skipped_steps() const { return skipped_; }        ///< overflowed steps
  std::int64_t growth_count() const { return growths_; }
  std::int64_t backoff_count() const { return backoffs_; }
  std::int64_t clean_steps_since_change() const { return clean_run_; }
  const LossScaleOptions& options() const { return opt_; }
  /// "loss scale 32768, 3 of 1000 steps skipped (overflow), 2 growths, 3 backoffs"
  std::string report() const;

 private:
  LossScaleOptions opt_;
  float scale_;
  std::int64_t steps_ = 0, skipped_ = 0, growths_ = 0, backoffs_ = 0, clean_run_ = 0;
  // 1/scale as a one-element tensor per device, the unscale op's input; rebuilt only when the
  // scale changes (filling a device tensor costs a host-to-device copy).
  mutable float cached_inv_scale_ = 0.0f;
  mutable std::vector<Tensor> inv_scale_tensors_;
};

/// The precision side of a training step, the same for every workload built from the SDK's
/// layers: the policy the model follows and, under fp16, its dynamic loss scaler.
///
///   setup():       precision_ = TrainingPrecision(ctx.precision, ctx.device);
///                  model.to(ctx.device); model.set_precision(precision_.policy());
///   train_step():  const auto math = precision_.policy().math_scope();
///                  loss = model.forward(...);
///                  model.backward(precision_.loss_scale());   // d(loss * scale)
///                  [data-parallel gradient reduction]
///                  if (precision_.unscale_and_check(params)) { clip; optimizer.step(); }
///                  zero_grad();
///                  return {samples, loss, precision_.step_loss_scale(), precision_.update_skipped()};
/// Without loss scaling loss_scale() is 1, unscale_and_check() is true without touching the
/// gradients, and step_loss_scale() is 0 (the report then shows no loss-scaling fields).
/// Not thread-safe: owned by the training loop.
class TrainingPrecision {
 public:
  /// fp32 on the CPU.
  TrainingPrecision() = default;
  /// Throws Unsupported with PrecisionPolicy::layers_support()'s reason when the layers cannot
  /// run `name` on `device`.
  TrainingPrecision(std::string_view name, Device device);

  const PrecisionPolicy& policy() const { return policy_; }
  /// The factor to seed backward with: the dynamic loss scale under fp16, else 1.
  float loss_scale() const { return scaler_.has_value() ? scaler_->scale() : 1.0f; }
  /// After backward (and after any cross-rank gradient reduction, so every rank decides alike):
  /// under fp16, divides the gradients by the scale, checks them for Inf/NaN and updates the
  /// scale; false means the step overflowed and its update must be skipped. True otherwise.
  bool unscale_and_check(const std::vector<nn::Parameter*>& params);
  /// Whether the last unscale_and_check() said skip.
  bool update_skipped() const { return skipped_; }
  /// For StepResult::loss_scale: the scale after the last step under fp16, 0 without scaling.
  double step_loss_scale() const { return scaler_.has_value() ? scaler_->scale() : 0.0; }
  /// The scaler, when the policy uses loss scaling (else nullptr).
  const DynamicLossScaler* scaler() const { return scaler_.has_value() ? &*scaler_ : nullptr; }

 private:
  PrecisionPolicy policy_;
  std::optional<DynamicLossScaler> scaler_;
  bool skipped_ = false;
};

}  // namespace benchhost
