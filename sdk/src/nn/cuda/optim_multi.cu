// CUDA implementations of the multi-tensor optimizer ops (Note [Multi-tensor optimizer ops] in
// nn/multi_tensor.hpp): SGD, LARS, LAMB, Adam/AdamW, Adagrad (dense and sparse rows),
// per-tensor sums of squares (clipping), unscale-and-check-finite (loss scaling), lerp (EMA) and
// fill (zero_grad).
//
// Layout and precision: every tensor is contiguous f32; state is f32; arithmetic is f32 in the
// same order as the CPU loops (nn/cpu/optim_multi.cpp), so results agree to rounding (nvcc
// contracts a*b+c into FMAs where the CPU may not). Norms accumulate in double: each thread over
// its elements of a chunk, then a fixed shared-memory tree per block, then the chunks of a
// tensor in slot order (Note [Multi-tensor apply]); the result does not depend on scheduling.
// One launch covers many tensors; LARS is three launches groups (norms, per-tensor totals,
// update), LAMB likewise (moments + norms, totals, update); nothing synchronises the host.

#include <algorithm>

#include "nn/cuda/optim_common.hpp"
#include "nn/multi_tensor.hpp"

namespace benchhost::nn::cuda {
namespace mt {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

// Element offset of virtual element k of tensor ti (Note [Multi-tensor apply]: sparse rows).
template <int K>
__device__ __forceinline__ std::int64_t offset_of(const Table<K>& t, int ti, std::int64_t k) {
  const std::int64_t* rows = t.rows[ti];
  if (rows == nullptr) return k;
  const std::int64_t rl = t.row_len[ti];
  return rows[k / rl] * rl + k % rl;
}

template <int K>
__device__ __forceinline__ void chunk_bounds(const Table<K>& t, int ti, std::int64_t* begin, std::int64_t* end) {
  *begin = static_cast<std::int64_t>(t.block_chunk[blockIdx.x]) * kChunk;
  const std::int64_t stop = *begin + kChunk;
  *end = stop < t.span[ti] ? stop : t.span[ti];
}

// Sum acc[p] over the block (fixed tree: deterministic) and store it to out[p] from thread 0.
// Needs blockDim.x == kThreads.
template <int P>
__device__ void block_sum_store(double (&acc)[P], double* out) {
  __shared__ double sh[P][kThreads];
  for (int p = 0; p < P; ++p) sh[p][threadIdx.x] = acc[p];
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s)
      for (int p = 0; p < P; ++p) sh[p][threadIdx.x] += sh[p][threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int p = 0; p < P; ++p) out[p] = sh[p][0];
}

// Element-wise update: op.block_scalar(t, ti) once per block (per-tensor values such as a trust
// ratio), then op(t, ti, offset, scalar) per element of the block's chunk.
template <int K, class Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Table<K> t, Op op) {
  const int ti = t.block_tensor[blockIdx.x];
  std::int64_t begin, end;
  chunk_bounds(t, ti, &begin, &end);
  const float scalar = op.block_scalar(t, ti);
  for (std::int64_t k = begin + threadIdx.x; k < end; k += kThreads) op(t, ti, offset_of(t, ti, k), scalar);
}

// Partial sums of squares of each of the K lists over the block's chunk -> partial[slot*K + p].
template <int K>
__global__ void __launch_bounds__(kThreads) sumsq_partial_kernel(Table<K> t, double* partial) {
  const int ti = t.block_tensor[blockIdx.x];
  std::int64_t begin, end;
  chunk_bounds(t, ti, &begin, &end);
  double acc[K] = {};
  for (std::int64_t k = begin + threadIdx.x; k < end; k += kThreads) {
    const std::int64_t off = offset_of(t, ti, k);
    for (int p = 0; p < K; ++p) {
      const double x = t.ptr[p][ti][off];
      acc[p] += x * x;
    }
  }
  const std::int64_t slot = t.slot0[ti] + t.block_chunk[blockIdx.x];
  block_sum_store<K>(acc, partial + slot * K);
}

constexpr int kMaxFinalize = 128;
struct FinalizeTable {
  std::int64_t slot0[kMaxFinalize];
  std::int64_t chunks[kMaxFinalize];
  int id[kMaxFinalize];
};

