// CUDA 3-d convolution and transposed convolution through cuDNN's legacy Nd convolution API:
// conv3d_forward, conv3d_backward_data, conv3d_backward_weights, conv_transpose3d_forward,
// conv_transpose3d_backward_data, conv_transpose3d_backward_weights (op contracts in
// sdk/src/nn/conv3d_common.hpp), and conv_transpose2d_forward, conv_transpose2d_backward_data,
// conv_transpose2d_backward_weights on their depth-1 views (Note [2-d transposed convolution as
// 3-d] in sdk/src/nn/conv_transpose2d_common.hpp). Not yet run on a GPU.
//
// Every call runs on the convolution view (Note [Convolution view of a transposed convolution]
// in conv3d_common.hpp): `big` is the convolution's input, `small` its output, the filter is
// [small.c, big.c, k...] (OIDHW for conv3d, PyTorch's [I, O, k...] for the transposed op: the
// same bytes). So
//   conv3d forward                = cudnnConvolutionForward       (big x -> small y)
//   conv3d backward-data          = cudnnConvolutionBackwardData  (small dy -> big dx)
//   conv3d backward-weights       = cudnnConvolutionBackwardFilter (big x, small dy)
//   conv_transpose3d forward      = cudnnConvolutionBackwardData  (small x -> big y) + bias
//   conv_transpose3d backward-data= cudnnConvolutionForward       (big dy -> small dx)
//   conv_transpose3d backward-wts = cudnnConvolutionBackwardFilter (big dy, small x)
// and the bias gradient is cudnnConvolutionBackwardBias over the op's output gradient.
//
// Layout and precision as for the 2-d convolution (nn/cuda/conv_cudnn.cpp): NCDHW or NDHWC
// activations used in place (NDHWC through explicit strides); with NDHWC the filters cuDNN's fast
// kernels want are channels-last (K, KD, KH, KW, C), so the weights are transformed into a
// scratch copy with cudnnTransformTensor and the weight gradient computed channels-last and
// transformed back. f32 accumulation; TF32 tensor-op kernels only when tf32_enabled(). f16/bf16
// natively where cuDNN's tensor-op kernels surely apply (NDHWC, channel counts multiples of 8:
// Note [Half-precision convolutions] in conv_cudnn.cpp; a bias is added in the half type and its
// gradient summed into an f32 dbias, as there), else through f32 promotion.
// Plans (descriptors, chosen algorithm, workspace size) are built once per shape and cached
// (Note [Convolution plans] in conv_cudnn.cpp). NDHWC calls without bias of the dtypes
// BENCHHOST_CUDNN_GRAPH names (f16 and bf16 by default) go through cuDNN's graph API instead
// (Note [cuDNN graph convolutions] in cudnn_graph_conv.hpp), where it has a plan for them.

#include <fmt/format.h>

#include <climits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchhost/nn/math_mode.hpp"
#include "benchhost/nn/ops.hpp"
#include "nn/conv3d_common.hpp"
#include "nn/conv_transpose2d_common.hpp"
#include "nn/cuda/cudnn_common.hpp"
#include "nn/cuda/cudnn_graph_conv.hpp"

