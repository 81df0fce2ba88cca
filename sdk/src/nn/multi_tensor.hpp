#pragma once
// The multi-tensor optimizer ops: their names, call layouts and the scalar formulas that the CPU
// implementations (sdk/src/nn/cpu/optim_multi.cpp) and the CUDA ones
// (sdk/src/nn/cuda/optim_multi.cu) share, and the helpers their callers (the optimizers,
// clipping, EMA and the loss scaler) build a call with (multi_tensor.cpp). Plain header: no
// oneTBB, usable from nvcc.
//
// Note [Multi-tensor optimizer ops]
// The optimizers, clipping, EMA and the loss scaler do their element work through registered
// ops so that the SDK core never calls CUDA (Note [Op registry]): one op call covers a whole
// list of n tensors (all parameters of an optimizer that live on one device), and a CUDA
// implementation turns it into a few fused launches (Note [Multi-tensor apply] in
// nn/cuda/optim_common.hpp). Tensors updated in place are *outputs* (the registry's outputs are
// written, never resized); tensors only read are inputs. Per-tensor flags are integer lists.
// With n tensors, the layouts are:
//
//   optim_sgd_multi      in {grad[n], rows[n]}       out {w[n], momentum_buf[n]}
//   optim_lars_multi     in {grad[n]}                out {w[n], velocity[n], trust [n]}
//   optim_lamb_multi     in {grad[n]}                out {w[n], exp_avg[n], exp_avg_sq[n], trust [n]}
//   optim_adam_multi     in {grad[n], rows[n]}       out {w[n], exp_avg[n], exp_avg_sq[n]}
//   optim_adagrad_multi  in {grad[n], rows[n]}       out {w[n], sum[n]}
//   multi_tensor_sumsq   in {x[n], rows[n]}          out {sumsq f64 [n]}
//   multi_tensor_scale_check  in {mul f32 [1], rows[n]}  out {x[n], found_inf f32 [1]}
//   multi_tensor_lerp    in {w[n]}                   out {shadow[n]}
//   multi_tensor_fill    in {value f32 [1]}          out {x[n]}
//
// rows[i] is undefined for a dense tensor, else an i64 [r] tensor of unique row indices into
// the first dimension on the tensor's device (Note [Sparse rows]); the callers validate them
// (range, uniqueness) before the call. momentum_buf[i] is undefined when momentum is 0. Every
// float tensor is contiguous f32 on one device. Attribute "decay" (ints, one per tensor) is the
// Parameter::weight_decay flag: 0 puts the tensor on the skip list (no decay, and for LARS and
// LAMB no trust ratio). "trust" receives the trust ratio applied to each tensor.

#include <cmath>
#include <cstddef>
#include <vector>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/random.hpp"  // BH_HOST_DEVICE

namespace benchhost::nn {
struct Parameter;
}  // namespace benchhost::nn

