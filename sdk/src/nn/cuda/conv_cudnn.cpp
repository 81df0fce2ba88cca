// CUDA 2-d convolution through cuDNN's legacy convolution API: conv2d_forward,
// conv2d_backward_data, conv2d_backward_weights (op contracts in sdk/src/nn/conv_common.hpp).
//
// Layout and precision: f32 activations in NCHW or NHWC as the op's layout attribute says, used
// in place. Weights are OIHW in every layout (nn/conv.hpp); with NHWC activations cuDNN's fast
// kernels want KRSC (OHWI) filters, so the weights are transformed into a scratch copy with
// cudnnTransformTensor (and the weight gradient computed in OHWI and transformed back). f32
// accumulation; TF32 tensor-op kernels only when tf32_enabled() (nn/math_mode.hpp), otherwise
// only FMA kernels are eligible (exact f32 products).
//
// Note [Half-precision convolutions]
// Under the bf16 and fp16 policies Conv2d hands these ops f16/bf16 images and weights. Calls whose
// images, weights and outputs share one half type run natively: half tensors, f32 accumulation
// (compute type FLOAT) and tensor-op kernels, as PyTorch's channels-last AMP convolutions do. The
// weight gradient may be the f32 master gradient ("+="): it is computed in the half type and added
// in f32 (the rounding PyTorch's AMP has too, where the half weight copy's gradient is cast back).
// Native only where cuDNN's tensor-op kernels surely apply: NHWC, and input and output channels
// per group multiples of 8; any other shape goes through the registry's f32 promotion (Note
// [Half-precision promotion]), e.g. a 1- or 3-channel stem convolution. A bias ([O], f32 or the
// half type) is added after the convolution in the half type, cast as PyTorch's AMP casts it; its
// gradient, the sum of the output gradient over N, H and W, is added to an f32 dbias in f32 (see
// add_half_bias, add_half_bias_grad in cudnn_common.hpp).
//
// Which API: channels-last calls (an f32 bias aside), of the dtypes BENCHHOST_CUDNN_GRAPH names (f16 and
// bf16 by default), go through cuDNN's graph API, where the legacy API has no fast engine for
// them (Note [cuDNN graph convolutions] in cudnn_graph_conv.hpp); the rest, and any problem the
// graph API has no plan for, through the legacy API below. Grouped convolutions too (the graph
// API reads the groups from the filter's [O, C/groups, KH, KW] dims): RetinaNet's ResNeXt
// backbone has sixteen, and through the legacy API their bf16 weight gradients alone took 58% of
// its bf16 step on an H200 (results/gpu/2026-11-27/run4).
//
// Note [Convolution plans]
// Descriptors and the algorithm are chosen once per (direction, shapes, parameters, layout,
// device, math mode) and cached: cudnnFindConvolution*Algorithm benchmarks every algorithm the
// first time a shape is seen (that takes milliseconds and allocates its own scratch), the
// fastest eligible one is kept with its workspace size. Later calls only allocate the workspace
// from the caching allocator and launch. Plans are immutable once built, so threads share them.

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
#include "nn/conv_common.hpp"
#include "nn/cuda/cudnn_common.hpp"
#include "nn/cuda/cudnn_graph_conv.hpp"

