// ResNet v1.5 forward/backward (see model.hpp, Note [ResNet-50 v1.5]).
//
// Parameter names follow torchvision's resnet50 state_dict ("layer2.0.downsample.1.weight"),
// so a weights file written here loads into the PyTorch peer unchanged, and
// mlperf_tensor_name() maps them to the names MLPerf's compliance checker expects.

#include "model.hpp"

#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"

namespace benchhost::resnet {

using nn::BatchNorm2d;
using nn::BatchNormSpec;
using nn::Conv2d;
using nn::Conv2dSpec;

ResNetConfig ResNetConfig::resnet50(std::int64_t num_classes) {
  ResNetConfig c;
  c.num_classes = num_classes;
  return c;
}

namespace {

Conv2dSpec conv_spec(const ResNetConfig& c, std::int64_t stride, std::int64_t pad) {
  Conv2dSpec s;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  s.layout = c.layout;
  return s;
}

BatchNormSpec bn_spec(const ResNetConfig& c, bool relu) {
  BatchNormSpec s;
  s.eps = c.bn_eps;
  s.momentum = c.bn_momentum;
  s.fuse_relu = relu;
  s.layout = c.layout;
  return s;
}

}  // namespace

// On the CPU in f32 these three are fused single loops; on a device or in a half type they go
// through the SDK's ops (residual add, then relu; relu's backward on its output, which is
// positive exactly where its input was).
namespace {
bool fused_cpu_f32(const Tensor& a, const Tensor& b) {
  return a.device().is_cpu() && a.dtype() == DType::f32 && b.dtype() == DType::f32;
}
}  // namespace

void add_relu_(Tensor& a, const Tensor& b) {
  BH_CHECK_AS(InvalidArgument, a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous(),
              "add_relu_: shapes {} and {} must match and be contiguous", shape_str(a.shape()),
              shape_str(b.shape()));
  if (!fused_cpu_f32(a, b)) {
    nn::add_(a, b);
    a = nn::relu(a);  // a fresh tensor: `a` (the caller's handle) now names it
    return;
  }
  float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = pa[i] + pb[i];
    pa[i] = v > 0.0f ? v : 0.0f;
  }
}

Tensor relu_mask_backward(const Tensor& dy, const Tensor& out) {
  BH_CHECK_AS(InvalidArgument, dy.shape() == out.shape(),
              "relu_mask_backward: gradient {} does not match the output {}", shape_str(dy.shape()),
              shape_str(out.shape()));
  if (!fused_cpu_f32(dy, out)) return nn::activation_backward(nn::cast(dy, out.dtype()), out, nn::Activation::relu);
  const Tensor g = dy.contiguous();
  Tensor r = Tensor::empty(dy.shape());
  const float* pg = g.data<float>();
  const float* po = out.data<float>();
  float* pr = r.data<float>();
  const std::int64_t n = r.numel();
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < n; ++i) pr[i] = po[i] > 0.0f ? pg[i] : 0.0f;
  return r;
}

// ---------------------------------------------------------------------------------------------