namespace benchhost::nn::cuda {
namespace {

using conv3d_detail::Conv3dGeometry;

enum class Direction { forward, backward_data, backward_filter };

struct Plan {
  TensorDesc big, small, bias;  // bias: [1, C, 1, 1, 1] of the op's output channels
  FilterDesc w;
  ConvDesc conv;
  bool ndhwc = false;
  TensorDesc w_plain, w_last;  // the filter as a plain tensor, [K,C,k...] and (K,k...,C) (NDHWC)
  int algo = 0;
  std::size_t workspace_bytes = 0;
};

int checked_int(std::int64_t v, const char* what) {
  BH_CHECK_AS(Unsupported, v >= 0 && v <= INT_MAX, "conv3d (cuDNN): {} = {} does not fit an int",
              what, v);
  return static_cast<int>(v);
}

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// A 5-d tensor of logical dims (n, c, d, h, w), packed NCDHW or channels-last.
void set_5d(TensorDesc& t, std::int64_t n, std::int64_t c, std::int64_t d, std::int64_t h,
            std::int64_t w, bool channels_last, cudnnDataType_t type) {
  const int dims[5] = {checked_int(n, "N"), checked_int(c, "C"), checked_int(d, "D"),
                       checked_int(h, "H"), checked_int(w, "W")};
  const std::int64_t cs = channels_last ? 1 : d * h * w, ws = channels_last ? c : 1,
                     hs = channels_last ? w * c : w, ds = channels_last ? h * w * c : h * w,
                     ns = c * d * h * w;
  const int strides[5] = {checked_int(ns, "N stride"), checked_int(cs, "C stride"),
                          checked_int(ds, "D stride"), checked_int(hs, "H stride"),
                          checked_int(ws, "W stride")};
  BH_CHECK_CUDNN(cudnnSetTensorNdDescriptor(t.d, type, 5, dims, strides));
}

void set_act(TensorDesc& t, const VolumeDims& v, bool ndhwc, cudnnDataType_t type) {
  set_5d(t, v.n, v.c, v.d, v.h, v.w, ndhwc, type);
}

template <class Perf>
bool eligible(const Perf& p, bool tensor_ops) {
  return p.status == CUDNN_STATUS_SUCCESS &&
         (tensor_ops || (p.mathType != CUDNN_TENSOR_OP_MATH &&
                         p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

// The fastest eligible result of a find, else of the heuristics (as conv_cudnn.cpp).
template <class Perf, class Find, class Heuristic>
Perf choose(Find&& find, Heuristic&& heuristic, int count, bool tensor_ops,
            const std::string& what) {
  std::vector<Perf> perf(static_cast<std::size_t>(count));
  int returned = 0;
  if (find(count, &returned, perf.data()) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < returned; ++i)
      if (eligible(perf[i], tensor_ops)) return perf[i];
  returned = 0;
  BH_CHECK_CUDNN(heuristic(count, &returned, perf.data()));
  for (int i = 0; i < returned; ++i)
    if (eligible(perf[i], tensor_ops)) return perf[i];
  BH_THROW(Unsupported, "conv3d (cuDNN): no {} algorithm{}", what,
           tensor_ops ? "" : " with FMA (non-TF32) math");
}

std::string plan_key(Direction dir, const Conv3dGeometry& g, const Conv3dSpec& s, int device,
                     bool tensor_ops, DType dtype) {
  const VolumeDims &b = g.big(), &sm = g.small();
  return fmt::format("{}|{}|{}x{}x{}x{}x{}|{}x{}x{}x{}x{}|k{}x{}x{}|s{}x{}x{}p{}x{}x{}|t{}|dev{}|"
                     "tensor_ops{}|{}",
                     static_cast<int>(dir), volume_layout_name(s.layout), b.n, b.c, b.d, b.h,
                     b.w, sm.n, sm.c, sm.d, sm.h, sm.w, g.kd, g.kh, g.kw, s.stride_d, s.stride_h,
                     s.stride_w, s.pad_d, s.pad_h, s.pad_w, g.transposed ? 1 : 0, device,
                     tensor_ops ? 1 : 0, dtype_name(dtype));
}

std::unique_ptr<Plan> build_plan(Direction dir, const Conv3dGeometry& g, const Conv3dSpec& s,
                                 bool tensor_ops, DType dtype, cudnnHandle_t h) {
  const cudnnDataType_t type = cudnn_dtype(dtype);
  const VolumeDims &b = g.big(), &sm = g.small();
  auto p = std::make_unique<Plan>();
  p->ndhwc = s.layout == VolumeLayout::ndhwc;
  set_act(p->big, b, p->ndhwc, type);
  set_act(p->small, sm, p->ndhwc, type);
  set_5d(p->bias, 1, g.y.c, 1, 1, 1, false, CUDNN_DATA_FLOAT);
  const int fdims[5] = {checked_int(sm.c, "K"), checked_int(b.c, "C"), checked_int(g.kd, "KD"),
                        checked_int(g.kh, "KH"), checked_int(g.kw, "KW")};
  BH_CHECK_CUDNN(cudnnSetFilterNdDescriptor(
      p->w.d, type, p->ndhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, 5, fdims));
  if (p->ndhwc) {
    set_5d(p->w_plain, sm.c, b.c, g.kd, g.kh, g.kw, false, type);
    set_5d(p->w_last, sm.c, b.c, g.kd, g.kh, g.kw, true, type);
  }
  const int pad[3] = {checked_int(s.pad_d, "pad_d"), checked_int(s.pad_h, "pad_h"),
                      checked_int(s.pad_w, "pad_w")};
  const int stride[3] = {checked_int(s.stride_d, "stride_d"), checked_int(s.stride_h, "stride_h"),
                         checked_int(s.stride_w, "stride_w")};
  const int dilation[3] = {1, 1, 1};
  BH_CHECK_CUDNN(cudnnSetConvolutionNdDescriptor(p->conv.d, 3, pad, stride, dilation,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  BH_CHECK_CUDNN(
      cudnnSetConvolutionMathType(p->conv.d, tensor_ops ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int out[5] = {0, 0, 0, 0, 0};
  BH_CHECK_CUDNN(cudnnGetConvolutionNdForwardOutputDim(p->conv.d, p->big.d, p->w.d, 5, out));
  BH_CHECK(out[0] == sm.n && out[1] == sm.c && out[2] == sm.d && out[3] == sm.h && out[4] == sm.w,
           "conv3d (cuDNN): output {}x{}x{}x{}x{} differs from the expected {}x{}x{}x{}x{}",
           out[0], out[1], out[2], out[3], out[4], sm.n, sm.c, sm.d, sm.h, sm.w);

  const std::string what = fmt::format(
      "{} ({}{})",
      dir == Direction::forward         ? "forward"
      : dir == Direction::backward_data ? "backward-data"
                                        : "backward-filter",
      volume_layout_name(s.layout), g.transposed ? ", transposed" : "");
  cudnnMathType_t math = CUDNN_FMA_MATH;
  if (dir == Direction::forward) {
    auto perf = choose<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* o) {
          return cudnnFindConvolutionForwardAlgorithm(h, p->big.d, p->w.d, p->conv.d, p->small.d,
                                                      n, r, o);
        },
        [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* o) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, p->big.d, p->w.d, p->conv.d,
                                                        p->small.d, n, r, o);
        },
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, tensor_ops, what);
    p->algo = static_cast<int>(perf.algo);
    p->workspace_bytes = perf.memory;
    math = perf.mathType;
  } else if (dir == Direction::backward_data) {
    auto perf = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* o) {
          return cudnnFindConvolutionBackwardDataAlgorithm(h, p->w.d, p->small.d, p->conv.d,
                                                           p->big.d, n, r, o);
        },
        [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* o) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w.d, p->small.d, p->conv.d,
                                                             p->big.d, n, r, o);
        },
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, tensor_ops, what);
    p->algo = static_cast<int>(perf.algo);
    p->workspace_bytes = perf.memory;
    math = perf.mathType;
  } else {
    auto perf = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
        [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* o) {
          return cudnnFindConvolutionBackwardFilterAlgorithm(h, p->big.d, p->small.d, p->conv.d,
                                                             p->w.d, n, r, o);
        },
        [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* o) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->big.d, p->small.d,
                                                               p->conv.d, p->w.d, n, r, o);
        },
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, tensor_ops, what);
    p->algo = static_cast<int>(perf.algo);
    p->workspace_bytes = perf.memory;
    math = perf.mathType;
  }
  BH_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv.d, tensor_ops ? math : CUDNN_FMA_MATH));
  return p;
}

