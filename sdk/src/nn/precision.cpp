#include "benchhost/precision.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <regex>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/multi_tensor.hpp"
#include "nn/parallel.hpp"

namespace benchhost {

const char* precision_name(Precision p) noexcept {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "fp32" || n == "f32" || n == "float32" || n == "float") return Precision::fp32;
  if (n == "tf32") return Precision::tf32;
  if (n == "fp16" || n == "f16" || n == "float16" || n == "half" || n == "amp")
    return Precision::fp16;
  if (n == "bf16" || n == "bfloat16") return Precision::bf16;
  if (n == "fp8" || n == "f8") return Precision::fp8;
  BH_THROW(InvalidArgument, "unknown precision '{}': expected one of fp32, tf32, fp16, bf16, fp8",
           name);
}

const char* op_class_name(OpClass c) noexcept {
  switch (c) {
    case OpClass::matmul: return "matmul";
    case OpClass::conv: return "conv";
    case OpClass::attention: return "attention";
    case OpClass::norm: return "norm";
    case OpClass::softmax: return "softmax";
    case OpClass::loss: return "loss";
    case OpClass::elementwise: return "elementwise";
    case OpClass::embedding: return "embedding";
    case OpClass::optimizer: return "optimizer";
  }
  return "?";
}

// ---- device capabilities ------------------------------------------------------------------------

DeviceCaps DeviceCaps::cuda(int sm_major, int sm_minor, std::string name) {
  DeviceCaps c;
  c.device = Device::cuda(0);
  c.sm_major = sm_major;
  c.sm_minor = sm_minor;
  c.name = name.empty() ? fmt::format("sm_{}{}", sm_major, sm_minor) : std::move(name);
  return c;
}

DeviceCaps DeviceCaps::query(Device device) {
  DeviceCaps c;
  c.device = device;
  if (device.is_cpu()) {
    c.name = "cpu";
    return c;
  }
  DeviceBackend& be = device_backend(device.type);  // Unsupported if CUDA cannot be loaded
  BH_CHECK_AS(Unsupported, device.index < be.device_count(),
              "device {} does not exist: {} CUDA device(s) visible", device.str(),
              be.device_count());
  c.name = be.describe(device.index);
  // Note [Compute capability discovery]
  // The CUDA backend's environment() carries "gpu<N>_compute_capability" = "9.0" per device
  // (older or other backends: plain "compute_capability"); failing that, describe() carries
  // "sm_90". Either gives (major, minor); unknown stays (0, 0), which allows fp32 only.
  const std::string per_device = fmt::format("gpu{}_compute_capability", device.index);
  for (const auto& [k, v] : be.environment()) {
    if (k != per_device && k != "compute_capability") continue;
    int maj = 0, min = 0;
    if (std::sscanf(v.c_str(), "%d.%d", &maj, &min) == 2) {
      c.sm_major = maj;
      c.sm_minor = min;
      return c;
    }
  }
  std::smatch m;
  static const std::regex sm_re("sm_([0-9]+)([0-9])");
  if (std::regex_search(c.name, m, sm_re)) {
    c.sm_major = std::stoi(m[1].str());
    c.sm_minor = std::stoi(m[2].str());
  }
  return c;
}

// ---- policy -------------------------------------------------------------------------------------

namespace {

OpPrecision op(DType storage, DType compute, DType acc = DType::f32) {
  OpPrecision o;
  o.storage = storage;
  o.compute = compute;
  o.accumulate = acc;
  return o;
}

void fill_table(Precision p, OpPrecision (&ops)[kNumOpClasses]) {
  auto set = [&](OpClass c, OpPrecision o) { ops[static_cast<int>(c)] = o; };
  const OpPrecision f32 = op(DType::f32, DType::f32);
  for (auto& o : ops) o = f32;
  switch (p) {
    case Precision::fp32:
      break;
    case Precision::tf32:
      for (OpClass c : {OpClass::matmul, OpClass::conv, OpClass::attention}) {
        OpPrecision o = f32;
        o.tf32 = true;
        set(c, o);
      }
      break;
    case Precision::fp16:
    case Precision::bf16:
    case Precision::fp8: {
      // Note [Mixed-precision op lists]
      // Tensor-core ops (matmul, conv, attention) read and write the half type and accumulate
      // in fp32; norms and element-wise ops store the half type but compute in fp32 (their
      // statistics and transcendental functions lose too much otherwise); softmax and losses
      // stay fp32 end to end (exp overflows fp16, and the loss is where the scaler looks);
      // embeddings emit the half type from fp32 tables; the optimizer is fp32 (master weights).
      // These are the lists of PyTorch AMP and apex O1/O2, which the peers use.
      const DType h = p == Precision::fp16 ? DType::f16 : DType::bf16;
      for (OpClass c : {OpClass::matmul, OpClass::conv, OpClass::attention}) set(c, op(h, h));
      for (OpClass c : {OpClass::norm, OpClass::elementwise, OpClass::embedding})
        set(c, op(h, DType::f32));
      if (p == Precision::fp8) {
        OpPrecision mm = op(h, DType::f8e4m3);
        mm.fp8_scaled = true;
        mm.fp8_grad = DType::f8e5m2;
        set(OpClass::matmul, mm);
      }
      break;
    }
  }
}

// Minimum compute capability per precision on CUDA (major*10 + minor).
int min_sm(Precision p) {
  switch (p) {
    case Precision::fp32: return 0;
    case Precision::fp16: return 70;
    case Precision::tf32: case Precision::bf16: return 80;
    case Precision::fp8: return 90;
  }
  return 0;
}

const char* min_sm_reason(Precision p) {
  switch (p) {
    case Precision::fp16: return "fp16 tensor cores need Volta (sm_70) or newer";
    case Precision::tf32: return "TF32 tensor-core math needs Ampere (sm_80) or newer";
    case Precision::bf16: return "bf16 tensor cores need Ampere (sm_80) or newer";
    case Precision::fp8: return "fp8 tensor cores (scaled e4m3/e5m2 matmuls) need Hopper (sm_90) or newer";
    default: return "";
  }
}

}  // namespace