// One block per tensor: totals[id*P + p] = sum of its chunks' partials (fixed order per thread,
// then the fixed tree).
template <int P>
__global__ void __launch_bounds__(kThreads) finalize_kernel(FinalizeTable f, const double* partial, double* totals) {
  const int b = blockIdx.x;
  double acc[P] = {};
  for (std::int64_t c = threadIdx.x; c < f.chunks[b]; c += kThreads)
    for (int p = 0; p < P; ++p) acc[p] += partial[(f.slot0[b] + c) * P + p];
  block_sum_store<P>(acc, totals + static_cast<std::int64_t>(f.id[b]) * P);
}

__global__ void fill_kernel(float* p, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

// ---- element ops --------------------------------------------------------------------------------

// ptr: w, g, momentum buffer (null when momentum is 0).
struct SgdOp {
  float lr, momentum;
  bool nesterov;
  __device__ float block_scalar(const Table<3>&, int) const { return 0.0f; }
  __device__ void operator()(const Table<3>& t, int ti, std::int64_t k, float) const {
    float* w = t.ptr[0][ti];
    const float g = t.ptr[1][ti][k];
    float* buf = t.ptr[2][ti];
    const float d = g + t.wd[ti] * w[k];
    if (buf == nullptr) {
      w[k] -= lr * d;
      return;
    }
    const float b = momentum * buf[k] + d;
    buf[k] = b;
    w[k] -= nesterov ? lr * (d + momentum * b) : lr * b;
  }
};

// ptr: w, g, velocity. Scalar: the LR scaled by the tensor's trust ratio (from totals of
// ||w||^2, ||g||^2); chunk 0 of each tensor records the ratio.
struct LarsOp {
  float lr, momentum, eta, epsilon;
  const double* totals;
  float* trust;
  __device__ float block_scalar(const Table<3>& t, int ti) const {
    const int id = t.id[ti];
    const bool decay = t.decay[ti] != 0;
    const float ratio = detail::lars_trust_ratio(decay, sqrt(totals[2 * id]), sqrt(totals[2 * id + 1]),
                                                        eta, t.wd[ti], epsilon);
    if (t.block_chunk[blockIdx.x] == 0 && threadIdx.x == 0) trust[id] = ratio;
    return decay ? lr * ratio : lr;
  }
  __device__ void operator()(const Table<3>& t, int ti, std::int64_t k, float scaled_lr) const {
    float* w = t.ptr[0][ti];
    float* v = t.ptr[2][ti];
    const float vk = momentum * v[k] + scaled_lr * (t.ptr[1][ti][k] + t.wd[ti] * w[k]);
    v[k] = vk;
    w[k] -= vk;
  }
};

struct LambParams {
  float lr, beta1, beta2, epsilon, inv_bc1, inv_bc2;
};

// LAMB pass 1, ptr: w, g, m, v. Updates the moments; partial sums of w^2 and u^2.
__global__ void __launch_bounds__(kThreads) lamb_moments_kernel(Table<4> t, LambParams p, double* partial) {
  const int ti = t.block_tensor[blockIdx.x];
  std::int64_t begin, end;
  chunk_bounds(t, ti, &begin, &end);
  const float wd = t.wd[ti];
  double acc[2] = {0.0, 0.0};
  float* w = t.ptr[0][ti];
  const float* g = t.ptr[1][ti];
  float* m = t.ptr[2][ti];
  float* v = t.ptr[3][ti];
  for (std::int64_t k = begin + threadIdx.x; k < end; k += kThreads) {
    const float gk = g[k];
    const float mk = p.beta1 * m[k] + (1.0f - p.beta1) * gk;
    const float vk = p.beta2 * v[k] + (1.0f - p.beta2) * gk * gk;
    m[k] = mk;
    v[k] = vk;
    const float u = (mk * p.inv_bc1) / (sqrtf(vk * p.inv_bc2) + p.epsilon) + wd * w[k];
    const double wk = w[k];
    acc[0] += wk * wk;
    acc[1] += static_cast<double>(u) * u;
  }
  const std::int64_t slot = t.slot0[ti] + t.block_chunk[blockIdx.x];
  block_sum_store<2>(acc, partial + slot * 2);
}

// LAMB pass 2, ptr: w, m, v. Scalar: lr * trust ratio.
struct LambUpdateOp {
  LambParams p;
  const double* totals;
  float* trust;
  __device__ float block_scalar(const Table<3>& t, int ti) const {
    const int id = t.id[ti];
    const float ratio = detail::lamb_trust_ratio(t.decay[ti] != 0, sqrt(totals[2 * id]), sqrt(totals[2 * id + 1]));
    if (t.block_chunk[blockIdx.x] == 0 && threadIdx.x == 0) trust[id] = ratio;
    return p.lr * ratio;
  }
  __device__ void operator()(const Table<3>& t, int ti, std::int64_t k, float step) const {
    float* w = t.ptr[0][ti];
    const float mk = t.ptr[1][ti][k], vk = t.ptr[2][ti][k];
    w[k] -= step * ((mk * p.inv_bc1) / (sqrtf(vk * p.inv_bc2) + p.epsilon) + t.wd[ti] * w[k]);
  }
};

// ptr: w, g, m, v.
struct AdamOp {
  LambParams p;
  bool decoupled;
  __device__ float block_scalar(const Table<4>&, int) const { return 0.0f; }
  __device__ void operator()(const Table<4>& t, int ti, std::int64_t k, float) const {
    float* w = t.ptr[0][ti];
    float* m = t.ptr[2][ti];
    float* v = t.ptr[3][ti];
    const float wd = t.wd[ti];
    const float l2 = decoupled ? 0.0f : wd, dec = decoupled ? wd : 0.0f;
    const float gk = t.ptr[1][ti][k] + l2 * w[k];
    const float mk = p.beta1 * m[k] + (1.0f - p.beta1) * gk;
    const float vk = p.beta2 * v[k] + (1.0f - p.beta2) * gk * gk;
    m[k] = mk;
    v[k] = vk;
    w[k] -= p.lr * ((mk * p.inv_bc1) / (sqrtf(vk * p.inv_bc2) + p.epsilon) + dec * w[k]);
  }
};

// ptr: w, g, sum.
struct AdagradOp {
  float lr, epsilon;
  __device__ float block_scalar(const Table<3>&, int) const { return 0.0f; }
  __device__ void operator()(const Table<3>& t, int ti, std::int64_t k, float) const {
    float* w = t.ptr[0][ti];
    float* acc = t.ptr[2][ti];
    const float gk = t.ptr[1][ti][k] + t.wd[ti] * w[k];
    const float a = acc[k] + gk * gk;
    acc[k] = a;
    w[k] -= lr * gk / (sqrtf(a) + epsilon);
  }
};

// ptr: x. x *= *mul; any Inf/NaN result sets *found (benign race: every writer stores 1).
struct ScaleCheckOp {
  const float* mul;
  float* found;
  __device__ float block_scalar(const Table<1>&, int) const { return *mul; }
  __device__ void operator()(const Table<1>& t, int ti, std::int64_t k, float m) const {
    float* x = t.ptr[0][ti];
    const float v = x[k] * m;
    x[k] = v;
    if ((__float_as_uint(v) & 0x7f800000u) == 0x7f800000u) *found = 1.0f;
  }
};

// ptr: shadow, w.
struct LerpOp {
  float keep, take;
  __device__ float block_scalar(const Table<2>&, int) const { return 0.0f; }
  __device__ void operator()(const Table<2>& t, int ti, std::int64_t k, float) const {
    float* s = t.ptr[0][ti];
    s[k] = keep * s[k] + take * t.ptr[1][ti][k];
  }
};

// ptr: x. x = *value.
struct FillOp {
  const float* value;
  __device__ float block_scalar(const Table<1>&, int) const { return *value; }
  __device__ void operator()(const Table<1>& t, int ti, std::int64_t k, float v) const { t.ptr[0][ti][k] = v; }
};

// ---- host side ----------------------------------------------------------------------------------

template <int K, class Op>
void launch_elementwise(const std::vector<Entry<K>>& entries, const Op& op, const char* what) {
  apply<K>(entries, [&](const Table<K>& t, int blocks) {
    elementwise_kernel<K, Op><<<blocks, kThreads, 0, op_stream()>>>(t, op);
    BH_CHECK_CUDA_LAUNCH(what);
  });
}

// Per-tensor sums of squares of the K lists of `entries` into totals[i*K + p] (f64 on device).
template <int K>
void sum_squares_into(const std::vector<Entry<K>>& entries, Device device, double* totals, const char* what) {
  const std::int64_t slots = total_slots(entries);
  Tensor partial = Tensor::empty({std::max<std::int64_t>(slots, 1) * K}, DType::f64, device);
  apply<K>(entries, [&](const Table<K>& t, int blocks) {
    sumsq_partial_kernel<K><<<blocks, kThreads, 0, op_stream()>>>(t, partial.data<double>());
    BH_CHECK_CUDA_LAUNCH(what);
  });
  std::vector<std::int64_t> slot0, chunks;
  slot_layout(entries, &slot0, &chunks);
  finalize_sums(slot0, chunks, K, partial.data<double>(), totals);
}

float fattr(const OpCall& c, const char* name) { return static_cast<float>(c.attrs.get(name)); }

// Entries for n tensors: list l of pointers from `lists[l]` (undefined -> null), rows from the
// rows list (or none), weight decay from the "decay" flags.
template <int K>
std::vector<Entry<K>> make_entries(const OpCall& c, std::size_t n, const std::array<const Tensor*, K>& lists,
                                   const Tensor* rows, float weight_decay) {
  const auto& decay = c.attrs.get_ints("decay");
  std::vector<Entry<K>> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    Entry<K>& e = out[i];
    for (int l = 0; l < K; ++l) e.ptr[l] = lists[l][i].defined() ? lists[l][i].template data<float>() : nullptr;
    const Tensor& ref = lists[0][i];
    e.decay = !decay.empty() && decay[i] != 0;
    e.wd = e.decay ? weight_decay : 0.0f;
    if (rows && rows[i].defined()) {
      if (rows[i].numel() == 0) continue;  // nothing listed (span 0); also avoids 0 / 0 for [0, ...]
      e.row_len = ref.numel() / ref.size(0);
      e.rows = rows[i].data<std::int64_t>();
      e.span = rows[i].numel() * e.row_len;
    } else {
      e.span = ref.numel();
    }
  }
  return out;
}