const Plan& plan_for(Direction dir, const Conv3dGeometry& g, const Conv3dSpec& s, DType dtype,
                     cudnnHandle_t h) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<Plan>> plans;
  int device = 0;
  BH_CHECK_CUDA(cudaGetDevice(&device));
  const bool tensor_ops = is_half(dtype) || tf32_enabled();
  const std::string key = plan_key(dir, g, s, device, tensor_ops, dtype);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, build_plan(dir, g, s, tensor_ops, dtype, h)).first;
  return *it->second;
}

Tensor workspace(const Plan& p, const Tensor& like) {
  if (p.workspace_bytes == 0) return Tensor();
  return Tensor::empty({static_cast<std::int64_t>(p.workspace_bytes)}, DType::u8, like.device());
}

void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// The weights in the filter layout of the plan: w itself (NCDHW) or a channels-last copy.
Tensor filter_of(const Plan& p, const Tensor& w, cudnnHandle_t h) {
  if (!p.ndhwc) return w;
  Tensor t = Tensor::empty(w.shape(), w.dtype(), w.device());
  const float one = 1.0f, zero = 0.0f;
  BH_CHECK_CUDNN(
      cudnnTransformTensor(h, &one, p.w_plain.d, w.raw_data(), &zero, p.w_last.d, t.raw_data()));
  return t;
}

