// The RNN-T joint's broadcast add h[b, t, u, :] = f[b, t, :] + g[b, u, :] and its backward (df =
// sum over u, dg = sum over t) timed on the CPU, two ways: the joint_add ops
// (Note [Transducer layout ops] in nn/transducer.hpp) and the construction from generic ops
// (f and g replicated with concat, then add; nn::sum over each axis), which is what the RNN-T
// plugin did before the ops existed.
//   bench_joint_add [--threads 2] [--iters 5] [--batch 16 --frames 150 --labels1 61 --hidden 512]
// Prints one JSON line with the per-iteration milliseconds and medians of both.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/transducer.hpp"
#include "benchhost/random.hpp"
#include "benchhost/threading.hpp"

using namespace benchhost;

namespace {

Tensor uniform(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Rng rng(seed, 1);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(-1.0f, 1.0f);
  return t;
}

template <class F>
std::vector<double> time_ms(int iters, F&& f) {
  f();  // warm-up: first-touch allocation, thread pool
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, iters = 5;
  std::int64_t b = 16, t = 150, u1 = 61, j = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::int64_t v = std::stoll(argv[i + 1]);
    if (a == "--threads") threads = static_cast<int>(v);
    else if (a == "--iters") iters = static_cast<int>(v);
    else if (a == "--batch") b = v;
    else if (a == "--frames") t = v;
    else if (a == "--labels1") u1 = v;
    else if (a == "--hidden") j = v;
    else {
      std::fprintf(stderr, "bench_joint_add: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  set_num_threads(threads);
  const Tensor f = uniform({b, t, j}, 1), g = uniform({b, u1, j}, 2), dh = uniform({b, t, u1, j}, 3);
  const std::vector<double> op_ms = time_ms(iters, [&] {
    const Tensor h = nn::joint_add_forward(f, g);
    const nn::JointAddGrads d = nn::joint_add_backward(dh);
  });
  const std::vector<double> generic_ms = time_ms(iters, [&] {
    const Tensor f_rep = nn::concat(std::vector<Tensor>(static_cast<std::size_t>(u1), f.view({b, t, 1, j})), 2);
    const Tensor g_rep = nn::concat(std::vector<Tensor>(static_cast<std::size_t>(t), g.view({b, 1, u1, j})), 1);
    const Tensor h = nn::add(f_rep, g_rep);
    const Tensor df = nn::sum(dh, {2}), dg = nn::sum(dh, {1});
  });
  std::printf("%s\n", fmt::format("{{\"B\": {}, \"T\": {}, \"U1\": {}, \"J\": {}, \"threads\": {}, \"joint_add_ms\": [{:.2f}], "
                                  "\"generic_ms\": [{:.2f}], \"joint_add_median_ms\": {:.2f}, \"generic_median_ms\": {:.2f}}}",
                                  b, t, u1, j, threads, fmt::join(op_ms, ", "), fmt::join(generic_ms, ", "),
                                  median(op_ms), median(generic_ms))
                          .c_str());
  return 0;
}