void fill(Tensor& t, float value) {
  const int n = static_cast<int>(t.numel());
  if (n == 0) return;
  fill_kernel<<<(n + 255) / 256, 256, 0, op_stream()>>>(t.data<float>(), n, value);
  BH_CHECK_CUDA_LAUNCH("fill_kernel");
}

// All defined tensors on one CUDA device and contiguous (dtypes are checked by run()).
std::string accept_cuda(const OpCall& c) {
  if (std::string half = refuse_half(c); !half.empty()) return half;
  const Tensor* first = nullptr;
  for (const auto* list : {&c.inputs, &c.outputs})
    for (const Tensor& t : *list) {
      if (!t.defined()) continue;
      if (!t.device().is_cuda()) return fmt::format("{} is not on a cuda device", t.describe());
      if (!t.is_contiguous()) return fmt::format("{} is not contiguous", t.describe());
      if (!first) first = &t;
      if (t.device() != first->device()) return "tensors on different devices";
    }
  return {};
}

using detail::check_multi_tensor_call;

// ---- ops ----------------------------------------------------------------------------------------

void sgd(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kSgdOp, DeviceType::cuda, 0, 1, 2, 0, true, true);
  if (n == 0) return;
  set_device_of(c.outputs[0]);
  const Tensor* o = c.outputs.data();
  const Tensor* in = c.inputs.data();
  auto entries = make_entries<3>(c, n, {o, in, o + n}, in + n, fattr(c, "weight_decay"));
  launch_elementwise<3>(entries, SgdOp{fattr(c, "lr"), fattr(c, "momentum"), c.attrs.get_bool("nesterov")},
                        "optim_sgd_multi");
}

