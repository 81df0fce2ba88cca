// One TransformerBlock forward+backward, timed per iteration (median and mean of --iters after
// --warmup). Prints one machine-readable line:
//   benchhost transformer_block threads=N fwd_bwd_ms_median=... fwd_bwd_ms_mean=... fwd_ms_median=...
//     cpu_ms_median=... tokens_per_s=...   (cpu_ms: process CPU time per fwd+bwd, all threads)
// Used by tools/bench_transformer_block.sh next to tools/peers/transformer_block_peer.py.
// Options: --batch 8 --seq 128 --hidden 256 --heads 4 --ffn 1024 --threads N --iters 20
//          --warmup 3 --pre-ln (GPT flavour, causal) --dropout 0.1

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <time.h>

#include "benchhost/nn/transformer.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"

using namespace benchhost;
using namespace benchhost::nn;

int main(int argc, char** argv) {
  std::int64_t batch = 8, seq = 128, hidden = 256, heads = 4, ffn = 1024;
  int threads = 0, iters = 20, warmup = 3;
  bool pre_ln = false;
  float dropout = 0.1f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "option %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--batch") batch = std::atoll(next());
    else if (a == "--seq") seq = std::atoll(next());
    else if (a == "--hidden") hidden = std::atoll(next());
    else if (a == "--heads") heads = std::atoll(next());
    else if (a == "--ffn") ffn = std::atoll(next());
    else if (a == "--threads") threads = std::atoi(next());
    else if (a == "--iters") iters = std::atoi(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else if (a == "--dropout") dropout = static_cast<float>(std::atof(next()));
    else if (a == "--pre-ln") pre_ln = true;
    else {
      std::fprintf(stderr, "unknown option %s (see the file header for the options)\n", a.c_str());
      return 2;
    }
  }
  if (batch <= 0 || seq <= 0 || hidden <= 0 || heads <= 0 || ffn <= 0 || iters <= 0 || hidden % heads) {
    std::fprintf(stderr, "sizes must be positive and heads must divide hidden\n");
    return 2;
  }
  if (threads > 0) set_num_threads(threads);

  TransformerBlockConfig cfg;
  cfg.hidden = hidden;
  cfg.heads = heads;
  cfg.ffn = ffn;
  cfg.hidden_dropout = dropout;
  cfg.attention_dropout = dropout;
  cfg.pre_ln = pre_ln;
  cfg.activation = pre_ln ? Activation::gelu_tanh : Activation::gelu_erf;
  cfg.layernorm_eps = pre_ln ? 1e-5f : 1e-12f;
  DropoutRng rng{1234, 0};
  TransformerBlock block(cfg, &rng);

  Tensor x = Tensor::empty({batch, seq, hidden});
  Tensor dy = Tensor::empty({batch, seq, hidden});
  Rng r(7);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.data<float>()[i] = r.normal();
    dy.data<float>()[i] = r.normal() * 1e-2f;
  }
  AttentionMask mask;
  if (pre_ln) mask.causal = true;
  else {
    std::vector<std::int64_t> lens(static_cast<std::size_t>(batch), seq);  // full length: same work as the peer
    mask.key_padding = Tensor::from_vector_i64(lens, {batch});
  }

  using clock = std::chrono::steady_clock;
  // Process CPU time as well: with one thread on a loaded machine it excludes the time the
  // process waited for a core, which wall time does not.
  auto cpu_ms = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  };
  std::vector<double> total, fwd, cpu;
  for (int it = 0; it < warmup + iters; ++it) {
    rng.step = static_cast<std::uint64_t>(it);
    block.zero_grad();
    const double c0 = cpu_ms();
    const auto t0 = clock::now();
    Tensor y = block.forward(x, mask);
    const auto t1 = clock::now();
    Tensor dx = block.backward(dy);
    const auto t2 = clock::now();
    const double c2 = cpu_ms();
    if (it >= warmup) {
      cpu.push_back(c2 - c0);
      fwd.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      total.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  double mean = 0;
  for (double t : total) mean += t;
  mean /= static_cast<double>(total.size());
  const double med = median(total);
  std::printf("benchhost transformer_block threads=%d fwd_bwd_ms_median=%.3f fwd_bwd_ms_mean=%.3f fwd_ms_median=%.3f cpu_ms_median=%.3f tokens_per_s=%.0f\n",
              get_num_threads(), med, mean, median(fwd), median(cpu), static_cast<double>(batch * seq) / (med / 1000.0));
  return 0;
}