// The convolution view of a call as a graph-API problem (channels-last volumes and filters), or
// nothing where it goes through the legacy API.
std::optional<graph::ConvProblem> graph_problem(graph::ConvKind kind, const Conv3dGeometry& g,
                                                const Conv3dSpec& s, DType dtype, bool bias) {
  if (bias || s.layout != VolumeLayout::ndhwc || !graph::enabled_for(dtype)) return std::nullopt;
  const VolumeDims &b = g.big(), &sm = g.small();
  graph::ConvProblem p;
  p.kind = kind;
  p.dtype = dtype;
  p.tf32 = tf32_enabled();
  p.x_dims = {b.n, b.c, b.d, b.h, b.w};
  p.y_dims = {sm.n, sm.c, sm.d, sm.h, sm.w};
  p.w_dims = {sm.c, b.c, g.kd, g.kh, g.kw};
  p.x_strides = graph::channels_last_strides(p.x_dims);
  p.y_strides = graph::channels_last_strides(p.y_dims);
  p.w_strides = graph::channels_last_strides(p.w_dims);
  p.pad = {s.pad_d, s.pad_h, s.pad_w};
  p.stride = {s.stride_d, s.stride_h, s.stride_w};
  p.dilation = {1, 1, 1};
  return p;
}

// [K, C, k...] filters <-> their channels-last copy: to = from (beta 0) or to += from (beta 1).
void transform_filter(cudnnHandle_t h, const Tensor& from, bool from_last, const Tensor& to,
                      float beta) {
  const cudnnDataType_t type = cudnn_dtype(from.dtype());
  TensorDesc plain, last;
  set_5d(plain, from.size(0), from.size(1), from.size(2), from.size(3), from.size(4), false, type);
  set_5d(last, from.size(0), from.size(1), from.size(2), from.size(3), from.size(4), true, type);
  const float one = 1.0f;
  BH_CHECK_CUDNN(cudnnTransformTensor(h, &one, from_last ? last.d : plain.d, from.raw_data(), &beta,
                                      from_last ? plain.d : last.d, to.raw_data()));
}

Tensor filter_last(const Tensor& w, cudnnHandle_t h) {
  Tensor t = Tensor::empty(w.shape(), w.dtype(), w.device());
  transform_filter(h, w, false, t, 0.0f);
  return t;
}

// big -> small (conv3d forward, conv_transpose3d backward-data).
void run_forward(const Plan& p, const Tensor& big, const Tensor& w, Tensor& small,
                 cudnnHandle_t h) {
  const Tensor wf = filter_of(p, w, h);
  Tensor ws = workspace(p, big);
  const float one = 1.0f, zero = 0.0f;
  BH_CHECK_CUDNN(cudnnConvolutionForward(h, &one, p.big.d, big.raw_data(), p.w.d, wf.raw_data(),
                                         p.conv.d, static_cast<cudnnConvolutionFwdAlgo_t>(p.algo),
                                         ptr(ws), p.workspace_bytes, &zero, p.small.d,
                                         small.raw_data()));
}

// small -> big (conv3d backward-data, conv_transpose3d forward).
void run_backward_data(const Plan& p, const Tensor& small, const Tensor& w, Tensor& big,
                       cudnnHandle_t h) {
  const Tensor wf = filter_of(p, w, h);
  Tensor ws = workspace(p, small);
  const float one = 1.0f, zero = 0.0f;
  BH_CHECK_CUDNN(cudnnConvolutionBackwardData(
      h, &one, p.w.d, wf.raw_data(), p.small.d, small.raw_data(), p.conv.d,
      static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), ptr(ws), p.workspace_bytes, &zero,
      p.big.d, big.raw_data()));
}