Bottleneck::Bottleneck(std::int64_t in_channels, std::int64_t width, std::int64_t stride,
                       const ResNetConfig& c) {
  const std::int64_t out_channels = width * c.expansion;
  conv1_ = &register_module("conv1", std::make_unique<Conv2d>(in_channels, width, 1, 1,
                                                              conv_spec(c, 1, 0)));
  bn1_ = &register_module("bn1", std::make_unique<BatchNorm2d>(width, bn_spec(c, true)));
  conv2_ = &register_module("conv2", std::make_unique<Conv2d>(width, width, 3, 3,
                                                              conv_spec(c, stride, 1)));
  bn2_ = &register_module("bn2", std::make_unique<BatchNorm2d>(width, bn_spec(c, true)));
  conv3_ = &register_module("conv3", std::make_unique<Conv2d>(width, out_channels, 1, 1,
                                                              conv_spec(c, 1, 0)));
  bn3_ = &register_module("bn3", std::make_unique<BatchNorm2d>(out_channels, bn_spec(c, false)));
  if (stride != 1 || in_channels != out_channels) {
    auto& ds = register_module("downsample", std::make_unique<nn::Module>());
    proj_conv_ = &ds.register_module(
        "0", std::make_unique<Conv2d>(in_channels, out_channels, 1, 1, conv_spec(c, stride, 0)));
    proj_bn_ = &ds.register_module("1",
                                   std::make_unique<BatchNorm2d>(out_channels, bn_spec(c, false)));
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor h = bn1_->forward(conv1_->forward(x));
  h = bn2_->forward(conv2_->forward(h));
  Tensor out = bn3_->forward(conv3_->forward(h));
  const Tensor shortcut = proj_conv_ ? proj_bn_->forward(proj_conv_->forward(x)) : x;
  add_relu_(out, shortcut);  // out is a fresh tensor from bn3
  if (is_training()) out_ = out;
  return out;
}

Tensor Bottleneck::backward(const Tensor& dy) {
  BH_CHECK_AS(InvalidArgument, out_.defined(), "Bottleneck '{}': backward() before forward()",
              name());
  const Tensor d = relu_mask_backward(dy, out_);
  out_ = Tensor();
  Tensor dx = conv1_->backward(bn1_->backward(
      conv2_->backward(bn2_->backward(conv3_->backward(bn3_->backward(d))))));
  const Tensor dshort = proj_conv_ ? proj_conv_->backward(proj_bn_->backward(d)) : d;
  if (!fused_cpu_f32(dx, dshort)) {
    nn::add_(dx, dshort);
  } else {  // the shortcut's gradient joins the main branch's
    float* a = dx.data<float>();
    const float* b = dshort.data<float>();
    const std::int64_t n = dx.numel();
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
  return dx;
}

// ---------------------------------------------------------------------------------------------

ResNet::ResNet(const ResNetConfig& c) : config_(c) {
  BH_CHECK_AS(InvalidArgument, !c.blocks.empty() && c.base_width > 0 && c.expansion > 0 &&
                                   c.num_classes > 0 && c.in_channels > 0,
              "ResNet: blocks must be non-empty and widths/classes positive");
  for (std::int64_t b : c.blocks)
    BH_CHECK_AS(InvalidArgument, b > 0, "ResNet: every stage needs at least one block");
  if (c.small_stem) {
    stem_conv_ = &register_module(
        "conv1", std::make_unique<Conv2d>(c.in_channels, c.base_width, 3, 3, conv_spec(c, 1, 1)));
  } else {
    stem_conv_ = &register_module(
        "conv1", std::make_unique<Conv2d>(c.in_channels, c.base_width, 7, 7, conv_spec(c, 2, 3)));
  }
  stem_conv_->set_input_grad(false);
  stem_bn_ = &register_module("bn1", std::make_unique<BatchNorm2d>(c.base_width, bn_spec(c, true)));
  if (!c.small_stem) {
    nn::Pool2dSpec p;
    p.kernel_h = p.kernel_w = 3;
    p.stride_h = p.stride_w = 2;
    p.pad_h = p.pad_w = 1;
    p.layout = c.layout;
    stem_pool_ = &register_module("maxpool", std::make_unique<nn::MaxPool2d>(p));
  }
  std::int64_t in = c.base_width;
  for (std::size_t s = 0; s < c.blocks.size(); ++s) {
    auto& stage = register_module(fmt::format("layer{}", s + 1), std::make_unique<nn::Module>());
    const std::int64_t width = c.base_width << s;
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      blocks_.push_back(&stage.register_module(
          std::to_string(b), std::make_unique<Bottleneck>(in, width, stride, c)));
      in = width * c.expansion;
    }
  }
  pool_ = &register_module("avgpool", std::make_unique<nn::GlobalAvgPool>(c.layout));
  fc_ = &register_module("fc", std::make_unique<nn::Linear>(in, c.num_classes, true));
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = stem_bn_->forward(stem_conv_->forward(x));
  if (stem_pool_) h = stem_pool_->forward(h);
  for (Bottleneck* b : blocks_) h = b->forward(h);
  return fc_->forward(pool_->forward(h));
}

Tensor ResNet::backward(const Tensor& dlogits) {
  Tensor d = pool_->backward(fc_->backward(dlogits));
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) d = (*it)->backward(d);
  if (stem_pool_) d = stem_pool_->backward(d);
  stem_conv_->backward(stem_bn_->backward(d));
  return Tensor();
}

void ResNet::initialize(std::uint64_t seed) {
  for (nn::Parameter* p : parameters()) {
    Rng rng = nn::init::rng_for(seed, p->name);
    const bool is_bn = p->name.find(".bn") != std::string::npos ||
                       p->name.rfind("bn1.", 0) == 0 ||
                       p->name.find("downsample.1.") != std::string::npos;
    if (p->name.rfind("fc.", 0) == 0) {
      const float bound = 1.0f / std::sqrt(static_cast<float>(fc_->in_features()));
      nn::init::uniform_(p->value, rng, -bound, bound);
    } else if (is_bn) {
      const bool gamma = p->name.size() >= 7 && p->name.compare(p->name.size() - 7, 7, ".weight") == 0;
      nn::init::constant_(p->value, gamma ? 1.0f : 0.0f);
    } else {
      nn::init::kaiming_normal_(p->value, rng, nn::init::FanMode::fan_out,
                                nn::init::Nonlinearity::relu);
    }
  }
  if (config_.zero_init_last_bn_gamma)
    for (Bottleneck* b : blocks_) nn::init::zeros_(b->last_bn().gamma().value);
  for (auto& [name, buffer] : buffers()) {
    const bool var = name.size() >= 11 && name.compare(name.size() - 11, 11, "running_var") == 0;
    nn::init::constant_(*buffer, var ? 1.0f : 0.0f);
  }
}