namespace benchhost::nn::cuda {
namespace {

using conv_detail::ConvGeometry;

enum class Direction { forward, backward_data, backward_filter };

struct ConvPlan {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  bool nhwc = false;
  TensorDesc w_oihw, w_ohwi;  // the weight as a plain tensor in both layouts (NHWC only)
  int algo = 0;               // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  std::size_t workspace_bytes = 0;
};

int checked_int(std::int64_t v, const char* what) {
  BH_CHECK_AS(Unsupported, v >= 0 && v <= INT_MAX, "conv2d (cuDNN): {} = {} does not fit an int",
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

void set_act(TensorDesc& d, const ImageDims& dims, bool nhwc, cudnnDataType_t type) {
  BH_CHECK_CUDNN(cudnnSetTensor4dDescriptor(
      d.d, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, type,
      checked_int(dims.n, "N"), checked_int(dims.c, "C"), checked_int(dims.h, "H"),
      checked_int(dims.w, "W")));
}

// `tensor_ops`: tensor-op kernels are eligible (TF32 allowed for f32, or half data, where they
// multiply exactly and accumulate in f32). Without, results measured with tensor-op math are
// skipped; the others (reported as FMA or DEFAULT math) run with CUDNN_FMA_MATH forced on the
// descriptor (build_plan).
template <class Perf>
bool eligible(const Perf& p, bool tensor_ops) {
  return p.status == CUDNN_STATUS_SUCCESS &&
         (tensor_ops || (p.mathType != CUDNN_TENSOR_OP_MATH &&
                   p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

// The fastest eligible result of a find (sorted by time), else of the heuristics. A find that
// fails as a whole (e.g. out of memory for its own scratch) falls back to the heuristics.
template <class Perf, class Find, class Heuristic>
Perf choose(Find&& find, Heuristic&& heuristic, int count, bool tensor_ops, const std::string& what) {
  std::vector<Perf> perf(static_cast<std::size_t>(count));
  int returned = 0;
  if (find(count, &returned, perf.data()) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < returned; ++i)
      if (eligible(perf[i], tensor_ops)) return perf[i];
  returned = 0;
  BH_CHECK_CUDNN(heuristic(count, &returned, perf.data()));
  for (int i = 0; i < returned; ++i)
    if (eligible(perf[i], tensor_ops)) return perf[i];
  BH_THROW(Unsupported, "conv2d (cuDNN): no {} algorithm supports {}{}", what,
           what, tensor_ops ? "" : " with FMA (non-TF32) math");
}

std::string plan_key(Direction dir, const ConvGeometry& g, const Conv2dSpec& s, int device,
                     bool tensor_ops, DType dtype) {
  return fmt::format("{}|{}|{}x{}x{}x{}|o{}k{}x{}|s{}x{}p{}x{}d{}x{}g{}|dev{}|tensor_ops{}|{}",
                     static_cast<int>(dir), image_layout_name(s.layout), g.x.n, g.x.c, g.x.h,
                     g.x.w, g.out_channels, g.kh, g.kw, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
                     s.dilation_h, s.dilation_w, s.groups, device, tensor_ops ? 1 : 0, dtype_name(dtype));
}

std::unique_ptr<ConvPlan> build_plan(Direction dir, const ConvGeometry& g, const Conv2dSpec& s,
                                     bool tensor_ops, DType dtype, cudnnHandle_t h) {
  const cudnnDataType_t type = cudnn_dtype(dtype);
  auto p = std::make_unique<ConvPlan>();
  p->nhwc = s.layout == ImageLayout::nhwc;
  set_act(p->x, g.x, p->nhwc, type);
  set_act(p->y, g.y, p->nhwc, type);
  const int o = checked_int(g.out_channels, "O"), ig = checked_int(g.x.c / g.groups, "C/groups"),
            kh = checked_int(g.kh, "KH"), kw = checked_int(g.kw, "KW");
  BH_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->bias.d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, o,
                                            1, 1));
  BH_CHECK_CUDNN(cudnnSetFilter4dDescriptor(
      p->w.d, type, p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, o, ig, kh, kw));
  if (p->nhwc) {
    BH_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->w_oihw.d, CUDNN_TENSOR_NCHW, type, o, ig, kh, kw));
    BH_CHECK_CUDNN(cudnnSetTensor4dDescriptor(p->w_ohwi.d, CUDNN_TENSOR_NHWC, type, o, ig, kh, kw));
  }
  BH_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(
      p->conv.d, checked_int(s.pad_h, "pad_h"), checked_int(s.pad_w, "pad_w"),
      checked_int(s.stride_h, "stride_h"), checked_int(s.stride_w, "stride_w"),
      checked_int(s.dilation_h, "dilation_h"), checked_int(s.dilation_w, "dilation_w"),
      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  BH_CHECK_CUDNN(cudnnSetConvolutionGroupCount(p->conv.d, checked_int(g.groups, "groups")));
  BH_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv.d, tensor_ops ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  int dn = 0, dc = 0, dh = 0, dw = 0;
  BH_CHECK_CUDNN(
      cudnnGetConvolution2dForwardOutputDim(p->conv.d, p->x.d, p->w.d, &dn, &dc, &dh, &dw));
  BH_CHECK(dn == g.y.n && dc == g.y.c && dh == g.y.h && dw == g.y.w,
           "conv2d (cuDNN): output {}x{}x{}x{} differs from the expected {}x{}x{}x{}", dn, dc, dh,
           dw, g.y.n, g.y.c, g.y.h, g.y.w);

  const std::string what = fmt::format("{} ({}, groups {})",
                                       dir == Direction::forward         ? "forward"
                                       : dir == Direction::backward_data ? "backward-data"
                                                                         : "backward-filter",
                                       image_layout_name(s.layout), g.groups);
  cudnnMathType_t math = CUDNN_FMA_MATH;
  if (dir == Direction::forward) {
    auto perf = choose<cudnnConvolutionFwdAlgoPerf_t>(
        [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* out) {
          return cudnnFindConvolutionForwardAlgorithm(h, p->x.d, p->w.d, p->conv.d, p->y.d, n, r,
                                                      out);
        },
        [&](int n, int* r, cudnnConvolutionFwdAlgoPerf_t* out) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, p->x.d, p->w.d, p->conv.d, p->y.d, n,
                                                        r, out);
        },
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, tensor_ops, what);
    p->algo = static_cast<int>(perf.algo);
    p->workspace_bytes = perf.memory;
    math = perf.mathType;
  } else if (dir == Direction::backward_data) {
    auto perf = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
        [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* out) {
          return cudnnFindConvolutionBackwardDataAlgorithm(h, p->w.d, p->y.d, p->conv.d, p->x.d,
                                                           n, r, out);
        },
        [&](int n, int* r, cudnnConvolutionBwdDataAlgoPerf_t* out) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->w.d, p->y.d, p->conv.d,
                                                             p->x.d, n, r, out);
        },
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, tensor_ops, what);
    p->algo = static_cast<int>(perf.algo);
    p->workspace_bytes = perf.memory;
    math = perf.mathType;
  } else {
    auto perf = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
        [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* out) {
          return cudnnFindConvolutionBackwardFilterAlgorithm(h, p->x.d, p->y.d, p->conv.d,
                                                             p->w.d, n, r, out);
        },
        [&](int n, int* r, cudnnConvolutionBwdFilterAlgoPerf_t* out) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->x.d, p->y.d, p->conv.d,
                                                               p->w.d, n, r, out);
        },
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, tensor_ops, what);
    p->algo = static_cast<int>(perf.algo);
    p->workspace_bytes = perf.memory;
    math = perf.mathType;
  }
  // With tensor ops allowed, run with the math type the chosen algorithm was measured with (cuDNN's
  // recommendation); without, FMA math stays forced so that no TF32 kernel can be picked.
  BH_CHECK_CUDNN(cudnnSetConvolutionMathType(p->conv.d, tensor_ops ? math : CUDNN_FMA_MATH));
  return p;
}