// big -> small and small -> big through the graph API where it takes the call, else the legacy
// API's plan.
void big_to_small(const Conv3dGeometry& g, const Conv3dSpec& s, const Tensor& big, const Tensor& w,
                  Tensor& small, cudnnHandle_t h) {
  if (auto gp = graph_problem(graph::ConvKind::forward, g, s, big.dtype(), false)) {
    const Tensor wf = filter_last(w, h);
    if (graph::run(*gp, h, big.device(), big.raw_data(), wf.raw_data(), small.raw_data())) return;
  }
  run_forward(plan_for(Direction::forward, g, s, big.dtype(), h), big, w, small, h);
}

void small_to_big(const Conv3dGeometry& g, const Conv3dSpec& s, const Tensor& small,
                  const Tensor& w, Tensor& big, cudnnHandle_t h) {
  if (auto gp = graph_problem(graph::ConvKind::backward_data, g, s, small.dtype(), false)) {
    const Tensor wf = filter_last(w, h);
    if (graph::run(*gp, h, small.device(), big.raw_data(), wf.raw_data(), small.raw_data())) return;
  }
  run_backward_data(plan_for(Direction::backward_data, g, s, small.dtype(), h), small, w, big, h);
}

Conv3dGeometry geometry_of(const OpCall& call, const Shape& x_shape, const Shape& w_shape,
                           bool transposed, const char* op) {
  return conv3d_detail::conv3d_geometry(x_shape, w_shape, conv3d_detail::conv3d_spec(call.attrs),
                                        transposed, op);
}

// {x, w, bias?} -> {y}
template <bool Transposed>
void forward(OpCall& call) {
  const char* op = Transposed ? "conv_transpose3d_forward" : "conv3d_forward";
  const Conv3dSpec s = conv3d_detail::conv3d_spec(call.attrs);
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  Tensor& y = call.outputs[0];
  const Conv3dGeometry g = geometry_of(call, x.shape(), w.shape(), Transposed, op);
  BH_CHECK_AS(InvalidArgument, y.shape() == volume_shape(g.y, s.layout),
              "{}: output {} should be {}", op, shape_str(y.shape()),
              shape_str(volume_shape(g.y, s.layout)));
  set_device_of(x);
  cudnnHandle_t h = cudnn_handle();
  const bool half_bias = bias.defined() && is_half(x.dtype());
  if (bias.defined() && !half_bias) {  // the legacy API, whose plan has the bias descriptor
    if (!Transposed)
      run_forward(plan_for(Direction::forward, g, s, x.dtype(), h), x, w, y, h);
    else
      run_backward_data(plan_for(Direction::backward_data, g, s, x.dtype(), h), x, w, y, h);
  } else if (!Transposed) {
    big_to_small(g, s, x, w, y, h);
  } else {
    small_to_big(g, s, x, w, y, h);
  }
  if (half_bias) {
    add_half_bias(y, bias);
  } else if (bias.defined()) {
    const Plan& p = plan_for(Transposed ? Direction::backward_data : Direction::forward, g, s,
                             x.dtype(), h);
    const float one = 1.0f;
    BH_CHECK_CUDNN(cudnnAddTensor(h, &one, p.bias.d, bias.raw_data(), &one,
                                  Transposed ? p.big.d : p.small.d, y.raw_data()));
  }
}

// {dy, w} -> {dx}
template <bool Transposed>
void backward_data(OpCall& call) {
  const char* op = Transposed ? "conv_transpose3d_backward_data" : "conv3d_backward_data";
  const Conv3dSpec s = conv3d_detail::conv3d_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &w = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const Conv3dGeometry g = geometry_of(call, dx.shape(), w.shape(), Transposed, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == volume_shape(g.y, s.layout),
              "{}: output gradient {} should be {}", op, shape_str(dy.shape()),
              shape_str(volume_shape(g.y, s.layout)));
  set_device_of(dy);
  cudnnHandle_t h = cudnn_handle();
  if (!Transposed)
    small_to_big(g, s, dy, w, dx, h);
  else
    big_to_small(g, s, dy, w, dx, h);
}