PrecisionPolicy::PrecisionPolicy() {
  caps_.name = "cpu";
  fill_table(Precision::fp32, ops_);
}

bool PrecisionPolicy::supported(Precision p, const DeviceCaps& caps, std::string* why) {
  std::string reason;
  if (caps.device.is_cpu()) {
    if (p == Precision::tf32)
      reason = "precision tf32 is a CUDA math mode (TF32 tensor cores) and does not exist on cpu; "
               "run fp32 on cpu (or bf16/fp16, which the cpu emulates)";
    else if (p == Precision::fp8)
      reason = "precision fp8 needs a Hopper GPU (sm_90+) for scaled e4m3/e5m2 matmuls; cpu has no "
               "fp8 arithmetic; run bf16 or fp32 on cpu";
  } else if (p != Precision::fp32) {
    const int sm = caps.sm_major * 10 + caps.sm_minor;
    if (caps.sm_major == 0)
      reason = fmt::format("precision {} on {}: the compute capability of '{}' is unknown, so only "
                           "fp32 can be assumed", precision_name(p), caps.device.str(), caps.name);
    else if (sm < min_sm(p))
      reason = fmt::format("precision {} is not supported on {} ({}, sm_{}{}): {}",
                           precision_name(p), caps.device.str(), caps.name, caps.sm_major,
                           caps.sm_minor, min_sm_reason(p));
  }
  if (why) *why = reason;
  return reason.empty();
}

std::string PrecisionPolicy::layers_support(std::string_view name, Device device) {
  std::string why;
  try {
    const Precision p = parse_precision(name);
    if (!supported(p, DeviceCaps::query(device), &why)) return why;
  } catch (const Error& e) {
    return e.message();  // an unknown precision name, or a device that cannot be had
  }
  return {};
}

PrecisionPolicy PrecisionPolicy::create(Precision p, const DeviceCaps& caps) {
  std::string why;
  if (!supported(p, caps, &why)) throw Unsupported(why, __FILE__, __LINE__);
  PrecisionPolicy pol;
  pol.precision_ = p;
  pol.caps_ = caps;
  pol.emulated_ = caps.device.is_cpu() && (p == Precision::fp16 || p == Precision::bf16);
  fill_table(p, pol.ops_);
  return pol;
}

PrecisionPolicy PrecisionPolicy::create(std::string_view name, Device device) {
  const Precision p = parse_precision(name);
  return create(p, DeviceCaps::query(device));
}

PrecisionPolicy& PrecisionPolicy::set_loss_scale_options(const LossScaleOptions& o) {
  DynamicLossScaler check(o);  // validates
  loss_scale_ = o;
  return *this;
}

PrecisionPolicy& PrecisionPolicy::set_fp8_options(const Fp8Options& o) {
  BH_CHECK_AS(InvalidArgument, (o.forward == DType::f8e4m3 || o.forward == DType::f8e5m2) &&
              (o.backward == DType::f8e4m3 || o.backward == DType::f8e5m2),
              "fp8 options: forward and backward types must be f8e4m3 or f8e5m2, got {} and {}",
              dtype_name(o.forward), dtype_name(o.backward));
  BH_CHECK_AS(InvalidArgument, o.amax_history_len >= 1 && o.margin >= 0,
              "fp8 options: need amax_history_len >= 1 ({}) and margin >= 0 ({})",
              o.amax_history_len, o.margin);
  fp8_ = o;
  if (precision_ == Precision::fp8) {
    OpPrecision& mm = ops_[static_cast<int>(OpClass::matmul)];
    mm.compute = o.forward;
    mm.fp8_grad = o.backward;
  }
  return *this;
}

