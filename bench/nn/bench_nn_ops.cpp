// Timings of the main CPU nn ops (google-benchmark). Not a test: run by hand,
//   build/bin/bench_nn_ops [--benchmark_filter=Attention] [--threads=N]
// Shapes are those of a BERT-base-like layer at batch 8 x 128 tokens unless stated.
// items_per_second counts elements (or tokens for the GEMM-bound ops).

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>

#include "benchhost/nn/ops.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"

using namespace benchhost;
using namespace benchhost::nn;

namespace {

Tensor rnd(const Shape& s, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(s);
  Rng r(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = r.uniform(lo, hi);
  return t;
}

constexpr std::int64_t kTokens = 8 * 128;

void BM_Matmul(benchmark::State& st) {
  const std::int64_t M = st.range(0), N = st.range(1), K = st.range(2);
  Tensor a = rnd({M, K}, 1), b = rnd({K, N}, 2);
  for (auto _ : st) benchmark::DoNotOptimize(matmul(a, b).raw_data());
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Matmul)->Args({1024, 768, 768})->Args({1024, 3072, 768})->Args({1024, 768, 3072})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LinearGeluForward(benchmark::State& st) {
  const std::int64_t in = st.range(0), out = st.range(1);
  Tensor x = rnd({kTokens, in}, 1), w = rnd({out, in}, 2), b = rnd({out}, 3);
  Tensor z;
  for (auto _ : st) benchmark::DoNotOptimize(linear_forward(x, w, b, Activation::gelu_erf, &z).raw_data());
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * kTokens * in * out, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LinearGeluForward)->Args({768, 3072})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LinearGeluBackward(benchmark::State& st) {
  const std::int64_t in = st.range(0), out = st.range(1);
  Tensor x = rnd({kTokens, in}, 1), w = rnd({out, in}, 2), b = rnd({out}, 3), dy = rnd({kTokens, out}, 4);
  Tensor z;
  linear_forward(x, w, b, Activation::gelu_erf, &z);
  Tensor dw = Tensor::zeros({out, in}), db = Tensor::zeros({out});
  for (auto _ : st) benchmark::DoNotOptimize(linear_backward(dy, x, w, z, Activation::gelu_erf, dw, db).raw_data());
  st.counters["GFLOP/s"] = benchmark::Counter(4.0 * kTokens * in * out, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LinearGeluBackward)->Args({768, 3072})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Gelu(benchmark::State& st) {
  Tensor x = rnd({kTokens, 3072}, 1, -4.0f, 4.0f);
  for (auto _ : st) benchmark::DoNotOptimize(gelu(x).raw_data());
  st.SetItemsProcessed(st.iterations() * x.numel());
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GeluBackward(benchmark::State& st) {
  Tensor x = rnd({kTokens, 3072}, 1, -4.0f, 4.0f), dy = rnd({kTokens, 3072}, 2);
  for (auto _ : st) benchmark::DoNotOptimize(activation_backward(dy, x, Activation::gelu_erf).raw_data());
  st.SetItemsProcessed(st.iterations() * x.numel());
}
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNorm(benchmark::State& st) {
  Tensor x = rnd({kTokens, 768}, 1), g = rnd({768}, 2), b = rnd({768}, 3);
  for (auto _ : st) benchmark::DoNotOptimize(layernorm_forward(x, g, b, 1e-12f).raw_data());
  st.SetItemsProcessed(st.iterations() * x.numel());
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNormBackward(benchmark::State& st) {
  Tensor x = rnd({kTokens, 768}, 1), g = rnd({768}, 2), b = rnd({768}, 3), dy = rnd({kTokens, 768}, 4);
  LayerNormSaved s;
  layernorm_forward(x, g, b, 1e-12f, &s);
  Tensor dg = Tensor::zeros({768}), db = Tensor::zeros({768});
  for (auto _ : st) benchmark::DoNotOptimize(layernorm_backward(dy, x, g, s, dg, db).raw_data());
  st.SetItemsProcessed(st.iterations() * x.numel());
}
BENCHMARK(BM_LayerNormBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Softmax(benchmark::State& st) {
  Tensor x = rnd({8 * 12 * 128, 128}, 1, -5.0f, 5.0f);
  for (auto _ : st) benchmark::DoNotOptimize(softmax_forward(x).raw_data());
  st.SetItemsProcessed(st.iterations() * x.numel());
}
BENCHMARK(BM_Softmax)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Dropout(benchmark::State& st) {
  Tensor x = rnd({kTokens, 768}, 1);
  DropoutSaved s;
  std::uint64_t step = 0;
  for (auto _ : st) benchmark::DoNotOptimize(dropout_forward(x, 0.1f, 1, step++, 0, &s).raw_data());
  st.SetItemsProcessed(st.iterations() * x.numel());
}
BENCHMARK(BM_Dropout)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_AttentionForward(benchmark::State& st) {
  const std::int64_t B = 8, H = 12, T = 128, D = 64;
  Tensor q = rnd({B, H, T, D}, 1), k = rnd({B, H, T, D}, 2), v = rnd({B, H, T, D}, 3);
  AttentionMask m;
  m.key_padding = Tensor::from_vector_i64({128, 100, 128, 64, 128, 128, 90, 128}, {8});
  AttentionSaved s;
  for (auto _ : st) benchmark::DoNotOptimize(sdpa_forward(q, k, v, m, 0.0f, &s).raw_data());
  st.counters["GFLOP/s"] = benchmark::Counter(4.0 * B * H * T * T * D, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttentionForward)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionBackward(benchmark::State& st) {
  const std::int64_t B = 8, H = 12, T = 128, D = 64;
  Tensor q = rnd({B, H, T, D}, 1), k = rnd({B, H, T, D}, 2), v = rnd({B, H, T, D}, 3), dout = rnd({B, H, T, D}, 4);
  AttentionMask m;
  m.causal = true;
  AttentionSaved s;
  sdpa_forward(q, k, v, m, 0.0f, &s);
  for (auto _ : st) benchmark::DoNotOptimize(sdpa_backward(dout, q, k, v, s, 0.0f).dq.raw_data());
  st.counters["GFLOP/s"] = benchmark::Counter(8.0 * B * H * T * T * D, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_AttentionBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CrossEntropy(benchmark::State& st) {
  const std::int64_t N = 1024, C = st.range(0);
  Tensor logits = rnd({N, C}, 1, -3.0f, 3.0f);
  std::vector<std::int64_t> t(N);
  Rng r(2);
  for (auto& v : t) v = static_cast<std::int64_t>(r.below(C));
  Tensor targets = Tensor::from_vector_i64(t, {N});
  for (auto _ : st) {
    auto f = softmax_cross_entropy_forward(logits, targets, 0.1f);
    benchmark::DoNotOptimize(softmax_cross_entropy_backward(f, targets, 0.1f).raw_data());
  }
  st.SetItemsProcessed(st.iterations() * N * C);
}
BENCHMARK(BM_CrossEntropy)->Arg(30522)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PermuteHeads(benchmark::State& st) {
  Tensor x = rnd({8, 128, 3, 12, 64}, 1);
  for (auto _ : st) benchmark::DoNotOptimize(permute_copy(x, {2, 0, 3, 1, 4}).raw_data());
  st.SetBytesProcessed(st.iterations() * x.nbytes() * 2);
}
BENCHMARK(BM_PermuteHeads)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // --threads=N (ours, before google-benchmark parses the rest)
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--threads=", 10) == 0) {
      set_num_threads(std::atoi(argv[i] + 10));
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
    }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("benchhost_threads", std::to_string(get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