// {dy, x} -> {dw +=, dbias +=?}
template <bool Transposed>
void backward_weights(OpCall& call) {
  const char* op = Transposed ? "conv_transpose3d_backward_weights" : "conv3d_backward_weights";
  const Conv3dSpec s = conv3d_detail::conv3d_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dw = call.outputs[0];
  const Tensor dbias = call.outputs.size() > 1 ? call.outputs[1] : Tensor();
  const Conv3dGeometry g = geometry_of(call, x.shape(), dw.shape(), Transposed, op);
  BH_CHECK_AS(InvalidArgument, dy.shape() == volume_shape(g.y, s.layout),
              "{}: output gradient {} should be {}", op, shape_str(dy.shape()),
              shape_str(volume_shape(g.y, s.layout)));
  set_device_of(dy);
  cudnnHandle_t h = cudnn_handle();
  // The convolution view: big = x (conv) or dy (transposed); small-gradient = dy or x.
  const Tensor& big = Transposed ? dy : x;
  const Tensor& small = Transposed ? x : dy;
  const float one = 1.0f, zero = 0.0f;
  // Accumulate into dw (beta = 1), or for an f32 master gradient of half images compute in the
  // half type and add in f32 (Note [Half-precision convolutions] in conv_cudnn.cpp).
  const bool master_f32 = dw.dtype() != dy.dtype();
  const Tensor into = master_f32 ? Tensor::empty(dw.shape(), dy.dtype(), dw.device()) : dw;
  const float* beta = master_f32 ? &zero : &one;
  const bool half_dbias = dbias.defined() && is_half(dy.dtype());
  if (auto gp = graph_problem(graph::ConvKind::backward_filter, g, s, dy.dtype(), dbias.defined() && !half_dbias)) {
    Tensor dw_last = Tensor::empty(dw.shape(), dy.dtype(), dw.device());
    if (graph::run(*gp, h, dy.device(), big.raw_data(), dw_last.raw_data(), small.raw_data())) {
      transform_filter(h, dw_last, true, into, *beta);
      if (master_f32) add_(dw, cast(into, dw.dtype()));
      if (half_dbias) add_half_bias_grad(dbias, dy);
      return;
    }
  }
  const Plan& p = plan_for(Direction::backward_filter, g, s, dy.dtype(), h);
  Tensor ws = workspace(p, dy);
  const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo);
  if (!p.ndhwc) {
    BH_CHECK_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.big.d, big.raw_data(), p.small.d,
                                                  small.raw_data(), p.conv.d, algo, ptr(ws),
                                                  p.workspace_bytes, beta, p.w.d,
                                                  into.raw_data()));
  } else {
    // Computed channels-last, then transformed into the plain [K, C, k...] layout.
    Tensor dw_last = Tensor::empty(dw.shape(), dy.dtype(), dw.device());
    BH_CHECK_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.big.d, big.raw_data(), p.small.d,
                                                  small.raw_data(), p.conv.d, algo, ptr(ws),
                                                  p.workspace_bytes, &zero, p.w.d,
                                                  dw_last.raw_data()));
    BH_CHECK_CUDNN(cudnnTransformTensor(h, &one, p.w_last.d, dw_last.raw_data(), beta,
                                        p.w_plain.d, into.raw_data()));
  }
  if (master_f32) add_(dw, cast(into, dw.dtype()));
  if (half_dbias)
    add_half_bias_grad(dbias, dy);
  else if (dbias.defined())
    BH_CHECK_CUDNN(cudnnConvolutionBackwardBias(h, &one, Transposed ? p.big.d : p.small.d,
                                                dy.raw_data(), &one, p.bias.d,
                                                dbias.raw_data()));
}

