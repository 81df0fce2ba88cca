#pragma once
// The oneDNN matmul primitive, cached by problem (private to sdk/src/nn/cpu).
//
// Note [oneDNN matmul cache]
// Creating a oneDNN primitive costs tens to hundreds of microseconds (it JIT-compiles a kernel),
// so primitives are cached by everything that defines them: dims, strides, alpha, accumulate,
// bias presence and the fused activation. Training steps repeat the same shapes, so after the
// first step every matmul is a hash lookup. The cache is bounded (cleared past kMaxEntries, a
// guard against pathological shape churn) and guarded by a mutex; executing a cached primitive
// from several threads at once is allowed by oneDNN. oneDNN's CPU runtime here is OpenMP:
// benchhost/threading.hpp sets its thread count.

#include <cstdint>

#include "benchhost/nn/ops.hpp"

namespace benchhost::nn::cpu {

/// One batched matmul problem: c[b] = alpha * a[b] @ w[b] (+ bias) (+ c[b] if accumulate), then act.
/// All strides in elements; batch stride 0 broadcasts. a: [B, M, K], w: [B, K, N], c: [B, M, N].
struct MatmulProblem {
  std::int64_t B = 1, M = 0, N = 0, K = 0;
  std::int64_t a_sb = 0, a_sm = 0, a_sk = 0;
  std::int64_t w_sb = 0, w_sk = 0, w_sn = 0;
  std::int64_t c_sb = 0, c_sm = 0, c_sn = 0;
  float alpha = 1.0f;
  bool accumulate = false;
  bool has_bias = false;  // bias: [N], contiguous
  Activation act = Activation::none;
};

/// "" when oneDNN can run the problem here (always, for f32 with sane strides), else the reason.
std::string onednn_matmul_accepts(const MatmulProblem& p);
void onednn_matmul(const MatmulProblem& p, const float* a, const float* w, const float* bias, float* c);

/// Describe a (possibly batched, possibly transposed) operand pair as a MatmulProblem.
/// Throws InvalidArgument for incompatible shapes. c must be contiguous [batch..., M, N].
MatmulProblem make_matmul_problem(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
                                  bool trans_b);

}  // namespace benchhost::nn::cpu
