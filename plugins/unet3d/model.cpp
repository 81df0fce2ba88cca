// 3D U-Net forward/backward (see model.hpp, Note [3D U-Net]).

#include "model.hpp"

#include <cmath>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"

namespace benchhost::unet3d {

namespace {

nn::Conv3dSpec conv_spec(const UNet3dConfig& c, std::int64_t stride, std::int64_t pad) {
  nn::Conv3dSpec s;
  s.stride_d = s.stride_h = s.stride_w = stride;
  s.pad_d = s.pad_h = s.pad_w = pad;
  s.layout = c.layout;
  return s;
}

std::int64_t channel_dim(nn::VolumeLayout layout) { return layout == nn::VolumeLayout::ncdhw ? 1 : 4; }

void check_filters(const UNet3dConfig& c) {
  BH_CHECK_AS(InvalidArgument, c.filters.size() >= 2, "unet3d: the filter list needs at least 2 entries, got {}",
              c.filters.size());
  for (std::int64_t f : c.filters)
    BH_CHECK_AS(InvalidArgument, f >= 1, "unet3d: filter counts must be positive, got {}", f);
  BH_CHECK_AS(InvalidArgument, c.in_channels >= 1 && c.num_classes >= 2,
              "unet3d: {} input channels and {} classes (need >= 1 and >= 2)", c.in_channels, c.num_classes);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

ConvBlock::ConvBlock(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride,
                     const UNet3dConfig& c) {
  // The reference's nn.Sequential(conv, norm, activation): children "0" and "1".
  conv_ = &register_module("0", std::make_unique<nn::Conv3d>(in_channels, out_channels, 3, conv_spec(c, stride, 1),
                                                             /*bias=*/false));
  nn::InstanceNormSpec ns;
  ns.eps = c.norm_eps;
  ns.fuse_relu = true;
  ns.layout = c.layout;
  norm_ = &register_module("1", std::make_unique<nn::InstanceNorm3d>(out_channels, ns));
}

Tensor ConvBlock::forward(const Tensor& x) { return norm_->forward(conv_->forward(x)); }
Tensor ConvBlock::backward(const Tensor& dy) { return conv_->backward(norm_->backward(dy)); }

DoubleConv::DoubleConv(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride,
                       const UNet3dConfig& c) {
  conv1_ = &register_module("conv1", std::make_unique<ConvBlock>(in_channels, out_channels, stride, c));
  conv2_ = &register_module("conv2", std::make_unique<ConvBlock>(out_channels, out_channels, 1, c));
}

Tensor DoubleConv::forward(const Tensor& x) { return conv2_->forward(conv1_->forward(x)); }
Tensor DoubleConv::backward(const Tensor& dy) { return conv1_->backward(conv2_->backward(dy)); }

UpsampleBlock::UpsampleBlock(std::int64_t in_channels, std::int64_t out_channels, const UNet3dConfig& c)
    : out_channels_(out_channels), layout_(c.layout) {
  auto& seq = register_module("upsample_conv", std::make_unique<nn::Module>());
  up_ = &seq.register_module("0", std::make_unique<nn::ConvTranspose3d>(in_channels, out_channels, 2,
                                                                         conv_spec(c, 2, 0), /*bias=*/true));
  conv1_ = &register_module("conv1", std::make_unique<ConvBlock>(2 * out_channels, out_channels, 1, c));
  conv2_ = &register_module("conv2", std::make_unique<ConvBlock>(out_channels, out_channels, 1, c));
}

Tensor UpsampleBlock::forward(const Tensor& x, const Tensor& skip) {
  Tensor up = up_->forward(x);
  if (skip.dtype() != up.dtype()) up = nn::cast(up, skip.dtype());
  const Tensor joined = nn::concat({up, skip}, channel_dim(layout_));  // torch.cat((x, skip), dim=1)
  return conv2_->forward(conv1_->forward(joined));
}

std::pair<Tensor, Tensor> UpsampleBlock::backward(const Tensor& dy) {
  const Tensor djoined = conv1_->backward(conv2_->backward(dy));
  std::vector<Tensor> parts = nn::split(djoined, {out_channels_, out_channels_}, channel_dim(layout_));
  return {up_->backward(parts[0]), std::move(parts[1])};
}

// ---------------------------------------------------------------------------------------------

UNet3d::UNet3d(const UNet3dConfig& config) : config_(config) {
  check_filters(config_);
  const auto& f = config_.filters;
  input_block_ = &register_module("input_block", std::make_unique<DoubleConv>(config_.in_channels, f[0], 1, config_));
  input_block_->first().conv().set_input_grad(false);  // nothing upstream of the images
  auto& down = register_module("downsample", std::make_unique<nn::Module>());
  for (std::size_t i = 0; i + 1 < f.size(); ++i)
    downsample_.push_back(&down.register_module(std::to_string(i), std::make_unique<DoubleConv>(f[i], f[i + 1], 2, config_)));
  bottleneck_ = &register_module("bottleneck", std::make_unique<DoubleConv>(f.back(), f.back(), 2, config_));
  auto& up = register_module("upsample", std::make_unique<nn::Module>());
  upsample_.push_back(&up.register_module("0", std::make_unique<UpsampleBlock>(f.back(), f.back(), config_)));
  for (std::size_t i = f.size() - 1; i >= 1; --i)
    upsample_.push_back(&up.register_module(std::to_string(upsample_.size()),
                                            std::make_unique<UpsampleBlock>(f[i], f[i - 1], config_)));
  auto& out = register_module("output", std::make_unique<nn::Module>());
  auto& conv = out.register_module("conv", std::make_unique<nn::Module>());
  output_ = &conv.register_module("0", std::make_unique<nn::Conv3d>(f[0], config_.num_classes, 1,
                                                                    conv_spec(config_, 1, 0), /*bias=*/true));
}

std::int64_t UNet3d::side_multiple() const { return std::int64_t{1} << config_.filters.size(); }

Tensor UNet3d::forward(const Tensor& x) {
  const nn::VolumeDims d = nn::volume_dims(x.shape(), config_.layout, "unet3d input");
  const std::int64_t m = side_multiple();
  BH_CHECK_AS(InvalidArgument, d.c == config_.in_channels, "unet3d: input has {} channels, the model takes {}", d.c,
              config_.in_channels);
  BH_CHECK_AS(InvalidArgument, d.d % m == 0 && d.h % m == 0 && d.w % m == 0 && d.d >= 2 * m && d.h >= 2 * m && d.w >= 2 * m,
              "unet3d: input volume {}x{}x{}: with {} filter levels every side must be a multiple of {} and at least {}",
              d.d, d.h, d.w, config_.filters.size(), m, 2 * m);
  std::vector<Tensor> skips;
  Tensor h = input_block_->forward(x);
  skips.push_back(h);
  for (DoubleConv* block : downsample_) {
    h = block->forward(h);
    skips.push_back(h);
  }
  h = bottleneck_->forward(h);
  for (std::size_t j = 0; j < upsample_.size(); ++j) h = upsample_[j]->forward(h, skips[skips.size() - 1 - j]);
  return output_->forward(h);
}

Tensor UNet3d::backward(const Tensor& dlogits) {
  Tensor g = output_->backward(dlogits);
  std::vector<Tensor> skip_grads(upsample_.size());
  for (std::size_t j = upsample_.size(); j-- > 0;) {
    auto [dx, dskip] = upsample_[j]->backward(g);
    g = std::move(dx);
    skip_grads[upsample_.size() - 1 - j] = std::move(dskip);  // indexed like the skips
  }
  g = bottleneck_->backward(g);
  for (std::size_t i = downsample_.size(); i-- > 0;) {
    nn::add_(g, nn::cast(skip_grads[i + 1], g.dtype()));  // the level's output fed the next block and a skip
    g = downsample_[i]->backward(g);
  }
  nn::add_(g, nn::cast(skip_grads[0], g.dtype()));
  input_block_->backward(g);
  return {};
}

void UNet3d::initialize(std::uint64_t seed) {
  for (nn::Parameter* p : parameters()) {
    Tensor& t = p->value;
    const bool norm = p->name.find(".1.weight") != std::string::npos || p->name.find(".1.bias") != std::string::npos;
    if (norm) {  // InstanceNorm3d affine: gamma 1, beta 0 (the only ".1." children are the norms)
      if (p->name.ends_with("weight")) nn::init::ones_(t);
      else nn::init::zeros_(t);
      continue;
    }
    // PyTorch's Conv3d / ConvTranspose3d reset_parameters: kaiming_uniform(a = sqrt(5)) for the
    // weight, i.e. U(+-1/sqrt(fan_in)), and the bias U(+-1/sqrt(fan_in)) with the weight's fan_in.
    // fan_in = weight.size(1) * prod(kernel), which for a transposed conv is its *output* channels.
    const std::string weight_name = p->name.ends_with(".bias") ? p->name.substr(0, p->name.size() - 4) + "weight" : p->name;
    const nn::Parameter* w = nullptr;
    for (nn::Parameter* q : parameters())
      if (q->name == weight_name) w = q;
    BH_CHECK_AS(InvalidArgument, w != nullptr, "unet3d: no weight for parameter {}", p->name);
    const double fan_in = static_cast<double>(nn::init::compute_fans(w->value.shape()).fan_in);
    const float bound = static_cast<float>(1.0 / std::sqrt(fan_in));
    Rng rng = nn::init::rng_for(seed, p->name);
    nn::init::uniform_(t, rng, -bound, bound);
  }
}

namespace {

struct MacCounter {
  const UNet3dConfig& c;
  double total = 0;
  // A k^3 convolution producing `out` channels at side (d, h, w) from `in` channels.
  void conv(std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t d, std::int64_t h, std::int64_t w) {
    total += static_cast<double>(in) * out * k * k * k * d * h * w;
  }
};

}  // namespace

double UNet3d::forward_macs(std::int64_t d, std::int64_t h, std::int64_t w) const {
  MacCounter m{config_};
  const auto& f = config_.filters;
  m.conv(config_.in_channels, f[0], 3, d, h, w);
  m.conv(f[0], f[0], 3, d, h, w);
  std::int64_t s = 1;
  auto level = [&](std::int64_t in, std::int64_t out) {
    s *= 2;
    m.conv(in, out, 3, d / s, h / s, w / s);
    m.conv(out, out, 3, d / s, h / s, w / s);
  };
  for (std::size_t i = 0; i + 1 < f.size(); ++i) level(f[i], f[i + 1]);
  level(f.back(), f.back());
  // Upsampling: a transposed k2 s2 convolution costs in * out * 8 per *input* voxel.
  auto up = [&](std::int64_t in, std::int64_t out) {
    m.conv(in, out, 2, d / s, h / s, w / s);
    s /= 2;
    m.conv(2 * out, out, 3, d / s, h / s, w / s);
    m.conv(out, out, 3, d / s, h / s, w / s);
  };
  up(f.back(), f.back());
  for (std::size_t i = f.size() - 1; i >= 1; --i) up(f[i], f[i - 1]);
  m.conv(f[0], config_.num_classes, 1, d, h, w);
  return m.total;
}

std::int64_t count_parameters(const UNet3dConfig& c) {
  check_filters(c);
  const auto& f = c.filters;
  auto block = [](std::int64_t in, std::int64_t out) { return 27 * in * out + 2 * out; };  // conv (no bias) + IN affine
  std::int64_t n = block(c.in_channels, f[0]) + block(f[0], f[0]);
  for (std::size_t i = 0; i + 1 < f.size(); ++i) n += block(f[i], f[i + 1]) + block(f[i + 1], f[i + 1]);
  n += 2 * block(f.back(), f.back());
  auto up = [&](std::int64_t in, std::int64_t out) { return 8 * in * out + out + block(2 * out, out) + block(out, out); };
  n += up(f.back(), f.back());
  for (std::size_t i = f.size() - 1; i >= 1; --i) n += up(f[i], f[i - 1]);
  return n + f[0] * c.num_classes + c.num_classes;
}

}  // namespace benchhost::unet3d