std::string PrecisionPolicy::describe() const {
  std::string s = fmt::format("{} on {}", name(), caps_.device.str());
  if (emulated_)
    s += fmt::format(" (emulated: fp32 arithmetic, outputs rounded to {}; numerics only, not "
                     "mixed-precision speed)", precision_ == Precision::fp16 ? "fp16" : "bf16");
  if (uses_loss_scaling())
    s += fmt::format(", dynamic loss scaling from {}", loss_scale_.init_scale);
  if (precision_ == Precision::fp8)
    s += fmt::format(", fp8 {}/{} with amax history {}", dtype_name(fp8_.forward),
                     dtype_name(fp8_.backward), fp8_.amax_history_len);
  return s;
}

std::string PrecisionPolicy::table() const {
  std::string s = fmt::format("{:<12} {:<8} {:<8} {:<6} {}\n", "op class", "storage", "compute",
                              "acc", "notes");
  for (int i = 0; i < kNumOpClasses; ++i) {
    const OpPrecision& o = ops_[i];
    std::string notes;
    if (o.tf32) notes = "tf32 math";
    if (o.fp8_scaled) notes = fmt::format("fp8 scaled, grads {}", dtype_name(o.fp8_grad));
    s += fmt::format("{:<12} {:<8} {:<8} {:<6} {}\n", op_class_name(static_cast<OpClass>(i)),
                     dtype_name(o.storage), dtype_name(o.compute), dtype_name(o.accumulate), notes);
  }
  return s;
}

// ---- fp8 delayed scaling ------------------------------------------------------------------------

Fp8DelayedScaling::Fp8DelayedScaling(DType fp8_type, const Fp8Options& o) : type_(fp8_type), opt_(o) {
  BH_CHECK_AS(InvalidArgument, fp8_type == DType::f8e4m3 || fp8_type == DType::f8e5m2,
              "fp8 scaling: type must be f8e4m3 or f8e5m2, got {}", dtype_name(fp8_type));
  BH_CHECK_AS(InvalidArgument, o.amax_history_len >= 1 && o.margin >= 0,
              "fp8 scaling: need amax_history_len >= 1 ({}) and margin >= 0 ({})",
              o.amax_history_len, o.margin);
  fp8_max_ = fp8_type == DType::f8e4m3 ? 448.0f : 57344.0f;
  ring_.assign(static_cast<std::size_t>(o.amax_history_len), 0.0f);
}

void Fp8DelayedScaling::record_amax(float amax) {
  if (!std::isfinite(amax)) return;  // an overflowed step tells nothing about the range
  ring_[next_] = std::fabs(amax);
  next_ = (next_ + 1) % ring_.size();
  filled_ = std::min(filled_ + 1, ring_.size());
  float ref = std::fabs(amax);
  if (opt_.amax_use_max)
    for (std::size_t i = 0; i < filled_; ++i) ref = std::max(ref, ring_[i]);
  if (ref > 0.0f) scale_ = std::ldexp(fp8_max_ / ref, -opt_.margin);
}

std::vector<float> Fp8DelayedScaling::history() const {
  std::vector<float> out;
  const std::size_t start = filled_ < ring_.size() ? 0 : next_;
  for (std::size_t i = 0; i < filled_; ++i) out.push_back(ring_[(start + i) % ring_.size()]);
  return out;
}

// ---- emulation ----------------------------------------------------------------------------------

void round_to_storage(Tensor& t, DType storage) {
  BH_CHECK_AS(InvalidArgument, t.defined() && t.dtype() == DType::f32 && t.device().is_cpu() &&
              t.is_contiguous(),
              "round_to_storage: expected a contiguous f32 CPU tensor, got {}",
              t.defined() ? t.describe() : std::string("an undefined tensor"));
  float* x = t.data<float>();
  auto run = [&](auto&& round) {
    nn::detail::parallel_chunks(t.numel(), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t k = b; k < e; ++k) x[k] = round(x[k]);
    });
  };
  switch (storage) {
    case DType::f32: return;
    case DType::f16: return run([](float v) { return half_to_float(float_to_half(v)); });
    case DType::bf16: return run([](float v) { return bf16_to_float(float_to_bf16(v)); });
    case DType::f8e4m3: return run([](float v) { return e4m3_to_float(float_to_e4m3(v)); });
    case DType::f8e5m2: return run([](float v) { return e5m2_to_float(float_to_e5m2(v)); });
    default:
      BH_THROW(InvalidArgument, "round_to_storage: {} is not a floating storage type",
               dtype_name(storage));
  }
}

// ---- loss scaling -------------------------------------------------------------------------------