void lars(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kLarsOp, DeviceType::cuda, 0, 1, 2, 1, false, true);
  Tensor& trust = c.outputs[2 * n];
  BH_CHECK_AS(InvalidArgument, trust.numel() == static_cast<std::int64_t>(n) && trust.dtype() == DType::f32,
              "optim_lars_multi: trust must be f32 with {} elements, is {}", n, trust.describe());
  if (n == 0) return;
  const Device dev = c.outputs[0].device();
  set_device_of(c.outputs[0]);
  const Tensor* o = c.outputs.data();
  const Tensor* in = c.inputs.data();
  const float wd = fattr(c, "weight_decay");
  Tensor totals = Tensor::empty({static_cast<std::int64_t>(2 * n)}, DType::f64, dev);
  BH_CHECK_CUDA(cudaMemsetAsync(totals.data<double>(), 0, totals.nbytes(), op_stream()));
  sum_squares_into<2>(make_entries<2>(c, n, {o, in}, nullptr, wd), dev, totals.data<double>(), "optim_lars_multi norms");
  fill(trust, 1.0f);  // empty tensors launch no block
  launch_elementwise<3>(make_entries<3>(c, n, {o, in, o + n}, nullptr, wd),
                        LarsOp{fattr(c, "lr"), fattr(c, "momentum"), fattr(c, "eta"), fattr(c, "epsilon"),
                               totals.data<double>(), trust.data<float>()},
                        "optim_lars_multi");
}

