#pragma once
// Helpers shared by the nn_optim tests.
#include <memory>
#include <string>
#include <vector>

#include "benchhost/nn/module.hpp"
#include "benchhost/tensor.hpp"

namespace nn_optim_test {

/// A free-standing parameter with a value and a zero gradient.
inline std::unique_ptr<benchhost::nn::Parameter> make_param(const std::string& name,
                                                            std::vector<float> values,
                                                            benchhost::Shape shape,
                                                            bool weight_decay = true) {
  auto p = std::make_unique<benchhost::nn::Parameter>();
  p->name = name;
  p->value = benchhost::Tensor::from_vector(values, shape);
  p->grad = benchhost::Tensor::zeros(shape);
  p->weight_decay = weight_decay;
  return p;
}

inline void set_grad(benchhost::nn::Parameter& p, std::vector<float> g) {
  p.grad = benchhost::Tensor::from_vector(g, p.value.shape());
}

inline std::vector<float> values(const benchhost::nn::Parameter& p) {
  return p.value.to_float_vector();
}

}  // namespace nn_optim_test
