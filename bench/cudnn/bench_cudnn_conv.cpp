// bench_cudnn_conv: what cuDNN's legacy convolution API offers for the backward-data (dgrad) and
// forward convolutions of ResNet-50 (b256, NHWC) and 3D U-Net (b2, NDHWC) shapes, in f32 (FMA),
// TF32 and bf16, next to the SDK's own conv*_backward_data / conv*_forward ops on the same
// shapes. For each case it prints every algorithm cudnnFind* returns (status, time, workspace,
// math type), then each successful algorithm's own steady-state time (run 5 times after a warm
// call, CUDA events), then the SDK ops' steady-state times (forward, backward-data, and
// backward-weights into an f32 master gradient) through whichever API BENCHHOST_CUDNN_GRAPH gives
// them (Note [cuDNN graph convolutions] in sdk/src/nn/cuda/cudnn_graph_conv.hpp). GPU only:
//   build/bin/bench_cudnn_conv            # every case
//   build/bin/bench_cudnn_conv 3x3        # the cases whose name contains "3x3"
//   build/bin/bench_cudnn_conv "" sdk      # the SDK ops only (no legacy algorithm list)
//   BENCHHOST_CUDNN_GRAPH=all build/bin/bench_cudnn_conv   # the SDK ops in f32 through the graph API too
// Output lines are CSV: find,<case>,<mode>,<direction>,algo,status,ms,bytes,math
//                       run,<case>,<mode>,<direction>,algo,math,ms_steady
//                       sdk,<case>,<mode>,<direction>,ms_steady
#include <cuda_runtime.h>
#include <cudnn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/conv3d.hpp"
#include "benchhost/nn/math_mode.hpp"
#include "benchhost/tensor.hpp"