const ConvPlan& plan_for(Direction dir, const ConvGeometry& g, const Conv2dSpec& s, DType dtype,
                         cudnnHandle_t h) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::unique_ptr<ConvPlan>> plans;
  int device = 0;
  BH_CHECK_CUDA(cudaGetDevice(&device));
  const bool tensor_ops = is_half(dtype) || tf32_enabled();
  const std::string key = plan_key(dir, g, s, device, tensor_ops, dtype);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, build_plan(dir, g, s, tensor_ops, dtype, h)).first;
  return *it->second;
}

Tensor workspace(const ConvPlan& p, const Tensor& like) {
  if (p.workspace_bytes == 0) return Tensor();
  return Tensor::empty({static_cast<std::int64_t>(p.workspace_bytes)}, DType::u8, like.device());
}

void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// The weights in the filter layout of the plan: w itself (NCHW) or an OHWI copy (NHWC).
Tensor filter_of(const ConvPlan& p, const Tensor& w, cudnnHandle_t h) {
  if (!p.nhwc) return w;
  Tensor t = Tensor::empty(w.shape(), w.dtype(), w.device());
  const float one = 1.0f, zero = 0.0f;
  BH_CHECK_CUDNN(cudnnTransformTensor(h, &one, p.w_oihw.d, w.raw_data(), &zero, p.w_ohwi.d,
                                      t.raw_data()));
  return t;
}

