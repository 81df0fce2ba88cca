// The RNN-T train step against the PyTorch peer (tools/peers/rnnt_peer.py model_step: the
// reference's architecture with torch.nn.LSTM and torchaudio's rnnt_loss): same weights, same
// batch, the loss and every parameter's gradient match. Skipped visibly without torch/torchaudio.

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "benchhost/random.hpp"
#include "small_rnnt.hpp"
#include "workload.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::rnnt;
namespace fs = std::filesystem;

bool have_torchaudio() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch, torchaudio' > /dev/null 2>&1") == 0;
  return ok;
}

struct PeerDir {
  fs::path dir = fs::temp_directory_path() / fmt::format("bh_rnnt_model_{}", ::getpid());
  std::vector<std::string> shapes;
  PeerDir() { fs::create_directories(dir); }
  ~PeerDir() { fs::remove_all(dir); }
  void put(const std::string& name, const Tensor& t) {
    const Tensor c = t.contiguous();
    std::ofstream f(dir / (name + ".bin"), std::ios::binary);
    f.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
    shapes.push_back(fmt::format("\"{}\": [{}]", name, fmt::join(c.shape(), ", ")));
  }
  std::vector<float> floats(const std::string& name) const {
    std::ifstream f(dir / (name + ".bin"), std::ios::binary | std::ios::ate);
    std::vector<float> v(static_cast<std::size_t>(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return v;
  }
};

// Small sizes through the workload's own loss path (synthetic data, dropout off).
RunContext peer_context() { return test::small_context(); }

TEST(RnntPeer, TrainStepLossAndGradientsMatchTorch) {
  if (!have_torchaudio()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchaudio: the PyTorch cross-check did not run";
  RnntWorkload w;
  w.setup(peer_context());
  Rnnt& model = w.model();
  const RnntConfig& c = model.config();
  // A batch of three utterances of 9, 6 and 4 frames (5, 3, 2 after StackTime) and 4, 1, 2 labels.
  const std::int64_t t = 9, b = 3, u = 4;
  Rng rng(17, 0);
  Tensor x = Tensor::empty({t, b, c.in_features});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2.0f * rng.uniform() - 1.0f;
  ModelBatch batch;
  batch.features = x;
  batch.labels = Tensor::from_vector_i32({1, 7, 3, 10, 2, 0, 0, 0, 9, 9, 0, 0}, {b, u});
  batch.feature_lengths = {9, 6, 4};
  batch.frame_lengths = Tensor::from_vector_i32({5, 3, 2}, {b});
  batch.label_lengths = Tensor::from_vector_i32({4, 1, 2}, {b});
  model.zero_grad();
  const double loss = w.loss_and_gradients(batch);

  PeerDir d;
  for (nn::Parameter* p : model.parameters()) d.put("param." + p->name, p->value);
  d.put("features", x);
  d.put("labels", batch.labels);
  d.put("feature_lengths", Tensor::from_vector_i32({9, 6, 4}, {b}));
  d.put("label_lengths", batch.label_lengths);
  std::ofstream(d.dir / "meta.json") << fmt::format(
      "{{\"config\": {{\"in_features\": {}, \"enc_n_hid\": {}, \"enc_pre_rnn_layers\": {}, \"enc_post_rnn_layers\": {}, "
      "\"enc_stack_time_factor\": {}, \"pred_n_hid\": {}, \"pred_rnn_layers\": {}, \"joint_n_hid\": {}, \"n_classes\": {}}}, "
      "\"shapes\": {{{}}}}}",
      c.in_features, c.enc_n_hid, c.enc_pre_rnn_layers, c.enc_post_rnn_layers, c.enc_stack_time_factor, c.pred_n_hid,
      c.pred_rnn_layers, c.joint_n_hid, c.n_classes, fmt::join(d.shapes, ", "));
  const fs::path peer = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "rnnt_peer.py";
  const std::string cmd = fmt::format("/usr/bin/python3 '{}' model_step '{}' 2>&1", peer.string(), d.dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const double peer_loss = d.floats("loss").at(0);
  EXPECT_NEAR(loss, peer_loss, 1e-5 * std::fabs(peer_loss)) << "ours " << loss << ", torch " << peer_loss;
  double worst = 0;
  for (nn::Parameter* p : model.parameters()) {
    const std::vector<float> ours = p->grad.to_float_vector(), theirs = d.floats("grad." + p->name);
    ASSERT_EQ(ours.size(), theirs.size()) << p->name;
    double err = 0, scale = 0;
    for (std::size_t i = 0; i < ours.size(); ++i) {
      err = std::max(err, std::fabs(static_cast<double>(ours[i]) - theirs[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(theirs[i])));
    }
    const double rel = err / std::max(scale, 1e-12);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 1e-5) << p->name << ": max |ours - torch| " << err << " of max |torch| " << scale;
  }
  std::printf("loss ours %.7f torch %.7f; worst gradient error relative to the tensor's max: %.2e\n", loss, peer_loss, worst);
}

}  // namespace
