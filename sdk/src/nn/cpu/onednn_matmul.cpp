// oneDNN matmul primitives with a shape-keyed cache; see onednn_matmul.hpp
// Note [oneDNN matmul cache].

#include "nn/cpu/onednn_matmul.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "benchhost/error.hpp"

namespace benchhost::nn::cpu {

namespace {

constexpr std::size_t kMaxEntries = 4096;

// Note [Small matmuls run on one thread]
// Below about 2 MFLOP an OpenMP fork/join costs more than the work, and on a busy machine
// (parallel ctest, other processes) spinning OpenMP workers can slow a tiny matmul down a
// hundredfold. Such problems run on the calling thread only: the OpenMP thread count is set to 1
// around primitive creation and execution (oneDNN may fix its thread count when the primitive is
// created, so the count is part of the cache key) and restored afterwards.
constexpr double kSmallFlops = 2.0e6;

struct OmpThreads {
  explicit OmpThreads(int n) : saved(omp_get_max_threads()) {
    if (n != saved) omp_set_num_threads(n);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved) omp_set_num_threads(saved);
  }
  int saved;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::algorithm eltwise_alg(Activation a) {
  switch (a) {
    case Activation::relu: return dnnl::algorithm::eltwise_relu;
    case Activation::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case Activation::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case Activation::sigmoid: return dnnl::algorithm::eltwise_logistic;
    case Activation::tanh: return dnnl::algorithm::eltwise_tanh;
    case Activation::none: break;
  }
  return dnnl::algorithm::undef;
}

std::string key_of(const MatmulProblem& p, int threads) {
  return fmt::format("{},{},{},{}|{},{},{}|{},{},{}|{},{},{}|{}|{}|{}|{}|t{}", p.B, p.M, p.N, p.K,
                     p.a_sb, p.a_sm, p.a_sk, p.w_sb, p.w_sk, p.w_sn, p.c_sb, p.c_sm, p.c_sn,
                     p.alpha, p.accumulate, p.has_bias, static_cast<int>(p.act), threads);
}

struct Cached {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, w_md, b_md, c_md;
};

Cached build(const MatmulProblem& p) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::memory::desc a_md(dims{p.B, p.M, p.K}, dt::f32, dims{p.a_sb, p.a_sm, p.a_sk});
  dnnl::memory::desc w_md(dims{p.w_sb == 0 ? 1 : p.B, p.K, p.N}, dt::f32,
                          dims{p.w_sb == 0 ? p.K * p.N : p.w_sb, p.w_sk, p.w_sn});
  dnnl::memory::desc c_md(dims{p.B, p.M, p.N}, dt::f32, dims{p.c_sb, p.c_sm, p.c_sn});
  dnnl::memory::desc b_md;
  if (p.has_bias) b_md = dnnl::memory::desc(dims{1, 1, p.N}, dt::f32, dims{p.N, p.N, 1});
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  if (p.accumulate) po.append_sum(1.0f);
  if (p.act != Activation::none) po.append_eltwise(1.0f, eltwise_alg(p.act), 0.0f, 0.0f);
  attr.set_post_ops(po);
  if (p.alpha != 1.0f) attr.set_output_scales(0, {p.alpha});
  dnnl::matmul::desc d = p.has_bias ? dnnl::matmul::desc(a_md, w_md, b_md, c_md)
                                    : dnnl::matmul::desc(a_md, w_md, c_md);
  dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
  return Cached{dnnl::matmul(pd), a_md, w_md, b_md, c_md};
}

}  // namespace

std::string onednn_matmul_accepts(const MatmulProblem& p) {
  if (p.has_bias && p.alpha != 1.0f) return "alpha with bias is not supported";
  if (p.M <= 0 || p.N <= 0 || p.K <= 0 || p.B <= 0) return "empty problem";
  return {};
}