// The call as a graph-API problem in channels-last (KRSC filters), or nothing where it goes through
// the legacy API (see the file's comment).
std::optional<graph::ConvProblem> graph_problem(graph::ConvKind kind, const ConvGeometry& g,
                                                const Conv2dSpec& s, DType dtype, bool bias) {
  if (bias || s.layout != ImageLayout::nhwc || !graph::enabled_for(dtype)) return std::nullopt;
  graph::ConvProblem p;
  p.kind = kind;
  p.dtype = dtype;
  p.tf32 = tf32_enabled();
  p.x_dims = {g.x.n, g.x.c, g.x.h, g.x.w};
  p.y_dims = {g.y.n, g.y.c, g.y.h, g.y.w};
  p.w_dims = {g.out_channels, g.x.c / g.groups, g.kh, g.kw};  // cuDNN infers the groups from C
  p.x_strides = graph::channels_last_strides(p.x_dims);
  p.y_strides = graph::channels_last_strides(p.y_dims);
  p.w_strides = graph::channels_last_strides(p.w_dims);
  p.pad = {s.pad_h, s.pad_w};
  p.stride = {s.stride_h, s.stride_w};
  p.dilation = {s.dilation_h, s.dilation_w};
  return p;
}

// OIHW weights <-> their OHWI (KRSC) copy: to = from (beta 0) or to += from (beta 1).
void transform_filter(cudnnHandle_t h, const Tensor& from, bool from_last, const Tensor& to,
                      float beta) {
  const cudnnDataType_t type = cudnn_dtype(from.dtype());
  TensorDesc plain, last;
  const int o = checked_int(from.size(0), "O"), i = checked_int(from.size(1), "I"),
            kh = checked_int(from.size(2), "KH"), kw = checked_int(from.size(3), "KW");
  BH_CHECK_CUDNN(cudnnSetTensor4dDescriptor(plain.d, CUDNN_TENSOR_NCHW, type, o, i, kh, kw));
  BH_CHECK_CUDNN(cudnnSetTensor4dDescriptor(last.d, CUDNN_TENSOR_NHWC, type, o, i, kh, kw));
  const float one = 1.0f;
  BH_CHECK_CUDNN(cudnnTransformTensor(h, &one, from_last ? last.d : plain.d, from.raw_data(), &beta,
                                      from_last ? plain.d : last.d, to.raw_data()));
}

Tensor filter_last(const Tensor& w, cudnnHandle_t h) {
  Tensor t = Tensor::empty(w.shape(), w.dtype(), w.device());
  transform_filter(h, w, false, t, 0.0f);
  return t;
}

void forward(OpCall& call) {
  const Conv2dSpec s = conv_detail::conv_spec(call.attrs);
  const Tensor &x = call.inputs[0], &w = call.inputs[1];
  const Tensor bias = call.inputs.size() > 2 ? call.inputs[2] : Tensor();
  Tensor& y = call.outputs[0];
  const ConvGeometry g = conv_detail::conv_geometry(x.shape(), w.shape(), s);
  BH_CHECK_AS(InvalidArgument, y.shape() == image_shape(g.y, s.layout),
              "conv2d_forward: output {} should be {}", shape_str(y.shape()),
              shape_str(image_shape(g.y, s.layout)));
  set_device_of(x);
  cudnnHandle_t h = cudnn_handle();
  const bool half_bias = bias.defined() && is_half(x.dtype());
  if (auto gp = graph_problem(graph::ConvKind::forward, g, s, x.dtype(), bias.defined() && !half_bias)) {
    const Tensor wf = filter_last(w, h);
    if (graph::run(*gp, h, x.device(), x.raw_data(), wf.raw_data(), y.raw_data())) {
      if (half_bias) add_half_bias(y, bias);
      return;
    }
  }
  const ConvPlan& p = plan_for(Direction::forward, g, s, x.dtype(), h);
  const Tensor wf = filter_of(p, w, h);
  Tensor ws = workspace(p, x);
  const float one = 1.0f, zero = 0.0f;
  BH_CHECK_CUDNN(cudnnConvolutionForward(h, &one, p.x.d, x.raw_data(), p.w.d, wf.raw_data(),
                                         p.conv.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), ptr(ws),
                                         p.workspace_bytes, &zero, p.y.d, y.raw_data()));
  if (half_bias)
    add_half_bias(y, bias);
  else if (bias.defined())
    BH_CHECK_CUDNN(cudnnAddTensor(h, &one, p.bias.d, bias.raw_data(), &one, p.y.d, y.raw_data()));
}

