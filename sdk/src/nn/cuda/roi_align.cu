// RoIAlign forward and backward on CUDA over one or more feature levels (op conventions in
// nn/cpu/roi_align.cpp, semantics in Note [Legacy RoIAlign] of nn/detection.hpp).
//
// Layout and precision: features f32 NCHW or NHWC (attr channels_last), rois f32 [K, 5], levels
// i64 [K]; f32 arithmetic with __f*_rn where nvcc would otherwise contract into an FMA, so that
// the samples' coordinates and weights round like the CPU's.
// - Forward: one thread per output element (k, c, ph, pw) (NHWC: (k, ph, pw, c), so that
//   neighbouring threads read neighbouring channels); the thread walks its bin's samples.
// - Backward: the gradient buffers are zeroed, then one thread per dout element scatters
//   dout / count times the four bilinear weights with atomicAdd: the f32 sums come in no fixed
//   order (not bit-reproducible between runs; the parity tolerance covers it).
// Invalid batch indices or levels are not checked on the device (that would synchronise); the
// Tensor-level functions check nothing either, and a thread that meets one writes 0 (forward) or
// skips (backward).

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda {
namespace {

constexpr int kMaxLevels = 8;

struct Levels {
  float* data[kMaxLevels];
  std::int64_t h[kMaxLevels], w[kMaxLevels];
  float scale[kMaxLevels];
  int count;
};

struct Params {
  std::int64_t k, n, c, ph, pw, sampling;
  bool aligned, nhwc;
};

struct Box {
  std::int64_t level, batch, grid_h, grid_w;
  float start_h, start_w, bin_h, bin_w, count;
  bool valid;
};

__device__ Box roi_box(const Params& p, const Levels& lv, const float* r, std::int64_t level) {
  Box b{};
  b.valid = level >= 0 && level < lv.count && r[0] >= 0.0f && r[0] < static_cast<float>(p.n);
  if (!b.valid) return b;
  const float scale = lv.scale[level];
  const float offset = p.aligned ? 0.5f : 0.0f;
  b.level = level;
  b.batch = static_cast<std::int64_t>(r[0]);
  b.start_w = __fsub_rn(__fmul_rn(r[1], scale), offset);
  b.start_h = __fsub_rn(__fmul_rn(r[2], scale), offset);
  float roi_w = __fsub_rn(__fsub_rn(__fmul_rn(r[3], scale), offset), b.start_w);
  float roi_h = __fsub_rn(__fsub_rn(__fmul_rn(r[4], scale), offset), b.start_h);
  if (!p.aligned) {
    roi_w = fmaxf(roi_w, 1.0f);
    roi_h = fmaxf(roi_h, 1.0f);
  }
  b.bin_h = __fdiv_rn(roi_h, static_cast<float>(p.ph));
  b.bin_w = __fdiv_rn(roi_w, static_cast<float>(p.pw));
  b.grid_h = p.sampling > 0 ? p.sampling : static_cast<std::int64_t>(ceilf(__fdiv_rn(roi_h, static_cast<float>(p.ph))));
  b.grid_w = p.sampling > 0 ? p.sampling : static_cast<std::int64_t>(ceilf(__fdiv_rn(roi_w, static_cast<float>(p.pw))));
  const std::int64_t n = b.grid_h * b.grid_w;
  b.count = static_cast<float>(n > 1 ? n : 1);
  return b;
}

__device__ __forceinline__ float sample_coord(float start, std::int64_t p, float bin, std::int64_t i, std::int64_t grid) {
  return __fadd_rn(__fadd_rn(start, __fmul_rn(static_cast<float>(p), bin)),
                   __fdiv_rn(__fmul_rn(__fadd_rn(static_cast<float>(i), 0.5f), bin), static_cast<float>(grid)));
}

// Neighbour (y, x) pairs and weights of sample (y, x); false when the sample is outside the map.
__device__ bool bilinear(float y, float x, std::int64_t H, std::int64_t W, std::int64_t* yy, std::int64_t* xx,
                         float* w) {
  if (y < -1.0f || y > static_cast<float>(H) || x < -1.0f || x > static_cast<float>(W)) return false;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  auto y_low = static_cast<std::int64_t>(y), x_low = static_cast<std::int64_t>(x);
  std::int64_t y_high, x_high;
  if (y_low >= H - 1) {
    y_high = y_low = H - 1;
    y = static_cast<float>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= W - 1) {
    x_high = x_low = W - 1;
    x = static_cast<float>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const float ly = __fsub_rn(y, static_cast<float>(y_low)), lx = __fsub_rn(x, static_cast<float>(x_low));
  const float hy = __fsub_rn(1.0f, ly), hx = __fsub_rn(1.0f, lx);
  yy[0] = y_low, xx[0] = x_low, w[0] = __fmul_rn(hy, hx);
  yy[1] = y_low, xx[1] = x_high, w[1] = __fmul_rn(hy, lx);
  yy[2] = y_high, xx[2] = x_low, w[2] = __fmul_rn(ly, hx);
  yy[3] = y_high, xx[3] = x_high, w[3] = __fmul_rn(ly, lx);
  return true;
}

__device__ __forceinline__ std::int64_t feature_index(const Params& p, std::int64_t H, std::int64_t W, std::int64_t n,
                                                      std::int64_t c, std::int64_t y, std::int64_t x) {
  return p.nhwc ? ((n * H + y) * W + x) * p.c + c : ((n * p.c + c) * H + y) * W + x;
}

// Output element e -> (k, c, ph, pw) for either layout.
__device__ __forceinline__ void unflatten(const Params& p, std::int64_t e, std::int64_t& k, std::int64_t& c,
                                          std::int64_t& ph, std::int64_t& pw) {
  if (p.nhwc) {
    c = e % p.c;
    e /= p.c;
    pw = e % p.pw;
    e /= p.pw;
    ph = e % p.ph;
    k = e / p.ph;
  } else {
    pw = e % p.pw;
    e /= p.pw;
    ph = e % p.ph;
    e /= p.ph;
    c = e % p.c;
    k = e / p.c;
  }
}

__global__ void forward_kernel(const float* __restrict__ rois, const std::int64_t* __restrict__ levels, Levels lv,
                               Params p, float* __restrict__ out) {
  const std::int64_t total = p.k * p.c * p.ph * p.pw;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t k, c, ph, pw;
    unflatten(p, e, k, c, ph, pw);
    const Box b = roi_box(p, lv, rois + 5 * k, levels[k]);
    if (!b.valid) {
      out[e] = 0.0f;
      continue;
    }
    const std::int64_t H = lv.h[b.level], W = lv.w[b.level];
    const float* f = lv.data[b.level];
    float v = 0.0f;
    for (std::int64_t iy = 0; iy < b.grid_h; ++iy) {
      const float y = sample_coord(b.start_h, ph, b.bin_h, iy, b.grid_h);
      for (std::int64_t ix = 0; ix < b.grid_w; ++ix) {
        std::int64_t yy[4], xx[4];
        float w[4];
        if (!bilinear(y, sample_coord(b.start_w, pw, b.bin_w, ix, b.grid_w), H, W, yy, xx, w)) continue;
        float s = __fmul_rn(w[0], f[feature_index(p, H, W, b.batch, c, yy[0], xx[0])]);
        for (int j = 1; j < 4; ++j) s = __fadd_rn(s, __fmul_rn(w[j], f[feature_index(p, H, W, b.batch, c, yy[j], xx[j])]));
        v = __fadd_rn(v, s);
      }
    }
    out[e] = __fdiv_rn(v, b.count);
  }
}

__global__ void backward_kernel(const float* __restrict__ dout, const float* __restrict__ rois,
                                const std::int64_t* __restrict__ levels, Levels lv, Params p) {
  const std::int64_t total = p.k * p.c * p.ph * p.pw;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t k, c, ph, pw;
    unflatten(p, e, k, c, ph, pw);
    const Box b = roi_box(p, lv, rois + 5 * k, levels[k]);
    if (!b.valid) continue;
    const std::int64_t H = lv.h[b.level], W = lv.w[b.level];
    float* df = lv.data[b.level];
    const float d = __fdiv_rn(dout[e], b.count);
    for (std::int64_t iy = 0; iy < b.grid_h; ++iy) {
      const float y = sample_coord(b.start_h, ph, b.bin_h, iy, b.grid_h);
      for (std::int64_t ix = 0; ix < b.grid_w; ++ix) {
        std::int64_t yy[4], xx[4];
        float w[4];
        if (!bilinear(y, sample_coord(b.start_w, pw, b.bin_w, ix, b.grid_w), H, W, yy, xx, w)) continue;
        for (int j = 0; j < 4; ++j) atomicAdd(df + feature_index(p, H, W, b.batch, c, yy[j], xx[j]), __fmul_rn(d, w[j]));
      }
    }
  }
}

Params params_of(const OpCall& call, const Tensor& pooled, const Tensor& feat0, std::int64_t k) {
  Params p{};
  p.nhwc = call.attrs.get_bool("channels_last");
  p.aligned = call.attrs.get_bool("aligned");
  p.ph = call.attrs.get_int("pooled_h", 7);
  p.pw = call.attrs.get_int("pooled_w", 7);
  p.sampling = call.attrs.get_int("sampling_ratio", 2);
  p.k = k;
  p.n = feat0.size(0);
  p.c = p.nhwc ? feat0.size(3) : feat0.size(1);
  const Shape want = p.nhwc ? Shape{p.k, p.ph, p.pw, p.c} : Shape{p.k, p.c, p.ph, p.pw};
  BH_CHECK_AS(InvalidArgument, pooled.shape() == want, "roi_align (cuda): pooled tensor must be {}, got {}",
              shape_str(want), shape_str(pooled.shape()));
  return p;
}

Levels levels_of(const OpCall& call, const std::vector<Tensor>& feats, bool nhwc, const char* op) {
  BH_CHECK_AS(InvalidArgument, !feats.empty() && feats.size() <= kMaxLevels,
              "{} (cuda): {} feature levels, 1 to {} supported", op, feats.size(), kMaxLevels);
  Levels lv{};
  lv.count = static_cast<int>(feats.size());
  for (std::size_t l = 0; l < feats.size(); ++l) {
    BH_CHECK_AS(InvalidArgument, feats[l].dim() == 4, "{} (cuda): level {} must be 4-d, got {}", op, l,
                feats[l].describe());
    lv.data[l] = const_cast<float*>(feats[l].data<float>());
    lv.h[l] = nhwc ? feats[l].size(1) : feats[l].size(2);
    lv.w[l] = nhwc ? feats[l].size(2) : feats[l].size(3);
    lv.scale[l] = static_cast<float>(call.attrs.get("scale" + std::to_string(l)));
  }
  return lv;
}

void forward(OpCall& call) {
  const std::vector<Tensor> feats(call.inputs.begin() + 2, call.inputs.end());
  BH_CHECK_AS(InvalidArgument, !feats.empty(), "roi_align_forward (cuda): no feature levels");
  const Params p = params_of(call, call.outputs[0], feats[0], call.inputs[0].size(0));
  const Levels lv = levels_of(call, feats, p.nhwc, "roi_align_forward");
  const std::int64_t total = call.outputs[0].numel();
  if (total == 0) return;
  set_device_of(call.inputs[0]);
  forward_kernel<<<grid_for(total), 256, 0, op_stream()>>>(call.inputs[0].data<float>(),
                                                           call.inputs[1].data<std::int64_t>(), lv, p,
                                                           call.outputs[0].data<float>());
  BH_CHECK_CUDA_LAUNCH("roi_align forward_kernel");
}

void backward(OpCall& call) {
  BH_CHECK_AS(InvalidArgument, !call.outputs.empty(), "roi_align_backward (cuda): no feature levels");
  const Params p = params_of(call, call.inputs[0], call.outputs[0], call.inputs[1].size(0));
  const Levels lv = levels_of(call, call.outputs, p.nhwc, "roi_align_backward");
  set_device_of(call.inputs[0]);
  for (Tensor& t : call.outputs)
    BH_CHECK_CUDA(cudaMemsetAsync(t.raw_data(), 0, static_cast<std::size_t>(t.numel()) * sizeof(float), op_stream()));
  const std::int64_t total = call.inputs[0].numel();
  if (total == 0) return;
  backward_kernel<<<grid_for(total), 256, 0, op_stream()>>>(call.inputs[0].data<float>(), call.inputs[1].data<float>(),
                                                            call.inputs[2].data<std::int64_t>(), lv, p);
  BH_CHECK_CUDA_LAUNCH("roi_align backward_kernel");
}

// f32 floating tensors, i64 levels, everything contiguous on a CUDA device.
std::string accepts(const OpCall& c) {
  for (const auto* list : {&c.inputs, &c.outputs})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const Tensor& t = (*list)[i];
      if (!t.defined()) continue;
      if (!t.device().is_cuda() || !t.is_contiguous()) return fmt::format("tensor {} is not contiguous on cuda", i);
      if (t.dtype() != DType::f32 && t.dtype() != DType::i64)
        return fmt::format("tensor {} is {}, needs f32 (or i64 levels)", i, dtype_name(t.dtype()));
    }
  return {};
}

const bool registered = register_op_impl("roi_align_forward", cuda_impl("cuda.kernel", 50, forward, accepts)) &&
                        register_op_impl("roi_align_backward", cuda_impl("cuda.kernel", 50, backward, accepts));

}  // namespace
}  // namespace benchhost::nn::cuda