void onednn_matmul(const MatmulProblem& p, const float* a, const float* w, const float* bias,
                   float* c) {
  // Per thread: a oneDNN primitive must run on the thread that created it and never on two
  // threads at once (library scratchpad; see Note [Primitive cache] in conv_dnnl.hpp).
  thread_local std::unordered_map<std::string, Cached> cache;
  const double flops = 2.0 * static_cast<double>(p.B) * p.M * p.N * p.K;
  const OmpThreads threads(flops < kSmallFlops ? 1 : omp_get_max_threads());
  const std::string key = key_of(p, omp_get_max_threads());
  Cached entry;
  if (auto it = cache.find(key); it != cache.end()) entry = it->second;
  if (!entry.prim) {
    try {
      entry = build(p);
    } catch (const dnnl::error& e) {
      BH_THROW(Unsupported, "oneDNN matmul refused problem {}: {}", key, e.what());
    }
    if (cache.size() >= kMaxEntries) cache.clear();
    cache.emplace(key, entry);
  }
  auto& eng = cpu_engine();
  dnnl::stream s(eng);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(entry.a_md, eng, const_cast<float*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(entry.w_md, eng, const_cast<float*>(w))},
      {DNNL_ARG_DST, dnnl::memory(entry.c_md, eng, c)}};
  if (p.has_bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(entry.b_md, eng, const_cast<float*>(bias)));
  entry.prim.execute(s, args);
  s.wait();
}

namespace {
// Collapse dims [0, n) of a tensor into one batch dim; returns false if not expressible by one
// stride.
bool collapse_batch(const Tensor& t, std::int64_t n, std::int64_t& count, std::int64_t& stride) {
  count = 1;
  stride = 0;
  if (n == 0) return true;
  std::int64_t expected = -1;
  for (std::int64_t d = n - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (expected >= 0 && t.strides()[d] != expected) return false;
    if (expected < 0) stride = t.strides()[d];
    expected = t.strides()[d] * t.size(d);
    count *= t.size(d);
  }
  if (count == 1) stride = 0;
  return true;
}
}  // namespace

MatmulProblem make_matmul_problem(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
                                  bool trans_b) {
  BH_CHECK_AS(InvalidArgument, a.dim() >= 2 && b.dim() >= 2,
              "matmul needs operands with at least 2 dims, got {} and {}", shape_str(a.shape()),
              shape_str(b.shape()));
  MatmulProblem p;
  const std::int64_t ad = a.dim(), bd = b.dim();
  p.M = trans_a ? a.size(-1) : a.size(-2);
  p.K = trans_a ? a.size(-2) : a.size(-1);
  const std::int64_t bk = trans_b ? b.size(-1) : b.size(-2);
  p.N = trans_b ? b.size(-2) : b.size(-1);
  BH_CHECK_AS(InvalidArgument, bk == p.K,
              "matmul inner dims differ: a {} (trans_a={}) and b {} (trans_b={})",
              shape_str(a.shape()), trans_a, shape_str(b.shape()), trans_b);
  const auto& as = a.strides();
  const auto& bs = b.strides();
  p.a_sm = trans_a ? as[ad - 1] : as[ad - 2];
  p.a_sk = trans_a ? as[ad - 2] : as[ad - 1];
  p.w_sk = trans_b ? bs[bd - 1] : bs[bd - 2];
  p.w_sn = trans_b ? bs[bd - 2] : bs[bd - 1];
  std::int64_t a_batch = 1, b_batch = 1;
  BH_CHECK_AS(InvalidArgument, collapse_batch(a, ad - 2, a_batch, p.a_sb),
              "matmul: batch dims of a {} are not collapsible (make it contiguous)",
              shape_str(a.shape()));
  BH_CHECK_AS(InvalidArgument, collapse_batch(b, bd - 2, b_batch, p.w_sb),
              "matmul: batch dims of b {} are not collapsible (make it contiguous)",
              shape_str(b.shape()));
  BH_CHECK_AS(InvalidArgument, b_batch == 1 || b_batch == a_batch,
              "matmul batch dims differ: a {} and b {}", shape_str(a.shape()), shape_str(b.shape()));
  if (b_batch == 1) p.w_sb = 0;
  p.B = a_batch;
  Shape want(a.shape().begin(), a.shape().end() - 2);
  want.push_back(p.M);
  want.push_back(p.N);
  BH_CHECK_AS(InvalidArgument, c.shape() == want && c.is_contiguous(),
              "matmul output must be contiguous {}, got {}", shape_str(want), c.describe());
  p.c_sm = p.N;
  p.c_sn = 1;
  p.c_sb = p.M * p.N;
  // A broadcast weight over a batch of row-major a's is one big 2D problem (better blocking).
  if (p.B > 1 && p.w_sb == 0 && p.a_sk == 1 && p.a_sb == p.M * p.a_sm) {
    p.M *= p.B;
    p.B = 1;
  }
  if (p.B == 1) {
    p.a_sb = p.M * p.K;  // unused with one batch, but keep it consistent
    p.c_sb = p.M * p.N;
  }
  return p;
}

}  // namespace benchhost::nn::cpu
