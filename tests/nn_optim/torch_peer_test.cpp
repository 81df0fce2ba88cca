// Cross-check against PyTorch's optimizers (Debian's python3-torch): same start, same gradient
// sequence, five steps, through the weight-file format both ways. LARS and LAMB have no torch
// implementation; they are covered by the hand-computed tests.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"

using namespace benchhost;
namespace fs = std::filesystem;

TEST(TorchPeer, OptimizersMatchTorchOverFiveSteps) {
  const char* py = "/usr/bin/python3";
  if (!fs::exists(py)) GTEST_SKIP() << py << " is missing";
  if (std::system("/usr/bin/python3 -c 'import numpy, torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3-torch (or numpy) is missing for /usr/bin/python3";
  const fs::path dir = fs::temp_directory_path() / ("nn_optim_torch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::int64_t n = 1000;
  const int steps = 5;
  Rng rng(42);
  std::vector<nn::NamedTensor> in;
  std::vector<float> w0(n);
  for (auto& x : w0) x = rng.normal();
  in.push_back({"w0", Tensor::from_vector(w0, {n})});
  std::vector<std::vector<float>> grads(steps, std::vector<float>(n));
  for (int s = 0; s < steps; ++s) {
    for (auto& x : grads[s]) x = rng.normal() * 0.1f;
    in.push_back({"g" + std::to_string(s), Tensor::from_vector(grads[s], {n})});
  }
  nn::save_tensors((dir / "in.bhw").string(), in);
  {
    std::ofstream f(dir / "peer.py");
    f << "import sys\n"
      << "sys.path.insert(0, '" << BENCHHOST_SOURCE_DIR << "/tools/peers')\n"
      << "import torch, weights\n"
      << "d = weights.to_torch(weights.load(sys.argv[1]))\n"
      << "configs = {\n"
      << "  'sgd': lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),\n"
      << "  'nesterov': lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),\n"
      << "  'adam': lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),\n"
      << "  'adamw': lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),\n"
      << "  'adagrad': lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1),\n"
      << "}\n"
      << "out = {}\n"
      << "for name, make in configs.items():\n"
      << "    w = torch.nn.Parameter(d['w0'].clone())\n"
      << "    opt = make([w])\n"
      << "    for s in range(" << steps << "):\n"
      << "        w.grad = d['g%d' % s].clone()\n"
      << "        opt.step()\n"
      << "    out[name] = w.detach().numpy().copy()\n"
      << "weights.save(sys.argv[2], out)\n";
  }
  const std::string cmd = std::string(py) + " " + (dir / "peer.py").string() + " " +
                          (dir / "in.bhw").string() + " " + (dir / "out.bhw").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, std::vector<float>> torch_result;
  for (auto& t : nn::load_tensors((dir / "out.bhw").string()))
    torch_result[t.name] = t.tensor.to_float_vector();

  auto steps_with = [&](optim::Optimizer& opt, nn::Parameter& p, float lr) {
    for (int s = 0; s < steps; ++s) {
      p.grad.copy_(Tensor::from_vector(grads[s], {n}));
      opt.step(lr);
    }
    return p.value.to_float_vector();
  };
  auto fresh = [&] {
    auto p = std::make_unique<nn::Parameter>();
    p->name = "w";
    p->value = Tensor::from_vector(w0, {n});
    p->grad = Tensor::zeros({n});
    return p;
  };
  std::map<std::string, std::vector<float>> ours;
  {
    auto p = fresh();
    optim::Sgd o({p.get()}, {.momentum = 0.9f, .weight_decay = 0.01f});
    ours["sgd"] = steps_with(o, *p, 0.1f);
  }
  {
    auto p = fresh();
    optim::Sgd o({p.get()}, {.momentum = 0.9f, .nesterov = true});
    ours["nesterov"] = steps_with(o, *p, 0.1f);
  }
  {
    auto p = fresh();
    optim::Adam o({p.get()}, {.weight_decay = 0.1f});
    ours["adam"] = steps_with(o, *p, 0.01f);
  }
  {
    auto p = fresh();
    optim::AdamW o({p.get()}, {.weight_decay = 0.1f});
    ours["adamw"] = steps_with(o, *p, 0.01f);
  }
  {
    auto p = fresh();
    optim::Adagrad o({p.get()}, {.initial_accumulator = 0.1f, .lr_decay = 0.01f});
    ours["adagrad"] = steps_with(o, *p, 0.1f);
  }
  for (auto& [name, mine] : ours) {
    ASSERT_TRUE(torch_result.count(name)) << name;
    const auto& ref = torch_result[name];
    ASSERT_EQ(ref.size(), mine.size());
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::abs(ref[i] - mine[i])));
    std::printf("[ torch    ] %-8s max |benchhost - torch| = %.3g\n", name.c_str(), worst);
    EXPECT_LT(worst, 2e-6) << name << ": max |benchhost - torch| over " << n << " weights";
    EXPECT_NE(ref, w0) << name << ": torch did not move the weights";
  }
  fs::remove_all(dir);
}
