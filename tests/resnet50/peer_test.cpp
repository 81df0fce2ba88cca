// A few SGD steps of ResNet-50 v1.5 here and in PyTorch (tools/peers/resnet50_peer.py, which
// uses torchvision's resnet50 when installed) from the same weights and batch: the losses and
// the updated weights and batch-norm running statistics must agree. Skipped visibly when
// /usr/bin/python3 has no torch.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "common/gradcheck.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::resnet;
namespace fs = std::filesystem;

bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
}

TEST(ResNet50Peer, SgdStepsMatchPyTorch) {
  if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_resnet_peer_{}", ::getpid());
  fs::create_directories(dir);
  // The full ResNet-50 v1.5 (1000 classes) on small images keeps the step cheap; every layer,
  // stride and shortcut is exercised.
  const std::int64_t n = 4, hw = 64, steps = 3;
  const float lr = 0.02f, momentum = 0.9f, wd = 5e-5f, smoothing = 0.1f;
  // Zero-initialised last BN gamma per block (the MLPerf option): the first step trains the BN
  // parameters and the head, the next ones every branch; and it keeps the problem well
  // conditioned (Note [Judging fp32 against PyTorch]).
  ResNetConfig config = ResNetConfig::resnet50(1000);
  config.zero_init_last_bn_gamma = true;
  ResNet model(config);
  model.initialize(42);
  nn::save_weights(model, (dir / "init.bhw").string());
  const Tensor images_nchw = benchhost::testing::random_tensor({n, 3, hw, hw}, 43, -2.0f, 2.0f);
  const Tensor labels = Tensor::from_vector_i64({3, 141, 592, 653}, {n});
  nn::save_tensors((dir / "batch.bhw").string(), {{"images", images_nchw}, {"labels", labels}});

  optim::SgdOptions so;
  so.momentum = momentum;
  so.weight_decay = wd;
  optim::Sgd sgd(model.parameters(), so);
  const Tensor images = images_nchw.permute({0, 2, 3, 1}).contiguous();  // the model is NHWC
  std::vector<double> ours;
  for (int s = 0; s < steps; ++s) {
    const Tensor logits = model.forward(images);
    const auto ce = nn::softmax_cross_entropy_forward(logits, labels, smoothing);
    model.backward(nn::softmax_cross_entropy_backward(ce, labels, smoothing));
    sgd.step(lr);
    sgd.zero_grad();
    ours.push_back(ce.loss);
  }

  // Note [Judging fp32 against PyTorch]
  // Two correct fp32 implementations differ by their rounding, and a few SGD steps of a deep
  // network can amplify that: with gamma = 1 in every block's last BN and a batch of 4, PyTorch
  // fp32 and PyTorch fp64 end 8% apart after 3 steps at lr 0.02. With the zero-initialised gamma
  // the same steps agree to ~1e-7. The peer runs in fp32 and in fp64, and both fp32 runs are
  // measured against the fp64 one. Ours lands ~4e-5 away (relative L2 over all weights and
  // running statistics after 3 steps), PyTorch fp32 ~1e-7: the two use the same oneDNN 2.6 but
  // PyTorch's NCHW batch norm is its own two-pass code while ours is oneDNN's NHWC JIT kernel,
  // whose statistics round differently. A wrong gradient anywhere moves the result by 1e-2 or
  // more, so the bound below (2e-4) still catches every real error.
  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "resnet50_peer.py";
  auto run_peer = [&](const char* dtype) {
    const fs::path out = dir / fmt::format("peer_{}.bhw", dtype), log = dir / fmt::format("peer_{}.json", dtype);
    const std::string cmd = fmt::format(
        "/usr/bin/python3 '{}' steps --dtype {} --weights '{}' --batch '{}' --out '{}' --steps {} "
        "--lr {} --momentum {} --weight-decay {} --label-smoothing {} > '{}' 2>&1",
        script.string(), dtype, (dir / "init.bhw").string(), (dir / "batch.bhw").string(),
        out.string(), steps, lr, momentum, wd, smoothing, log.string());
    const int rc = std::system(cmd.c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(rc, 0) << cmd << "\n" << text.str();
    std::map<std::string, std::vector<float>> tensors;
    if (rc != 0) return std::make_pair(nlohmann::json(), tensors);
    for (auto& t : nn::load_tensors(out.string())) tensors[t.name] = t.tensor.to_float_vector();
    return std::make_pair(nlohmann::json::parse(text.str()), tensors);
  };
  const auto [j32, w32] = run_peer("float32");
  const auto [j64, w64] = run_peer("float64");
  ASSERT_FALSE(j32.is_null());
  ASSERT_FALSE(j64.is_null());
  std::printf("peer model: %s\n", j32["model"].get<std::string>().c_str());
  const auto l32 = j32["losses"].get<std::vector<double>>(), l64 = j64["losses"].get<std::vector<double>>();
  ASSERT_EQ(l32.size(), ours.size());
  ASSERT_EQ(l64.size(), ours.size());
  double loss_err_ours = 0, loss_err_t32 = 0;
  for (std::size_t s = 0; s < ours.size(); ++s) {
    std::printf("step %zu loss ours %.6f pytorch fp32 %.6f fp64 %.6f\n", s, ours[s], l32[s], l64[s]);
    loss_err_ours = std::max(loss_err_ours, std::fabs(ours[s] - l64[s]));
    loss_err_t32 = std::max(loss_err_t32, std::fabs(l32[s] - l64[s]));
  }
  EXPECT_LE(loss_err_ours, 3 * loss_err_t32 + 2e-4 * std::fabs(l64.back())) << "loss error vs fp64";
  EXPECT_NEAR(ours[0], l64[0], 1e-4 * std::fabs(l64[0])) << "the first loss depends on the forward only";

  // Updated weights and running statistics: relative L2 distance to the fp64 result over all.
  double d_ours = 0, d_t32 = 0, norm = 0;
  int compared = 0;
  std::vector<std::pair<double, std::string>> worst;  // per-tensor relative distance, ours
  auto accumulate = [&](const std::string& name, const Tensor& mine) {
    auto r = w64.find(name);
    auto t = w32.find(name);
    ASSERT_TRUE(r != w64.end() && t != w32.end()) << name;
    const std::vector<float> m = mine.to_float_vector();
    ASSERT_EQ(m.size(), r->second.size()) << name;
    double dt = 0, nt = 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      dt += (m[i] - r->second[i]) * (m[i] - r->second[i]);
      nt += r->second[i] * static_cast<double>(r->second[i]);
      const double ref = r->second[i];
      d_ours += (m[i] - ref) * (m[i] - ref);
      d_t32 += (t->second[i] - ref) * (t->second[i] - ref);
      norm += ref * ref;
    }
    worst.emplace_back(std::sqrt(dt / std::max(nt, 1e-30)), name);
    ++compared;
  };
  for (nn::Parameter* p : model.parameters()) accumulate(p->name, p->value);
  for (auto& [name, buf] : model.buffers()) accumulate(name, *buf);
  const double e_ours = std::sqrt(d_ours / norm), e_t32 = std::sqrt(d_t32 / norm);
  std::printf("compared %d tensors: relative L2 distance to PyTorch fp64: ours %.3g, PyTorch fp32 %.3g\n",
              compared, e_ours, e_t32);
  std::sort(worst.rbegin(), worst.rend());
  for (std::size_t i = 0; i < 3 && i < worst.size(); ++i)
    std::printf("  farthest: %s %.3g\n", worst[i].second.c_str(), worst[i].first);
  EXPECT_EQ(compared, 161 + 106);
  EXPECT_LT(e_ours, 2e-4);
  fs::remove_all(dir);
}

}  // namespace
