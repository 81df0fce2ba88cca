// A few SGD steps of ResNet-50 v1.5 here and in PyTorch (tools/peers/resnet50_peer.py, which
// uses torchvision's resnet50 when installed) from the same weights and batch: the losses and
// the updated weights and batch-norm running statistics must agree. Skipped visibly when
// /usr/bin/python3 has no torch.

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
#include "resnet.hpp"

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
  const float lr = 0.1f, momentum = 0.9f, wd = 5e-5f, smoothing = 0.1f;
  ResNet model(ResNetConfig::resnet50(1000));
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

  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "resnet50_peer.py";
  const std::string cmd = fmt::format(
      "/usr/bin/python3 '{}' steps --weights '{}' --batch '{}' --out '{}' --steps {} --lr {} "
      "--momentum {} --weight-decay {} --label-smoothing {} > '{}' 2>&1",
      script.string(), (dir / "init.bhw").string(), (dir / "batch.bhw").string(),
      (dir / "peer.bhw").string(), steps, lr, momentum, wd, smoothing, (dir / "peer.json").string());
  const int rc = std::system(cmd.c_str());
  std::ifstream out(dir / "peer.json");
  std::stringstream text;
  text << out.rdbuf();
  ASSERT_EQ(rc, 0) << cmd << "\n" << text.str();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  std::printf("peer model: %s\n", j["model"].get<std::string>().c_str());
  const auto theirs = j["losses"].get<std::vector<double>>();
  ASSERT_EQ(theirs.size(), ours.size());
  for (std::size_t s = 0; s < ours.size(); ++s) {
    std::printf("step %zu loss ours %.6f pytorch %.6f\n", s, ours[s], theirs[s]);
    EXPECT_NEAR(ours[s], theirs[s], 2e-3 * std::max(1.0, std::fabs(theirs[s]))) << "step " << s;
  }
  // Updated weights and running statistics.
  std::map<std::string, Tensor> peer;
  for (auto& t : nn::load_tensors((dir / "peer.bhw").string())) peer[t.name] = t.tensor;
  int compared = 0;
  double worst = 0;
  std::string worst_name;
  auto compare = [&](const std::string& name, const Tensor& mine) {
    auto it = peer.find(name);
    ASSERT_NE(it, peer.end()) << name;
    const double scale = std::max(1e-3, benchhost::testing::max_abs_diff(it->second, Tensor::zeros(it->second.shape())));
    const double rel = benchhost::testing::max_abs_diff(mine, it->second) / scale;
    if (rel > worst) {
      worst = rel;
      worst_name = name;
    }
    ++compared;
  };
  for (nn::Parameter* p : model.parameters()) compare(p->name, p->value);
  for (auto& [name, buf] : model.buffers()) compare(name, *buf);
  std::printf("compared %d tensors, worst relative difference %.3g (%s)\n", compared, worst,
              worst_name.c_str());
  EXPECT_EQ(compared, 161 + 106);
  EXPECT_LT(worst, 2e-3) << worst_name;
  fs::remove_all(dir);
}

}  // namespace