namespace {

bool g_sdk_only = false;  // argv[2] == "sdk": the SDK ops only, not the legacy API's algorithms

#define CK(call)                                                                         \
  do {                                                                                   \
    auto st_ = (call);                                                                   \
    if (st_ != 0) {                                                                      \
      std::fprintf(stderr, "%s:%d %s failed: %d\n", __FILE__, __LINE__, #call, (int)st_); \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

struct Case {
  const char* name;
  std::vector<int> x;  // N, C, spatial...
  int out_channels;
  std::vector<int> k, stride, pad;
};

std::vector<int> out_dims(const Case& c) {
  std::vector<int> y{c.x[0], c.out_channels};
  for (size_t i = 0; i < c.k.size(); ++i)
    y.push_back((c.x[2 + i] + 2 * c.pad[i] - c.k[i]) / c.stride[i] + 1);
  return y;
}

// Channels-last strides of an N,C,spatial... dims vector.
std::vector<int> channels_last_strides(const std::vector<int>& d) {
  const int nd = static_cast<int>(d.size());
  std::vector<int> s(nd);
  int acc = d[1];
  s[1] = 1;
  for (int i = nd - 1; i >= 2; --i) {
    s[i] = acc;
    acc *= d[i];
  }
  s[0] = acc;
  return s;
}

std::size_t count(const std::vector<int>& d) {
  std::size_t n = 1;
  for (int v : d) n *= static_cast<std::size_t>(v);
  return n;
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_conv";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

template <class F>
float time_ms(F&& f, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

void run_case(const Case& c, const char* mode, cudnnHandle_t h) {
  const bool bf16 = std::string(mode) == "bf16", tf32 = std::string(mode) == "tf32";
  const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const size_t esize = bf16 ? 2 : 4;
  const int nd = static_cast<int>(c.x.size()), sp = nd - 2;
  const std::vector<int> y = out_dims(c);
  std::vector<int> w{c.out_channels, c.x[1]};
  for (int k : c.k) w.push_back(k);
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CK(cudnnCreateTensorDescriptor(&xd));
  CK(cudnnCreateTensorDescriptor(&yd));
  CK(cudnnCreateFilterDescriptor(&wd));
  CK(cudnnCreateConvolutionDescriptor(&cd));
  CK(cudnnSetTensorNdDescriptor(xd, type, nd, c.x.data(), channels_last_strides(c.x).data()));
  CK(cudnnSetTensorNdDescriptor(yd, type, nd, y.data(), channels_last_strides(y).data()));
  CK(cudnnSetFilterNdDescriptor(wd, type, CUDNN_TENSOR_NHWC, nd, w.data()));
  std::vector<int> dil(sp, 1);
  CK(cudnnSetConvolutionNdDescriptor(cd, sp, c.pad.data(), c.stride.data(), dil.data(),
                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  const bool tensor_ops = bf16 || tf32;
  CK(cudnnSetConvolutionMathType(cd, tensor_ops ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  void *x, *dy, *wp;
  CK(cudaMalloc(&x, count(c.x) * esize));
  CK(cudaMalloc(&dy, count(y) * esize));
  CK(cudaMalloc(&wp, count(w) * esize));
  CK(cudaMemset(x, 0, count(c.x) * esize));
  CK(cudaMemset(dy, 0, count(y) * esize));
  CK(cudaMemset(wp, 0, count(w) * esize));
  const float one = 1, zero = 0;

  // Backward data.
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  int n = 0;
  if (!g_sdk_only) {
  const auto t0 = std::chrono::steady_clock::now();
  cudnnStatus_t st = cudnnFindConvolutionBackwardDataAlgorithm(h, wd, yd, cd, xd,
                                                               (int)perf.size(), &n, perf.data());
  const double find_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("findcall,%s,%s,dgrad,status=%s,returned=%d,wall_ms=%.1f\n", c.name, mode,
              cudnnGetErrorString(st), n, find_ms);
  for (int i = 0; i < n; ++i)
    std::printf("find,%s,%s,dgrad,%d,%s,%.3f,%zu,%s\n", c.name, mode, (int)perf[i].algo,
                cudnnGetErrorString(perf[i].status), perf[i].time, perf[i].memory,
                math_name(perf[i].mathType));
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (!tensor_ops && perf[i].mathType != CUDNN_FMA_MATH && perf[i].mathType != CUDNN_DEFAULT_MATH)
      continue;
    CK(cudnnSetConvolutionMathType(cd, tensor_ops ? perf[i].mathType : CUDNN_FMA_MATH));
    void* ws = nullptr;
    if (perf[i].memory) CK(cudaMalloc(&ws, perf[i].memory));
    const float ms = time_ms([&] {
      CK(cudnnConvolutionBackwardData(h, &one, wd, wp, yd, dy, cd, perf[i].algo, ws, perf[i].memory,
                                      &zero, xd, x));
    }, 5);
    std::printf("run,%s,%s,dgrad,%d,%s,%.3f\n", c.name, mode, (int)perf[i].algo,
                math_name(perf[i].mathType), ms);
    if (ws) cudaFree(ws);
  }
  // The v7 heuristics' ranking, for comparison.
  n = 0;
  if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, (int)perf.size(), &n,
                                                   perf.data()) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < n && i < 4; ++i)
      std::printf("heur,%s,%s,dgrad,%d,%s,%zu,%s\n", c.name, mode, (int)perf[i].algo,
                  cudnnGetErrorString(perf[i].status), perf[i].memory,
                  math_name(perf[i].mathType));
  }
  cudaFree(x);
  cudaFree(dy);
  cudaFree(wp);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);

  // The SDK's ops on the same shapes (channels-last), steady state after two warm calls.
  using namespace benchhost;
  const Device dev = Device::cuda(0);
  const DType dt = bf16 ? DType::bf16 : DType::f32;
  nn::Tf32Scope scope(tf32);
  auto shape_cl = [](const std::vector<int>& d) {  // N, spatial..., C
    Shape s{d[0]};
    for (size_t i = 2; i < d.size(); ++i) s.push_back(d[i]);
    s.push_back(d[1]);
    return s;
  };
  Shape ws{w.begin(), w.end()};
  Tensor xt = Tensor::zeros(shape_cl(c.x), dt, dev), dyt = Tensor::zeros(shape_cl(y), dt, dev),
         wt = Tensor::zeros(ws, dt, dev);
  auto sdk_ms = [&](auto&& f) {
    f();
    f();
    synchronize(dev);
    const auto a = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) f();
    synchronize(dev);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count() / 5;
  };
  if (sp == 2) {
    nn::Conv2dSpec s;
    s.stride_h = c.stride[0], s.stride_w = c.stride[1], s.pad_h = c.pad[0], s.pad_w = c.pad[1];
    s.layout = nn::ImageLayout::nhwc;
    std::printf("sdk,%s,%s,dgrad,%.3f\n", c.name, mode,
                sdk_ms([&] { (void)nn::conv2d_backward_data(dyt, wt, xt.shape(), s); }));
    std::printf("sdk,%s,%s,fwd,%.3f\n", c.name, mode,
                sdk_ms([&] { (void)nn::conv2d_forward(xt, wt, Tensor(), s); }));
    Tensor dw = Tensor::zeros(ws, DType::f32, dev), none;
    std::printf("sdk,%s,%s,wgrad,%.3f\n", c.name, mode,
                sdk_ms([&] { nn::conv2d_backward_weights(dyt, xt, dw, none, s); }));
  } else {
    nn::Conv3dSpec s;
    s.stride_d = c.stride[0], s.stride_h = c.stride[1], s.stride_w = c.stride[2];
    s.pad_d = c.pad[0], s.pad_h = c.pad[1], s.pad_w = c.pad[2];
    s.layout = nn::VolumeLayout::ndhwc;
    std::printf("sdk,%s,%s,dgrad,%.3f\n", c.name, mode,
                sdk_ms([&] { (void)nn::conv3d_backward_data(dyt, wt, xt.shape(), s); }));
    std::printf("sdk,%s,%s,fwd,%.3f\n", c.name, mode,
                sdk_ms([&] { (void)nn::conv3d_forward(xt, wt, Tensor(), s); }));
    Tensor dw = Tensor::zeros(ws, DType::f32, dev), none;
    std::printf("sdk,%s,%s,wgrad,%.3f\n", c.name, mode,
                sdk_ms([&] { nn::conv3d_backward_weights(dyt, xt, dw, none, s); }));
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Case> cases = {
      {"r50_56_1x1_64_64", {256, 64, 56, 56}, 64, {1, 1}, {1, 1}, {0, 0}},
      {"r50_56_3x3_64_64", {256, 64, 56, 56}, 64, {3, 3}, {1, 1}, {1, 1}},
      {"r50_56_1x1_64_256", {256, 64, 56, 56}, 256, {1, 1}, {1, 1}, {0, 0}},
      {"r50_56_3x3s2_128", {256, 128, 56, 56}, 128, {3, 3}, {2, 2}, {1, 1}},
      {"r50_56_1x1s2_256_512", {256, 256, 56, 56}, 512, {1, 1}, {2, 2}, {0, 0}},
      {"r50_14_3x3_256", {256, 256, 14, 14}, 256, {3, 3}, {1, 1}, {1, 1}},
      {"r50_7_1x1_512_2048", {256, 512, 7, 7}, 2048, {1, 1}, {1, 1}, {0, 0}},
      {"unet_128_3x3x3_32_32", {2, 32, 128, 128, 128}, 32, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}},
      {"unet_64_3x3x3s2_64", {2, 64, 64, 64, 64}, 128, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}},
  };
  const std::string only = argc > 1 ? argv[1] : "";
  g_sdk_only = argc > 2 && std::string(argv[2]) == "sdk";
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  std::printf("cudnn %zu, device: ", cudnnGetVersion());
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s\n", prop.name);
  for (const Case& c : cases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    for (const char* mode : {"bf16", "tf32", "fp32"}) run_case(c, mode, h);
  }
  cudnnDestroy(h);
  return 0;
}