namespace {

// Multiply every meaningful gradient element by `mul` and report whether any is Inf/NaN: one
// "multi_tensor_scale_check" op per device; the found_inf flag stays on the device until this
// reads it (one 4-byte copy per CUDA device and step). `mul_on` gives `mul` as a one-element
// tensor on a device (the loss scaler caches them: filling a device tensor is a host copy).
template <class MulOn>
bool scale_and_check_finite(const std::vector<nn::Parameter*>& params, MulOn&& mul_on, const char* what) {
  for (auto* p : params) nn::detail::check_f32_parameter(*p, what, true, true);
  std::vector<Tensor> flags;
  for (const auto& g : nn::detail::group_by_device(params)) {
    nn::OpCall c;
    c.inputs.push_back(mul_on(g.device));
    for (std::size_t i : g.index) c.inputs.push_back(nn::detail::rows_on(*params[i], g.device));
    for (std::size_t i : g.index) c.outputs.push_back(params[i]->grad);
    c.outputs.push_back(Tensor::empty({1}, DType::f32, g.device));  // overwritten by the op
    nn::dispatch(nn::detail::kScaleCheckOp, c);
    flags.push_back(c.outputs.back());
  }
  bool finite = true;
  for (const Tensor& f : flags) finite &= f.to(Device::cpu()).item({0}) == 0.0;
  return finite;
}

}  // namespace

bool grads_finite(const std::vector<nn::Parameter*>& params) {
  return scale_and_check_finite(
      params, [](Device d) { return Tensor::full({1}, 1.0, DType::f32, d); }, "grads_finite");
}

DynamicLossScaler::DynamicLossScaler(LossScaleOptions o) : opt_(o), scale_(o.init_scale) {
  BH_CHECK_AS(InvalidArgument, std::isfinite(o.init_scale) && o.init_scale > 0.0f &&
              o.growth_factor > 1.0f && o.backoff_factor > 0.0f && o.backoff_factor < 1.0f &&
              o.growth_interval >= 1 && o.min_scale > 0.0f && o.min_scale <= o.init_scale &&
              o.init_scale <= o.max_scale && std::isfinite(o.max_scale),
              "loss scaler: need 0 < min_scale <= init_scale <= max_scale (finite), growth_factor "
              "> 1, 0 < backoff_factor < 1, growth_interval >= 1; got init {} min {} max {} growth "
              "{} backoff {} interval {}", o.init_scale, o.min_scale, o.max_scale,
              o.growth_factor, o.backoff_factor, o.growth_interval);
}

bool DynamicLossScaler::unscale(const std::vector<nn::Parameter*>& params) const {
  const float inv = 1.0f / scale_;
  if (inv != cached_inv_scale_) {
    inv_scale_tensors_.clear();
    cached_inv_scale_ = inv;
  }
  auto mul_on = [&](Device d) {
    for (const Tensor& t : inv_scale_tensors_)
      if (t.device() == d) return t;
    inv_scale_tensors_.push_back(Tensor::full({1}, inv, DType::f32, d));
    return inv_scale_tensors_.back();
  };
  return scale_and_check_finite(params, mul_on, "loss scaler");
}

bool DynamicLossScaler::update(bool found_overflow) {
  ++steps_;
  if (found_overflow) {
    ++skipped_;
    ++backoffs_;
    clean_run_ = 0;
    scale_ = std::max(opt_.min_scale, scale_ * opt_.backoff_factor);
    return false;
  }
  if (++clean_run_ >= opt_.growth_interval) {
    const float grown = std::min(opt_.max_scale, scale_ * opt_.growth_factor);
    if (grown != scale_) ++growths_;
    scale_ = grown;
    clean_run_ = 0;
  }
  return true;
}

bool DynamicLossScaler::unscale_and_update(const std::vector<nn::Parameter*>& params) {
  return update(!unscale(params));
}

std::string DynamicLossScaler::report() const {
  return fmt::format("loss scale {}, {} of {} steps skipped (overflow), {} growths, {} backoffs",
                     scale_, skipped_, steps_, growths_, backoffs_);
}

// ---- training precision ---------------------------------------------------------------------

TrainingPrecision::TrainingPrecision(std::string_view name, Device device) {
  const std::string why = PrecisionPolicy::layers_support(name, device);
  if (!why.empty()) throw Unsupported(why, __FILE__, __LINE__);
  policy_ = PrecisionPolicy::create(name, device);
  if (policy_.uses_loss_scaling()) scaler_.emplace(policy_.loss_scale_options());
}

bool TrainingPrecision::unscale_and_check(const std::vector<nn::Parameter*>& params) {
  skipped_ = scaler_.has_value() && !scaler_->unscale_and_update(params);
  return !skipped_;
}

}  // namespace benchhost
