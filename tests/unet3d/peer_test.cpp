// A few SGD (Nesterov) steps of 3D U-Net here and in PyTorch (tools/peers/unet3d_peer.py, the
// reference's modules and DiceCELoss) from the same weights and batch: the losses and the updated
// weights must agree. The peer runs in fp32 and in fp64; both fp32 runs are judged against the
// fp64 one (Note [Judging fp32 against PyTorch] in tests/resnet50/peer_test.cpp). Skipped visibly
// when /usr/bin/python3 has no torch.

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/segmentation.hpp"
#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "common/gradcheck.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::unet3d;
namespace fs = std::filesystem;

bool python_has_torch() { return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0; }

TEST(UNet3dPeer, SgdStepsMatchPyTorch) {
  if (!python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_unet3d_peer_{}", ::getpid());
  fs::create_directories(dir);
  // The mini's model on a 32^3 batch of 2 (every block kind, skip and transposed conv).
  UNet3dConfig config;
  config.filters = {8, 16, 32, 64};
  config.layout = nn::VolumeLayout::ndhwc;
  const std::int64_t n = 2, s = 32, steps = 3;
  const float lr = 0.05f;
  UNet3d model(config);
  model.initialize(42);
  nn::save_weights(model, (dir / "init.bhw").string());
  const Tensor images_ncdhw = benchhost::testing::random_tensor({n, 1, s, s, s}, 43, -2.0f, 2.0f);
  // Labels with structure (blocks of classes), so Dice and CE both carry signal.
  Tensor labels = Tensor::empty({n, s, s, s}, DType::u8);
  auto* l = labels.data<std::uint8_t>();
  for (std::int64_t i = 0; i < labels.numel(); ++i) {
    const std::int64_t w = i % s, h = (i / s) % s, d = (i / (s * s)) % s;
    l[i] = static_cast<std::uint8_t>(d > 8 && d < 24 && h > 6 && h < 26 ? (w > 10 && w < 16 ? 2 : (w > 4 ? 1 : 0)) : 0);
  }
  nn::save_tensors((dir / "batch.bhw").string(), {{"images", images_ncdhw}, {"labels", labels}});

  optim::SgdOptions so;
  so.momentum = 0.9f;
  so.nesterov = true;
  optim::Sgd sgd(model.parameters(), so);
  const Tensor images = images_ncdhw.contiguous().view({n, s, s, s, 1});  // one channel: the same bytes
  std::vector<double> ours;
  for (int k = 0; k < steps; ++k) {
    const nn::DiceCeResult loss = nn::dice_ce_loss_forward(model.forward(images), labels, config.layout);
    model.backward(nn::dice_ce_loss_backward(loss, labels, config.layout));
    sgd.step(lr);
    sgd.zero_grad();
    ours.push_back(loss.loss);
  }

  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "unet3d_peer.py";
  auto run_peer = [&](const char* dtype) {
    const fs::path out = dir / fmt::format("peer_{}.bhw", dtype), log = dir / fmt::format("peer_{}.json", dtype);
    const std::string cmd = fmt::format(
        "/usr/bin/python3 '{}' steps --dtype {} --weights '{}' --batch '{}' --out '{}' --steps {} --lr {} "
        "--filters 8,16,32,64 > '{}' 2>&1",
        script.string(), dtype, (dir / "init.bhw").string(), (dir / "batch.bhw").string(), out.string(), steps, lr,
        log.string());
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
  const auto l32 = j32["losses"].get<std::vector<double>>(), l64 = j64["losses"].get<std::vector<double>>();
  ASSERT_EQ(l32.size(), ours.size());
  ASSERT_EQ(l64.size(), ours.size());
  double loss_err_ours = 0, loss_err_t32 = 0;
  for (std::size_t k = 0; k < ours.size(); ++k) {
    std::printf("step %zu loss ours %.7f pytorch fp32 %.7f fp64 %.7f\n", k, ours[k], l32[k], l64[k]);
    loss_err_ours = std::max(loss_err_ours, std::fabs(ours[k] - l64[k]));
    loss_err_t32 = std::max(loss_err_t32, std::fabs(l32[k] - l64[k]));
  }
  EXPECT_NEAR(ours[0], l64[0], 1e-5 * std::fabs(l64[0])) << "the first loss depends on the forward only";
  EXPECT_LE(loss_err_ours, 3 * loss_err_t32 + 1e-4 * std::fabs(l64.back())) << "loss error vs fp64";
  // The loss must move (the steps are real): a frozen model would pass the comparisons above.
  EXPECT_GT(std::fabs(l64.front() - l64.back()), 1e-3);

  double d_ours = 0, d_t32 = 0, norm = 0;
  int compared = 0;
  for (nn::Parameter* p : model.parameters()) {
    auto r = w64.find(p->name);
    auto t = w32.find(p->name);
    ASSERT_TRUE(r != w64.end() && t != w32.end()) << p->name;
    const std::vector<float> m = p->value.to_float_vector();
    ASSERT_EQ(m.size(), r->second.size()) << p->name;
    for (std::size_t i = 0; i < m.size(); ++i) {
      const double ref = r->second[i];
      d_ours += (m[i] - ref) * (m[i] - ref);
      d_t32 += (t->second[i] - ref) * (t->second[i] - ref);
      norm += ref * ref;
    }
    ++compared;
  }
  const double e_ours = std::sqrt(d_ours / norm), e_t32 = std::sqrt(d_t32 / norm);
  std::printf("compared %d tensors: relative L2 distance to PyTorch fp64: ours %.3g, PyTorch fp32 %.3g\n", compared,
              e_ours, e_t32);
  EXPECT_EQ(compared, static_cast<int>(model.parameters().size()));
  EXPECT_LE(e_ours, std::max(10 * e_t32, 1e-5));
  fs::remove_all(dir);
}

}  // namespace