LambParams lamb_params(const OpCall& c, bool bias_correction) {
  const double t = c.attrs.get("step");
  const float b1 = fattr(c, "beta1"), b2 = fattr(c, "beta2");
  return LambParams{fattr(c, "lr"), b1, b2, fattr(c, "epsilon"),
                    detail::inverse_bias_correction(b1, t, bias_correction),
                    detail::inverse_bias_correction(b2, t, bias_correction)};
}

void lamb(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kLambOp, DeviceType::cuda, 0, 1, 3, 1, false, true);
  Tensor& trust = c.outputs[3 * n];
  BH_CHECK_AS(InvalidArgument, trust.numel() == static_cast<std::int64_t>(n) && trust.dtype() == DType::f32,
              "optim_lamb_multi: trust must be f32 with {} elements, is {}", n, trust.describe());
  if (n == 0) return;
  const Device dev = c.outputs[0].device();
  set_device_of(c.outputs[0]);
  const Tensor* o = c.outputs.data();
  const Tensor* in = c.inputs.data();
  const float wd = fattr(c, "weight_decay");
  const LambParams p = lamb_params(c, c.attrs.get_bool("bias_correction", true));
  auto pass1 = make_entries<4>(c, n, {o, in, o + n, o + 2 * n}, nullptr, wd);
  const std::int64_t slots = total_slots(pass1);
  Tensor partial = Tensor::empty({std::max<std::int64_t>(slots, 1) * 2}, DType::f64, dev);
  apply<4>(pass1, [&](const Table<4>& t, int blocks) {
    lamb_moments_kernel<<<blocks, kThreads, 0, op_stream()>>>(t, p, partial.data<double>());
    BH_CHECK_CUDA_LAUNCH("optim_lamb_multi moments");
  });
  Tensor totals = Tensor::empty({static_cast<std::int64_t>(2 * n)}, DType::f64, dev);
  std::vector<std::int64_t> slot0, chunks;
  slot_layout(pass1, &slot0, &chunks);
  finalize_sums(slot0, chunks, 2, partial.data<double>(), totals.data<double>());
  fill(trust, 1.0f);
  launch_elementwise<3>(make_entries<3>(c, n, {o, o + n, o + 2 * n}, nullptr, wd),
                        LambUpdateOp{p, totals.data<double>(), trust.data<float>()}, "optim_lamb_multi");
}

void adam(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kAdamOp, DeviceType::cuda, 0, 1, 3, 0, true, true);
  if (n == 0) return;
  set_device_of(c.outputs[0]);
  const Tensor* o = c.outputs.data();
  const Tensor* in = c.inputs.data();
  auto entries = make_entries<4>(c, n, {o, in, o + n, o + 2 * n}, in + n, fattr(c, "weight_decay"));
  launch_elementwise<4>(entries, AdamOp{lamb_params(c, true), c.attrs.get_bool("decoupled")}, "optim_adam_multi");
}

void adagrad(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kAdagradOp, DeviceType::cuda, 0, 1, 2, 0, true, true);
  if (n == 0) return;
  set_device_of(c.outputs[0]);
  const Tensor* o = c.outputs.data();
  const Tensor* in = c.inputs.data();
  auto entries = make_entries<3>(c, n, {o, in, o + n}, in + n, fattr(c, "weight_decay"));
  launch_elementwise<3>(entries, AdagradOp{fattr(c, "lr"), fattr(c, "epsilon")}, "optim_adagrad_multi");
}

void sumsq(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kSumSqOp, DeviceType::cuda, 0, 1, 0, 1, true, false);
  BH_CHECK_AS(InvalidArgument, c.outputs.size() == 1 && c.outputs[0].numel() == static_cast<std::int64_t>(n) &&
              c.outputs[0].dtype() == DType::f64,
              "multi_tensor_sumsq: output must be one f64 tensor of {} elements", n);
  if (n == 0) return;
  set_device_of(c.inputs[0]);
  Tensor& out = c.outputs[0];
  BH_CHECK_CUDA(cudaMemsetAsync(out.data<double>(), 0, out.nbytes(), op_stream()));  // empty tensors
  const Tensor* in = c.inputs.data();
  sum_squares_into<1>(make_entries<1>(c, n, {in}, in + n, 0.0f), out.device(), out.data<double>(), "multi_tensor_sumsq");
}

