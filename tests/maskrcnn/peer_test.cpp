// The Mask R-CNN model against the PyTorch peer (tools/peers/maskrcnn_peer.py, mode "model": the
// same architecture written in torch as maskrcnn_benchmark builds it, torchvision's roi_align):
// with the same weights, images and RoIs, every output (RPN on P2..P6, box head, mask head) and
// every trainable parameter's gradient for the same output gradients agree.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "benchhost/nn/serialize.hpp"
#include "benchhost/random.hpp"
#include "model.hpp"

namespace {

using namespace benchhost;
using namespace benchhost::maskrcnn;
namespace fs = std::filesystem;

bool python_has_torchvision() {
  return std::system("/usr/bin/python3 -c 'import torch, torchvision' > /dev/null 2>&1") == 0;
}

Tensor random(const Shape& s, Rng& rng, float lo, float hi) {
  Tensor t = Tensor::empty(s);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(lo, hi);
  return t;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double d = static_cast<double>(x.data<float>()[i]) - y.data<float>()[i];
    num += d * d;
    den += static_cast<double>(y.data<float>()[i]) * y.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(MaskRcnnPeer, OutputsAndGradientsMatchTorch) {
  if (!python_has_torchvision()) GTEST_SKIP() << "/usr/bin/python3 has no torch/torchvision: peer comparison skipped";
  MaskRcnnConfig c;
  c.blocks = {1, 2, 1, 1};
  c.stem_channels = 8;
  c.fpn_channels = 16;
  c.num_classes = 4;
  c.representation_size = 32;
  c.mask_convs = 2;
  c.mask_channels = 8;
  c.freeze_at = 2;
  MaskRcnn m(c);
  m.initialize(21);
  Rng rng(5, 1);
  // Non-trivial frozen batch norms (pretrained statistics) and biases.
  for (auto& [name, t] : m.buffers()) {
    const bool var = name.find("running_var") != std::string::npos, w = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    t->copy_(random(t->shape(), rng, var || w ? 0.5f : -0.2f, var || w ? 1.5f : 0.2f));
  }
  for (nn::Parameter* p : m.parameters())
    if (p->name.size() > 5 && p->name.compare(p->name.size() - 5, 5, ".bias") == 0) p->value.copy_(random(p->value.shape(), rng, -0.1f, 0.1f));

  const Tensor images = random({2, 3, 96, 128}, rng, -2.0f, 2.0f);
  const Tensor box_rois = Tensor::from_vector({0, 3, 4, 40, 30, 1, 10, 12, 90, 63, 0, 20, 1, 29, 50, 1, 0, 0, 127, 95,
                                               0, 50.5f, 20.25f, 120, 90, 1, 7, 7, 15, 12},
                                              {6, 5});
  const Tensor mask_rois = Tensor::from_vector({1, 5, 6, 33, 41, 0, 12, 2, 126, 94, 0, 60, 30, 70, 45}, {3, 5});
  m.train(true);
  const RpnOutputs out = m.forward(images);
  const BoxHeadOutputs bo = m.box_head(box_rois);
  const Tensor ml = m.mask_head(mask_rois);
  std::vector<nn::NamedTensor> inputs{{"images", images}, {"box_rois", box_rois}, {"mask_rois", mask_rois}};
  std::vector<Tensor> gobj, gdel;
  for (std::size_t l = 0; l < out.objectness.size(); ++l) {
    gobj.push_back(random(out.objectness[l].shape(), rng, -1.0f, 1.0f));
    gdel.push_back(random(out.deltas[l].shape(), rng, -1.0f, 1.0f));
    inputs.push_back({fmt::format("g.obj.{}", l), gobj.back()});
    inputs.push_back({fmt::format("g.del.{}", l), gdel.back()});
  }
  const Tensor gcls = random(bo.class_logits.shape(), rng, -1, 1), gbox = random(bo.box_regression.shape(), rng, -1, 1),
               gmask = random(ml.shape(), rng, -1, 1);
  inputs.push_back({"g.cls", gcls});
  inputs.push_back({"g.box", gbox});
  inputs.push_back({"g.mask", gmask});

  const fs::path dir = fs::temp_directory_path() / ("benchhost_maskrcnn_peer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nn::save_weights(m, (dir / "weights.bhw").string());
  nn::save_tensors((dir / "inputs.bhw").string(), inputs);
  {
    nlohmann::json meta = {{"config",
                            {{"blocks", c.blocks}, {"stem_channels", c.stem_channels}, {"fpn_channels", c.fpn_channels},
                             {"num_classes", c.num_classes}, {"num_anchors", c.num_anchors},
                             {"representation_size", c.representation_size}, {"mask_convs", c.mask_convs},
                             {"mask_channels", c.mask_channels}, {"box_resolution", c.box_resolution},
                             {"mask_resolution", c.mask_resolution}, {"freeze_at", c.freeze_at}}}};
    std::ofstream(dir / "meta.json") << meta.dump();
  }
  m.zero_grad();
  m.backward(gobj, gdel, gcls, gbox, gmask);
  const fs::path script = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "maskrcnn_peer.py";
  const std::string cmd = fmt::format("/usr/bin/python3 '{}' model '{}'", script.string(), dir.string());
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, Tensor> peer;
  for (const nn::NamedTensor& t : nn::load_tensors((dir / "out.bhw").string())) peer[t.name] = t.tensor;

  // f32 sums in other orders: relative L2 within 1e-4 for outputs and 1e-3 for gradients.
  for (std::size_t l = 0; l < out.objectness.size(); ++l) {
    EXPECT_LT(rel_l2(out.objectness[l], peer.at(fmt::format("obj.{}", l))), 1e-4) << "objectness level " << l;
    EXPECT_LT(rel_l2(out.deltas[l], peer.at(fmt::format("del.{}", l))), 1e-4) << "deltas level " << l;
  }
  EXPECT_LT(rel_l2(bo.class_logits, peer.at("cls")), 1e-4);
  EXPECT_LT(rel_l2(bo.box_regression, peer.at("box")), 1e-4);
  EXPECT_LT(rel_l2(ml, peer.at("mask")), 1e-4);
  std::size_t compared = 0;
  for (nn::Parameter* p : m.trainable_parameters()) {
    const auto it = peer.find("grad." + p->name);
    ASSERT_NE(it, peer.end()) << p->name << " has no gradient in torch";
    EXPECT_LT(rel_l2(p->grad, it->second), 1e-3) << p->name;
    ++compared;
  }
  std::size_t torch_grads = 0;
  for (const auto& [name, t] : peer) torch_grads += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(compared, torch_grads);  // the same parameters are frozen on both sides
  fs::remove_all(dir);
}

}  // namespace