double ResNet::forward_macs_per_image(std::int64_t h, std::int64_t w) const {
  const ResNetConfig& c = config_;
  auto out_size = [](std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p) {
    return (in + 2 * p - k) / s + 1;
  };
  double macs = 0;
  if (c.small_stem) {
    macs += static_cast<double>(h * w) * c.in_channels * c.base_width * 9;
  } else {
    h = out_size(h, 7, 2, 3);
    w = out_size(w, 7, 2, 3);
    macs += static_cast<double>(h * w) * c.in_channels * c.base_width * 49;
    h = out_size(h, 3, 2, 1);
    w = out_size(w, 3, 2, 1);
  }
  std::int64_t in = c.base_width;
  for (std::size_t s = 0; s < c.blocks.size(); ++s) {
    const std::int64_t width = c.base_width << s, out = width * c.expansion;
    for (std::int64_t b = 0; b < c.blocks[s]; ++b) {
      const std::int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      const std::int64_t oh = out_size(h, 3, stride, 1), ow = out_size(w, 3, stride, 1);
      macs += static_cast<double>(h * w) * in * width;         // conv1 1x1 at the input size
      macs += static_cast<double>(oh * ow) * width * width * 9;  // conv2 3x3, strided
      macs += static_cast<double>(oh * ow) * width * out;       // conv3 1x1
      if (stride != 1 || in != out) macs += static_cast<double>(oh * ow) * in * out;
      h = oh;
      w = ow;
      in = out;
    }
  }
  macs += static_cast<double>(in) * c.num_classes;
  return macs;
}

std::string ResNet::mlperf_tensor_name(const std::string& n) {
  static const std::regex block(R"(layer(\d+)\.(\d+)\.(conv|bn)(\d)\.(weight|bias))");
  static const std::regex proj(R"(layer(\d+)\.(\d+)\.downsample\.(0|1)\.(weight|bias))");
  std::smatch m;
  auto bn_suffix = [](const std::string& s) { return s == "weight" ? "gamma" : "beta"; };
  if (n == "conv1.weight") return "conv0_weight";
  if (n == "bn1.weight" || n == "bn1.bias") return fmt::format("bn0_{}", bn_suffix(n.substr(4)));
  if (n == "fc.weight") return "fc1_weight";
  if (n == "fc.bias") return "fc1_bias";
  if (std::regex_match(n, m, block)) {
    const int unit = std::stoi(m[2]) + 1;
    if (m[3] == "conv") return fmt::format("stage{}_unit{}_conv{}_weight", m[1].str(), unit, m[4].str());
    return fmt::format("stage{}_unit{}_bn{}_{}", m[1].str(), unit, m[4].str(), bn_suffix(m[5]));
  }
  if (std::regex_match(n, m, proj)) {
    const int unit = std::stoi(m[2]) + 1;
    if (m[3] == "0") return fmt::format("stage{}_unit{}_conv1sc_weight", m[1].str(), unit);
    return fmt::format("stage{}_unit{}_bnsc_{}", m[1].str(), unit, bn_suffix(m[4]));
  }
  return "";
}

std::vector<std::string> mlperf_tensor_names(const std::vector<std::int64_t>& blocks) {
  std::vector<std::string> names{"conv0_weight", "bn0_gamma", "bn0_beta"};
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    for (std::int64_t u = 1; u <= blocks[s]; ++u) {
      const std::string unit = fmt::format("stage{}_unit{}_", s + 1, u);
      for (int i = 1; i <= 3; ++i)
        names.insert(names.end(), {fmt::format("{}conv{}_weight", unit, i), fmt::format("{}bn{}_gamma", unit, i),
                                   fmt::format("{}bn{}_beta", unit, i)});
      // The first unit of every stage changes the width (expansion 4) and, past stage 1, strides:
      // it has the projection shortcut (Bottleneck: stride != 1 or in_channels != out_channels).
      if (u == 1)
        for (const char* n : {"conv1sc_weight", "bnsc_gamma", "bnsc_beta"}) names.push_back(unit + n);
    }
  }
  names.insert(names.end(), {"fc1_weight", "fc1_bias"});
  return names;
}

}  // namespace benchhost::resnet