// f32 throughout, or one half type for `same_type` in NDHWC with channel counts that are
// multiples of 8 and no bias (else the registry promotes to f32).
std::string accept_conv(const OpCall& c, const std::vector<Tensor>& same_type,
                        const Tensor& weights, const Tensor& master_grad, const Tensor& bias) {
  const DType t = same_type.front().dtype();
  if (t == DType::f32) return accept_cuda_f32(c);
  if (!is_half(t))
    return fmt::format("cuDNN path takes f32/f16/bf16 volumes, got {}", dtype_name(t));
  if (std::string why = require_cuda_contiguous(same_type, t); !why.empty()) return why;
  if (master_grad.defined()) {
    if (master_grad.dtype() != t && master_grad.dtype() != DType::f32)
      return "the weight gradient must be f32 or the volumes' type";
    if (std::string why = require_cuda_contiguous({master_grad}, master_grad.dtype());
        !why.empty())
      return why;
  }
  const Conv3dSpec s = conv3d_detail::conv3d_spec(c.attrs);
  if (s.layout != VolumeLayout::ndhwc)
    return "half-precision 3-d convolutions run natively in NDHWC only";
  if (weights.dim() != 5 || weights.size(0) % 8 != 0 || weights.size(1) % 8 != 0)
    return "half-precision 3-d convolutions need channel counts that are multiples of 8";
  if (bias.defined())
    if (std::string why = accept_half_bias(bias, t, -1); !why.empty()) return why;
  return {};
}

std::string accept_forward(const OpCall& c) {
  if (c.inputs.size() < 2 || c.outputs.empty()) return "takes {x, w, bias?} -> {y}";
  return accept_conv(c, {c.inputs[0], c.inputs[1], c.outputs[0]}, c.inputs[1], Tensor(),
                     c.inputs.size() > 2 ? c.inputs[2] : Tensor());
}

std::string accept_backward_data(const OpCall& c) {
  if (c.inputs.size() < 2 || c.outputs.empty()) return "takes {dy, w} -> {dx}";
  return accept_conv(c, {c.inputs[0], c.inputs[1], c.outputs[0]}, c.inputs[1], Tensor(),
                     Tensor());
}

std::string accept_backward_weights(const OpCall& c) {
  if (c.inputs.size() < 2 || c.outputs.empty()) return "takes {dy, x} -> {dw, dbias?}";
  return accept_conv(c, {c.inputs[0], c.inputs[1]}, c.outputs[0], c.outputs[0],
                     c.outputs.size() > 1 ? c.outputs[1] : Tensor());
}

const bool registered = [] {
  register_op_impl("conv3d_forward",
                   cuda_impl("cuda.cudnn", 100, forward<false>, accept_forward));
  register_op_impl("conv3d_backward_data",
                   cuda_impl("cuda.cudnn", 100, backward_data<false>, accept_backward_data));
  register_op_impl("conv3d_backward_weights",
                   cuda_impl("cuda.cudnn", 100, backward_weights<false>, accept_backward_weights));
  register_op_impl("conv_transpose3d_forward",
                   cuda_impl("cuda.cudnn", 100, forward<true>, accept_forward));
  register_op_impl("conv_transpose3d_backward_data",
                   cuda_impl("cuda.cudnn", 100, backward_data<true>, accept_backward_data));
  register_op_impl("conv_transpose3d_backward_weights",
                   cuda_impl("cuda.cudnn", 100, backward_weights<true>, accept_backward_weights));
  // Mask R-CNN's 2-d transposed convolution on its depth-1 view (Note [2-d transposed
  // convolution as 3-d] in conv_transpose2d_common.hpp).
  namespace d2 = conv_transpose2d_detail;
  register_op_impl("conv_transpose2d_forward",
                   d2::on_3d_view(cuda_impl("cuda.cudnn", 100, forward<true>, accept_forward), d2::forward_3d));
  register_op_impl("conv_transpose2d_backward_data",
                   d2::on_3d_view(cuda_impl("cuda.cudnn", 100, backward_data<true>, accept_backward_data),
                                  d2::backward_data_3d));
  register_op_impl("conv_transpose2d_backward_weights",
                   d2::on_3d_view(cuda_impl("cuda.cudnn", 100, backward_weights<true>, accept_backward_weights),
                                  d2::backward_weights_3d));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda
