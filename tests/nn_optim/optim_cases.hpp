#pragma once
// Parameter sets and optimizer configurations shared by the multi-tensor tests on the CPU
// (tests/nn_optim/multi_tensor_test.cpp) and the CUDA-vs-CPU tests (tests/cuda/optim_cuda_test.cpp).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/nn/module.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace nn_optim_test {

using ParamSet = std::vector<std::unique_ptr<benchhost::nn::Parameter>>;

inline std::vector<benchhost::nn::Parameter*> pointers(const ParamSet& ps) {
  std::vector<benchhost::nn::Parameter*> out;
  for (const auto& p : ps) out.push_back(p.get());
  return out;
}

inline benchhost::Tensor random_tensor(const benchhost::Shape& shape, std::uint64_t seed, float lo, float hi) {
  benchhost::Tensor t = benchhost::Tensor::empty(shape);
  benchhost::Rng rng(seed, 7);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
  return t;
}

/// Five parameters on the CPU: an embedding-like [37, 5] (no decay; fill_grads may give it rows),
/// a bias [301] (skip list), a weight [9000], a weight [40000] spanning several 16384-element
/// chunks of the CUDA kernels, and a small [6, 4] weight.
inline ParamSet make_params(std::uint64_t seed) {
  const std::vector<benchhost::Shape> shapes = {{37, 5}, {301}, {9000}, {40000}, {6, 4}};
  const std::vector<bool> decay = {false, false, true, true, true};
  ParamSet out;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    auto p = std::make_unique<benchhost::nn::Parameter>();
    p->name = "p" + std::to_string(i);
    p->value = random_tensor(shapes[i], seed + i, -1.0f, 1.0f);
    p->grad = benchhost::Tensor::zeros(shapes[i]);
    p->weight_decay = decay[i];
    out.push_back(std::move(p));
  }
  return out;
}

/// Gradients for step `step`: random, the same for every copy of a set; the first parameter
/// gets sparse rows {3, 0, 30, 11} (its other rows are garbage that must be ignored) if `sparse`.
inline void fill_grads(ParamSet& ps, std::uint64_t seed, int step, bool sparse) {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    ps[i]->grad = random_tensor(ps[i]->value.shape(), seed * 1000 + static_cast<std::uint64_t>(step) * 10 + i, -0.5f, 0.5f);
    ps[i]->sparse_rows = benchhost::Tensor();
  }
  if (sparse) ps[0]->sparse_rows = benchhost::Tensor::from_vector_i64({3, 0, 30, 11}, {4});
}

/// A copy of a CPU set on `device` (values, gradients, rows, flags).
inline ParamSet copy_to(const ParamSet& ps, benchhost::Device device) {
  ParamSet out;
  for (const auto& p : ps) {
    auto q = std::make_unique<benchhost::nn::Parameter>();
    q->name = p->name;
    q->value = p->value.to(device);
    q->grad = p->grad.to(device);
    if (p->sparse_rows.defined()) q->sparse_rows = p->sparse_rows.to(device);
    q->weight_decay = p->weight_decay;
    out.push_back(std::move(q));
  }
  return out;
}

/// Copy the gradients (and rows) of `src` into `dst` (another device allowed).
inline void copy_grads(const ParamSet& src, ParamSet& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) {
    dst[i]->grad = src[i]->grad.to(dst[i]->value.device());
    dst[i]->sparse_rows = src[i]->sparse_rows.defined() ? src[i]->sparse_rows.to(dst[i]->value.device()) : benchhost::Tensor();
  }
}

struct OptimizerCase {
  std::string name;
  bool sparse;  ///< the first parameter gets sparse rows
  std::function<std::unique_ptr<benchhost::optim::Optimizer>(std::vector<benchhost::nn::Parameter*>)> make;
};

inline std::vector<OptimizerCase> optimizer_cases() {
  using namespace benchhost::optim;
  return {
      {"sgd", true, [](auto ps) { return std::make_unique<Sgd>(ps, SgdOptions{.weight_decay = 1e-3f}); }},
      {"sgd_momentum", true, [](auto ps) { return std::make_unique<Sgd>(ps, SgdOptions{.momentum = 0.9f, .weight_decay = 1e-3f}); }},
      {"sgd_nesterov", false, [](auto ps) { return std::make_unique<Sgd>(ps, SgdOptions{.momentum = 0.9f, .nesterov = true, .weight_decay = 1e-4f}); }},
      {"lars", false, [](auto ps) { return std::make_unique<Lars>(ps, LarsOptions{.momentum = 0.9f, .weight_decay = 5e-5f, .eta = 0.001f}); }},
      {"lamb", false, [](auto ps) { return std::make_unique<Lamb>(ps, LambOptions{}); }},
      {"adam", true, [](auto ps) { return std::make_unique<Adam>(ps, AdamOptions{.weight_decay = 1e-4f}); }},
      {"adamw", false, [](auto ps) { return std::make_unique<AdamW>(ps, AdamOptions{.weight_decay = 0.01f}); }},
      {"adagrad", false, [](auto ps) { return std::make_unique<Adagrad>(ps, AdagradOptions{.initial_accumulator = 0.1f, .weight_decay = 1e-4f}); }},
      {"adagrad_sparse", true, [](auto ps) { return std::make_unique<Adagrad>(ps, AdagradOptions{.initial_accumulator = 0.1f}); }},
  };
}

}  // namespace nn_optim_test