namespace benchhost::nn::detail {

inline constexpr const char* kSgdOp = "optim_sgd_multi";
inline constexpr const char* kLarsOp = "optim_lars_multi";
inline constexpr const char* kLambOp = "optim_lamb_multi";
inline constexpr const char* kAdamOp = "optim_adam_multi";
inline constexpr const char* kAdagradOp = "optim_adagrad_multi";
inline constexpr const char* kSumSqOp = "multi_tensor_sumsq";
inline constexpr const char* kScaleCheckOp = "multi_tensor_scale_check";
inline constexpr const char* kLerpOp = "multi_tensor_lerp";
inline constexpr const char* kFillOp = "multi_tensor_fill";

/// LARS trust ratio from the L2 norms of w and g (Lars in optim/optimizer.hpp): 1 on the skip
/// list or when either norm is 0 (or not finite).
BH_HOST_DEVICE inline float lars_trust_ratio(bool decay, double w_norm, double g_norm, float eta,
                                             float weight_decay, float epsilon) {
  if (!decay || !(w_norm > 0.0) || !(g_norm > 0.0)) return 1.0f;
  return static_cast<float>(eta * w_norm / (g_norm + weight_decay * w_norm + epsilon));
}

/// LAMB trust ratio ||w|| / ||u||: 1 on the skip list or when either norm is 0.
BH_HOST_DEVICE inline float lamb_trust_ratio(bool decay, double w_norm, double u_norm) {
  if (!decay || !(w_norm > 0.0) || !(u_norm > 0.0)) return 1.0f;
  return static_cast<float>(w_norm / u_norm);
}

/// 1 / (1 - beta^t), the Adam/LAMB bias correction at step t >= 1 (1 when disabled).
inline float inverse_bias_correction(float beta, double t, bool enabled = true) {
  return enabled ? static_cast<float>(1.0 / (1.0 - std::pow(beta, t))) : 1.0f;
}

// Number of tensors n of a call with `in_front` leading inputs then `in_lists` lists of n, and
// `out_lists` lists of n outputs then `out_back` trailing outputs. Checks the counts, the
// per-tensor shapes (every list matches list 0 of the outputs, or of the inputs when there are
// no output lists), dtypes, devices (all of type `device`, one device index) and rows (range
// checked on the CPU only: on a GPU that would need a copy; callers validate rows), and the
// "decay" list when `needs_decay`.
inline std::size_t check_multi_tensor_call(const nn::OpCall& c, const char* op, DeviceType device,
                                           std::size_t in_front, std::size_t in_lists,
                                           std::size_t out_lists, std::size_t out_back,
                                           bool has_rows, bool needs_decay) {
  const std::size_t lists_in = in_lists + (has_rows ? 1 : 0);
  std::size_t n = 0;
  if (out_lists > 0) {
    BH_CHECK_AS(InvalidArgument, c.outputs.size() >= out_back && (c.outputs.size() - out_back) % out_lists == 0,
                "{}: {} outputs do not form {} lists plus {} trailing tensors", op, c.outputs.size(),
                out_lists, out_back);
    n = (c.outputs.size() - out_back) / out_lists;
  } else {
    BH_CHECK_AS(InvalidArgument, c.inputs.size() >= in_front && (c.inputs.size() - in_front) % lists_in == 0,
                "{}: {} inputs do not form {} lists after {} leading tensors", op, c.inputs.size(),
                lists_in, in_front);
    n = (c.inputs.size() - in_front) / lists_in;
  }
  BH_CHECK_AS(InvalidArgument, c.inputs.size() == in_front + lists_in * n,
              "{}: expected {} inputs for {} tensors, got {}", op, in_front + lists_in * n, n,
              c.inputs.size());
  if (needs_decay)
    BH_CHECK_AS(InvalidArgument, c.attrs.get_ints("decay").size() == n,
                "{}: attribute decay must hold one flag per tensor ({}), has {}", op, n,
                c.attrs.get_ints("decay").size());
  const Device dev = n > 0 ? (out_lists > 0 ? c.outputs[0] : c.inputs[in_front]).device() : Device::cpu();
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor& ref = out_lists > 0 ? c.outputs[i] : c.inputs[in_front + i];
    BH_CHECK_AS(InvalidArgument, ref.defined(), "{}: tensor {} is undefined", op, i);
    auto check_like = [&](const Tensor& t, const char* what) {
      if (!t.defined()) return;
      BH_CHECK_AS(InvalidArgument, t.shape() == ref.shape() && t.dtype() == DType::f32 &&
                  t.is_contiguous() && t.device().type == device && t.device() == dev,
                  "{}: {} of tensor {} is {}, expected a contiguous f32 tensor of shape {} on {}", op,
                  what, i, t.describe(), shape_str(ref.shape()), dev.str());
    };
    for (std::size_t l = 0; l < out_lists; ++l) check_like(c.outputs[l * n + i], "output list");
    for (std::size_t l = 0; l < in_lists; ++l) {
      BH_CHECK_AS(InvalidArgument, c.inputs[in_front + l * n + i].defined(), "{}: input {} of tensor {} is undefined", op, l, i);
      check_like(c.inputs[in_front + l * n + i], "input list");
    }
    if (!has_rows) continue;
    const Tensor& r = c.inputs[in_front + in_lists * n + i];
    if (!r.defined()) continue;
    BH_CHECK_AS(InvalidArgument, r.dtype() == DType::i64 && r.dim() == 1 && r.is_contiguous() &&
                r.device() == dev && ref.dim() >= 1,
                "{}: rows of tensor {} is {}, expected a contiguous 1-d i64 tensor on {}", op, i,
                r.describe(), dev.str());
    if (!dev.is_cpu()) continue;
    const std::int64_t* idx = r.data<std::int64_t>();
    for (std::int64_t k = 0; k < r.numel(); ++k)
      BH_CHECK_AS(InvalidArgument, idx[k] >= 0 && idx[k] < ref.size(0),
                  "{}: rows of tensor {} holds row {}, outside [0, {})", op, i, idx[k], ref.size(0));
  }
  return n;
}

/// Validate a parameter for the fp32 update paths (InvalidArgument / Unsupported with the
/// parameter's name). `what` names the caller ("sgd", "clip_grad_norm"). The value may live on
/// the CPU or on a CUDA device; the gradient must be on the same device; sparse_rows may be on
/// either (they are checked on the host: one small device-to-host copy when they are on a GPU).
void check_f32_parameter(const nn::Parameter& p, const char* what, bool need_grad,
                         bool allow_sparse_rows);

/// Parameters that live on one device, by index into the list.
struct DeviceGroup {
  Device device;
  std::vector<std::size_t> index;
};
/// The parameters grouped by the device of their value, in order of first appearance.
std::vector<DeviceGroup> group_by_device(const std::vector<nn::Parameter*>& params);
/// p.sparse_rows on `device` (copied there when it lives elsewhere), or undefined.
Tensor rows_on(const nn::Parameter& p, Device device);

}  // namespace benchhost::nn::detail
