// nn::LSTM forward + backward (input and every parameter gradient) on the CPU, f32, at RNN-T
// encoder size by default (240 -> 1024, 2 layers, T 100, B 8). After warm-up, times `iters`
// iterations and prints one line in the peer's format (tools/peers/lstm_peer.py bench):
//   benchhost lstm threads=N ... fwd_bwd_ms_median=... fwd_ms_median=... cpu_ms_median=...
// Options: --threads --iters --warmup --T --B --I --H --layers.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <time.h>

#include "benchhost/nn/lstm.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"

using namespace benchhost;
using namespace benchhost::nn;

int main(int argc, char** argv) {
  std::int64_t T = 100, B = 8, I = 240, H = 1024, layers = 2;
  int threads = 0, iters = 5, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "option %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--T") T = std::atoll(next());
    else if (a == "--B") B = std::atoll(next());
    else if (a == "--I") I = std::atoll(next());
    else if (a == "--H") H = std::atoll(next());
    else if (a == "--layers") layers = std::atoll(next());
    else if (a == "--threads") threads = std::atoi(next());
    else if (a == "--iters") iters = std::atoi(next());
    else if (a == "--warmup") warmup = std::atoi(next());
    else {
      std::fprintf(stderr, "unknown option %s (see the file header for the options)\n", a.c_str());
      return 2;
    }
  }
  if (T <= 0 || B <= 0 || I <= 0 || H <= 0 || layers <= 0 || iters <= 0) {
    std::fprintf(stderr, "sizes and iters must be positive\n");
    return 2;
  }
  if (threads > 0) set_num_threads(threads);

  LSTM lstm({I, H, layers}, nullptr, 0, 1);
  Tensor x = Tensor::empty({T, B, I}), dy = Tensor::empty({T, B, H});
  Rng r(7);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = r.normal();
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy.data<float>()[i] = r.normal();

  using clock = std::chrono::steady_clock;
  auto cpu_ms = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
  };
  std::vector<double> total, fwd, cpu;
  for (int it = 0; it < warmup + iters; ++it) {
    lstm.zero_grad();
    const double c0 = cpu_ms();
    const auto t0 = clock::now();
    Tensor y = lstm.forward(x);
    const auto t1 = clock::now();
    Tensor dx = lstm.backward(dy);
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
  std::printf("benchhost lstm threads=%d T=%ld B=%ld I=%ld H=%ld layers=%ld fwd_bwd_ms_median=%.3f fwd_ms_median=%.3f "
              "cpu_ms_median=%.3f\n",
              get_num_threads(), static_cast<long>(T), static_cast<long>(B), static_cast<long>(I), static_cast<long>(H),
              static_cast<long>(layers), median(total), median(fwd), median(cpu));
  return 0;
}