void scale_check(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kScaleCheckOp, DeviceType::cuda, 1, 0, 1, 1, true, false);
  const Tensor& mul = c.inputs[0];
  Tensor& found = c.outputs[n];
  BH_CHECK_AS(InvalidArgument, mul.numel() == 1 && mul.dtype() == DType::f32 && found.numel() == 1 &&
              found.dtype() == DType::f32,
              "multi_tensor_scale_check: mul and found_inf must be f32 tensors of one element");
  set_device_of(found);
  BH_CHECK_CUDA(cudaMemsetAsync(found.data<float>(), 0, sizeof(float), op_stream()));
  if (n == 0) return;
  const Tensor* o = c.outputs.data();
  auto entries = make_entries<1>(c, n, {o}, c.inputs.data() + 1, 0.0f);
  launch_elementwise<1>(entries, ScaleCheckOp{mul.data<float>(), found.data<float>()}, "multi_tensor_scale_check");
}

void lerp(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kLerpOp, DeviceType::cuda, 0, 1, 1, 0, false, false);
  if (n == 0) return;
  set_device_of(c.outputs[0]);
  const float keep = fattr(c, "decay");
  auto entries = make_entries<2>(c, n, {c.outputs.data(), c.inputs.data()}, nullptr, 0.0f);
  launch_elementwise<2>(entries, LerpOp{keep, 1.0f - keep}, "multi_tensor_lerp");
}

void fill_op(OpCall& c) {
  const std::size_t n = check_multi_tensor_call(c, detail::kFillOp, DeviceType::cuda, 1, 0, 1, 0, false, false);
  const Tensor& v = c.inputs[0];
  BH_CHECK_AS(InvalidArgument, v.numel() == 1 && v.dtype() == DType::f32,
              "multi_tensor_fill: value must be an f32 tensor of one element, is {}", v.describe());
  if (n == 0) return;
  set_device_of(v);
  auto entries = make_entries<1>(c, n, {c.outputs.data()}, nullptr, 0.0f);
  launch_elementwise<1>(entries, FillOp{v.data<float>()}, "multi_tensor_fill");
}

OpImpl cuda_impl(void (*run)(OpCall&)) {
  return OpImpl{"cuda.multi_tensor", DeviceType::cuda, 50, accept_cuda, run, false};
}

const bool registered = [] {
  register_op_impl(detail::kSgdOp, cuda_impl(sgd));
  register_op_impl(detail::kLarsOp, cuda_impl(lars));
  register_op_impl(detail::kLambOp, cuda_impl(lamb));
  register_op_impl(detail::kAdamOp, cuda_impl(adam));
  register_op_impl(detail::kAdagradOp, cuda_impl(adagrad));
  register_op_impl(detail::kSumSqOp, cuda_impl(sumsq));
  register_op_impl(detail::kScaleCheckOp, cuda_impl(scale_check));
  register_op_impl(detail::kLerpOp, cuda_impl(lerp));
  register_op_impl(detail::kFillOp, cuda_impl(fill_op));
  return true;
}();

}  // namespace

void finalize_sums(const std::vector<std::int64_t>& slot0, const std::vector<std::int64_t>& chunks, int P,
                   const double* partial, double* totals) {
  BH_CHECK_AS(InvalidArgument, P == 1 || P == 2, "finalize_sums: P must be 1 or 2, got {}", P);
  FinalizeTable f{};
  int nb = 0;
  auto flush = [&] {
    if (nb == 0) return;
    if (P == 1)
      finalize_kernel<1><<<nb, kThreads, 0, op_stream()>>>(f, partial, totals);
    else
      finalize_kernel<2><<<nb, kThreads, 0, op_stream()>>>(f, partial, totals);
    BH_CHECK_CUDA_LAUNCH("finalize_sums");
    nb = 0;
  };
  for (std::size_t i = 0; i < slot0.size(); ++i) {
    f.slot0[nb] = slot0[i];
    f.chunks[nb] = chunks[i];  // 0 chunks: the block stores 0
    f.id[nb] = static_cast<int>(i);
    if (++nb == kMaxFinalize) flush();
  }
  flush();
}

}  // namespace mt
}  // namespace benchhost::nn::cuda