void backward_data(OpCall& call) {
  const Conv2dSpec s = conv_detail::conv_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &w = call.inputs[1];
  Tensor& dx = call.outputs[0];
  const ConvGeometry g = conv_detail::conv_geometry(dx.shape(), w.shape(), s);
  BH_CHECK_AS(InvalidArgument, dy.shape() == image_shape(g.y, s.layout),
              "conv2d_backward_data: output gradient {} should be {}", shape_str(dy.shape()),
              shape_str(image_shape(g.y, s.layout)));
  set_device_of(dy);
  cudnnHandle_t h = cudnn_handle();
  if (auto gp = graph_problem(graph::ConvKind::backward_data, g, s, dy.dtype(), false)) {
    const Tensor wf = filter_last(w, h);
    if (graph::run(*gp, h, dy.device(), dx.raw_data(), wf.raw_data(), dy.raw_data())) return;
  }
  const ConvPlan& p = plan_for(Direction::backward_data, g, s, dy.dtype(), h);
  const Tensor wf = filter_of(p, w, h);
  Tensor ws = workspace(p, dy);
  const float one = 1.0f, zero = 0.0f;
  BH_CHECK_CUDNN(cudnnConvolutionBackwardData(
      h, &one, p.w.d, wf.raw_data(), p.y.d, dy.raw_data(), p.conv.d,
      static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), ptr(ws), p.workspace_bytes, &zero,
      p.x.d, dx.raw_data()));
}

void backward_weights(OpCall& call) {
  const Conv2dSpec s = conv_detail::conv_spec(call.attrs);
  const Tensor &dy = call.inputs[0], &x = call.inputs[1];
  Tensor& dw = call.outputs[0];
  const Tensor dbias = call.outputs.size() > 1 ? call.outputs[1] : Tensor();
  const ConvGeometry g = conv_detail::conv_geometry(x.shape(), dw.shape(), s);
  BH_CHECK_AS(InvalidArgument, dy.shape() == image_shape(g.y, s.layout),
              "conv2d_backward_weights: output gradient {} should be {}", shape_str(dy.shape()),
              shape_str(image_shape(g.y, s.layout)));
  set_device_of(dy);
  cudnnHandle_t h = cudnn_handle();
  const float one = 1.0f, zero = 0.0f;
  // The gradient accumulates into dw (beta = 1), or, for the f32 master gradient of half images
  // (Note [Half-precision convolutions]), goes into a half-type scratch that is then added in f32.
  const bool master_f32 = dw.dtype() != dy.dtype();
  const Tensor into = master_f32 ? Tensor::empty(dw.shape(), dy.dtype(), dw.device()) : dw;
  const float* beta = master_f32 ? &zero : &one;
  const bool half_dbias = dbias.defined() && is_half(dy.dtype());
  if (auto gp = graph_problem(graph::ConvKind::backward_filter, g, s, dy.dtype(), dbias.defined() && !half_dbias)) {
    // Computed in OHWI, then transformed into OIHW.
    Tensor dw_ohwi = Tensor::empty(dw.shape(), dy.dtype(), dw.device());
    if (graph::run(*gp, h, dy.device(), x.raw_data(), dw_ohwi.raw_data(), dy.raw_data())) {
      transform_filter(h, dw_ohwi, true, into, *beta);
      if (master_f32) add_(dw, cast(into, dw.dtype()));
      if (half_dbias) add_half_bias_grad(dbias, dy);
      return;
    }
  }
  const ConvPlan& p = plan_for(Direction::backward_filter, g, s, dy.dtype(), h);
  Tensor ws = workspace(p, dy);
  const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo);
  if (!p.nhwc) {
    BH_CHECK_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.x.d, x.raw_data(), p.y.d,
                                                  dy.raw_data(), p.conv.d, algo, ptr(ws),
                                                  p.workspace_bytes, beta, p.w.d, into.raw_data()));
  } else {
    // Computed in OHWI, then transformed into OIHW.
    Tensor dw_ohwi = Tensor::empty(dw.shape(), dy.dtype(), dw.device());
    BH_CHECK_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.x.d, x.raw_data(), p.y.d,
                                                  dy.raw_data(), p.conv.d, algo, ptr(ws),
                                                  p.workspace_bytes, &zero, p.w.d,
                                                  dw_ohwi.raw_data()));
    BH_CHECK_CUDNN(cudnnTransformTensor(h, &one, p.w_ohwi.d, dw_ohwi.raw_data(), beta,
                                        p.w_oihw.d, into.raw_data()));
  }
  if (master_f32) add_(dw, cast(into, dw.dtype()));
  if (half_dbias)
    add_half_bias_grad(dbias, dy);
  else if (dbias.defined())
    BH_CHECK_CUDNN(cudnnConvolutionBackwardBias(h, &one, p.y.d, dy.raw_data(), &one, p.bias.d,
                                                dbias.raw_data()));
}

// Which calls run here (Note [Half-precision convolutions]): f32 throughout, or one half type for
// `same_type` (the first of them sets it) in the shapes where cuDNN's tensor-op kernels apply.
// `weights` is the OIHW tensor; `master_grad` (the weight gradient) and `bias` (or its gradient)
// may be f32 or the half type.
std::string accept_conv(const OpCall& c, const std::vector<Tensor>& same_type, const Tensor& weights,
                        const Tensor& master_grad, const Tensor& bias) {
  const DType t = same_type.front().dtype();
  if (t == DType::f32) return accept_cuda_f32(c);
  if (!is_half(t)) return fmt::format("cuDNN path takes f32/f16/bf16 images, got {}", dtype_name(t));
  if (std::string why = require_cuda_contiguous(same_type, t); !why.empty()) return why;
  if (master_grad.defined()) {
    if (master_grad.dtype() != t && master_grad.dtype() != DType::f32)
      return "the weight gradient must be f32 or the images' type";
    if (std::string why = require_cuda_contiguous({master_grad}, master_grad.dtype()); !why.empty()) return why;
  }
  if (bias.defined())
    if (std::string why = accept_half_bias(bias, t, weights.dim() >= 1 ? weights.size(0) : -1); !why.empty()) return why;
  const Conv2dSpec s = conv_detail::conv_spec(c.attrs);
  if (s.layout != ImageLayout::nhwc) return "half-precision convolutions run natively in NHWC only";
  if (weights.dim() != 4 || s.groups <= 0 || weights.size(0) % (8 * s.groups) != 0 || weights.size(1) % 8 != 0)
    return "half-precision convolutions need input and output channels per group that are multiples of 8";
  return {};
}

// inputs {x, w, bias?}; outputs {y}
std::string accept_forward(const OpCall& c) {
  if (c.inputs.size() < 2 || c.outputs.empty()) return "conv2d_forward takes {x, w, bias?} -> {y}";
  return accept_conv(c, {c.inputs[0], c.inputs[1], c.outputs[0]}, c.inputs[1], Tensor(),
                     c.inputs.size() > 2 ? c.inputs[2] : Tensor());
}

// inputs {dy, w}; outputs {dx}
std::string accept_backward_data(const OpCall& c) {
  if (c.inputs.size() < 2 || c.outputs.empty()) return "conv2d_backward_data takes {dy, w} -> {dx}";
  return accept_conv(c, {c.inputs[0], c.inputs[1], c.outputs[0]}, c.inputs[1], Tensor(), Tensor());
}

// inputs {dy, x}; outputs {dw +=, dbias +=?}
std::string accept_backward_weights(const OpCall& c) {
  if (c.inputs.size() < 2 || c.outputs.empty()) return "conv2d_backward_weights takes {dy, x} -> {dw, dbias?}";
  return accept_conv(c, {c.inputs[0], c.inputs[1]}, c.outputs[0], c.outputs[0],
                     c.outputs.size() > 1 ? c.outputs[1] : Tensor());
}

const bool registered = [] {
  register_op_impl("conv2d_forward", cuda_impl("cuda.cudnn", 100, forward, accept_forward));
  register_op_impl("conv2d_backward_data", cuda_impl("cuda.cudnn", 100, backward_data, accept_backward_data));
  register_op_impl("conv2d_backward_weights",
                   cuda_impl("cuda.cudnn", 100, backward_weights, accept_backward_weights));
  return true;
}();

}  // namespace
}  // namespace benchhost::nn::cuda
