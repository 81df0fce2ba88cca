// Sliding-window inference as runtime/inference.py does it. See sliding_window.hpp.
#include "sliding_window.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "benchhost/error.hpp"

namespace benchhost::kits19 {

Tensor gaussian_weight_patch(const std::array<std::int64_t, 3>& roi) {
  std::array<std::vector<double>, 3> g;
  for (int a = 0; a < 3; ++a) {
    BH_CHECK_AS(InvalidArgument, roi[a] >= 1, "sliding window: roi {} must be >= 1", roi[a]);
    const double n = static_cast<double>(roi[a]);
    const double sigma = 0.125 * n;
    for (std::int64_t i = 0; i < roi[a]; ++i) {
      const double x = static_cast<double>(i) - (n - 1.0) / 2.0;
      g[a].push_back(std::exp(-(x * x) / (2.0 * sigma * sigma)));
    }
  }
  std::vector<double> w(static_cast<std::size_t>(roi[0] * roi[1] * roi[2]));
  double max = 0;
  std::size_t k = 0;
  for (std::int64_t i = 0; i < roi[0]; ++i)
    for (std::int64_t j = 0; j < roi[1]; ++j)
      for (std::int64_t l = 0; l < roi[2]; ++l, ++k) {
        // np.outer(np.outer(g, g), g): (g_i * g_j) * g_l, then np.cbrt.
        w[k] = std::cbrt((g[0][i] * g[1][j]) * g[2][l]);
        max = std::max(max, w[k]);
      }
  Tensor out = Tensor::empty({roi[0], roi[1], roi[2]}, DType::f32);
  float* p = out.data<float>();
  for (std::size_t i = 0; i < w.size(); ++i) p[i] = static_cast<float>(w[i] / max);
  return out;
}

SlidingWindowResult sliding_window_inference(const Tensor& image, const Tensor& label, const SlidingWindowOptions& o,
                                             const PatchModel& model) {
  BH_CHECK_AS(InvalidArgument, image.dim() == 4 && image.size(0) == 1 && image.dtype() == DType::f32,
              "sliding window: image must be f32 [1, D, H, W], got {} {}", dtype_name(image.dtype()),
              shape_str(image.shape()));
  BH_CHECK_AS(InvalidArgument, image.device().is_cpu(), "sliding window: image must be on the CPU");
  const Shape vol{image.size(1), image.size(2), image.size(3)};
  const Tensor lab3 = label.dim() == 4 ? label.select(0, 0) : label;
  BH_CHECK_AS(InvalidArgument, label.dtype() == DType::u8 && lab3.dim() == 3 && lab3.shape() == vol &&
                                   (label.dim() == 3 || label.size(0) == 1),
              "sliding window: label must be u8 [1, D, H, W] matching the image {}, got {} {}", shape_str(image.shape()),
              dtype_name(label.dtype()), shape_str(label.shape()));
  BH_CHECK_AS(InvalidArgument, o.overlap >= 0 && o.overlap < 1 && o.batch >= 1 && o.num_classes >= 1,
              "sliding window: overlap {} must be in [0, 1), batch {} and classes {} >= 1", o.overlap, o.batch,
              o.num_classes);
  std::array<std::int64_t, 3> stride{}, crop_front{}, cropped{}, pad_front{}, padded{}, count{};
  for (int a = 0; a < 3; ++a) {
    stride[a] = static_cast<std::int64_t>(static_cast<double>(o.roi[a]) * (1.0 - o.overlap));
    BH_CHECK_AS(InvalidArgument, o.roi[a] >= 1 && stride[a] >= 1,
                "sliding window: roi {} with overlap {} gives a stride of {}", o.roi[a], o.overlap, stride[a]);
    std::int64_t b = vol[a] % stride[a];
    if (b >= stride[a] / 2) b = 0;
    crop_front[a] = b / 2;
    cropped[a] = vol[a] - b;
    std::int64_t p = (stride[a] - cropped[a] % stride[a]) % stride[a];
    if (cropped[a] + p < o.roi[a]) p += stride[a];
    pad_front[a] = p / 2;
    padded[a] = cropped[a] + p;
    count[a] = (padded[a] - o.roi[a]) / stride[a] + 1;
    BH_CHECK_AS(InvalidArgument, count[a] >= 1, "sliding window: a padded size {} below the roi {}", padded[a], o.roi[a]);
  }
  const std::int64_t C = o.num_classes;
  const std::int64_t PD = padded[0], PH = padded[1], PW = padded[2];
  const std::int64_t RD = o.roi[0], RH = o.roi[1], RW = o.roi[2];

  // Steps 2 and 3: the cropped image inside a pad_value volume.
  const Tensor src = image.contiguous();
  const float* s = src.data<float>();
  std::vector<float> vin(static_cast<std::size_t>(PD * PH * PW), o.pad_value);
  for (std::int64_t d = 0; d < cropped[0]; ++d)
    for (std::int64_t h = 0; h < cropped[1]; ++h)
      std::memcpy(&vin[static_cast<std::size_t>(((d + pad_front[0]) * PH + h + pad_front[1]) * PW + pad_front[2])],
                  s + ((d + crop_front[0]) * vol[1] + h + crop_front[1]) * vol[2] + crop_front[2],
                  static_cast<std::size_t>(cropped[2]) * sizeof(float));

  const Tensor weight = gaussian_weight_patch(o.roi);
  const float* wp = weight.data<float>();
  std::vector<float> acc(static_cast<std::size_t>(C * PD * PH * PW), 0.0f);
  std::vector<float> norm(static_cast<std::size_t>(PD * PH * PW), 0.0f);
  const std::int64_t patch_voxels = RD * RH * RW;

  std::vector<std::array<std::int64_t, 3>> corners;
  for (std::int64_t i = 0; i < count[0]; ++i)
    for (std::int64_t j = 0; j < count[1]; ++j)
      for (std::int64_t k = 0; k < count[2]; ++k) corners.push_back({i * stride[0], j * stride[1], k * stride[2]});

  for (std::size_t first = 0; first < corners.size(); first += static_cast<std::size_t>(o.batch)) {
    const std::size_t n = std::min(corners.size() - first, static_cast<std::size_t>(o.batch));
    Tensor patches = Tensor::empty({static_cast<std::int64_t>(n), 1, RD, RH, RW}, DType::f32);
    float* pp = patches.data<float>();
    for (std::size_t b = 0; b < n; ++b) {
      const auto& c = corners[first + b];
      for (std::int64_t d = 0; d < RD; ++d)
        for (std::int64_t h = 0; h < RH; ++h)
          std::memcpy(pp + static_cast<std::int64_t>(b) * patch_voxels + (d * RH + h) * RW,
                      &vin[static_cast<std::size_t>(((c[0] + d) * PH + c[1] + h) * PW + c[2])],
                      static_cast<std::size_t>(RW) * sizeof(float));
    }
    const Tensor out = model(patches);
    const Shape want{static_cast<std::int64_t>(n), C, RD, RH, RW};
    BH_CHECK_AS(InvalidArgument, out.dtype() == DType::f32 && out.shape() == want && out.device().is_cpu(),
                "sliding window: the model returned {} {} for {} windows, expected f32 CPU {}",
                dtype_name(out.dtype()), shape_str(out.shape()), n, shape_str(want));
    const Tensor oc = out.contiguous();
    const float* op = oc.data<float>();
    for (std::size_t b = 0; b < n; ++b) {
      const auto& c = corners[first + b];
      for (std::int64_t ch = 0; ch < C; ++ch) {
        const float* lp = op + (static_cast<std::int64_t>(b) * C + ch) * patch_voxels;
        float* ap = acc.data() + ch * PD * PH * PW;
        for (std::int64_t d = 0; d < RD; ++d)
          for (std::int64_t h = 0; h < RH; ++h) {
            const std::int64_t row = ((c[0] + d) * PH + c[1] + h) * PW + c[2];
            const std::int64_t prow = (d * RH + h) * RW;
            for (std::int64_t w = 0; w < RW; ++w) ap[row + w] += lp[prow + w] * wp[prow + w];
          }
      }
      for (std::int64_t d = 0; d < RD; ++d)
        for (std::int64_t h = 0; h < RH; ++h) {
          const std::int64_t row = ((c[0] + d) * PH + c[1] + h) * PW + c[2];
          const std::int64_t prow = (d * RH + h) * RW;
          for (std::int64_t w = 0; w < RW; ++w) norm[static_cast<std::size_t>(row + w)] += wp[prow + w];
        }
    }
  }

  // Step 6: divide, then slice [front, front + original dim) clipped at the padded end.
  std::array<std::int64_t, 3> out_dim{};
  for (int a = 0; a < 3; ++a) out_dim[a] = std::min(vol[a], padded[a] - pad_front[a]);
  SlidingWindowResult r;
  r.logits = Tensor::empty({C, out_dim[0], out_dim[1], out_dim[2]}, DType::f32);
  r.classes = Tensor::empty({out_dim[0], out_dim[1], out_dim[2]}, DType::u8);
  float* rl = r.logits.data<float>();
  std::uint8_t* rc = r.classes.data<std::uint8_t>();
  const std::int64_t out_voxels = out_dim[0] * out_dim[1] * out_dim[2];
  for (std::int64_t d = 0; d < out_dim[0]; ++d)
    for (std::int64_t h = 0; h < out_dim[1]; ++h)
      for (std::int64_t w = 0; w < out_dim[2]; ++w) {
        const std::int64_t pi = ((d + pad_front[0]) * PH + h + pad_front[1]) * PW + w + pad_front[2];
        const std::int64_t oi = (d * out_dim[1] + h) * out_dim[2] + w;
        float best = 0;
        std::uint8_t arg = 0;
        for (std::int64_t ch = 0; ch < C; ++ch) {
          const float v = acc[static_cast<std::size_t>(ch * PD * PH * PW + pi)] / norm[static_cast<std::size_t>(pi)];
          rl[ch * out_voxels + oi] = v;
          if (ch == 0 || v > best) best = v, arg = static_cast<std::uint8_t>(ch);
        }
        rc[oi] = arg;
      }
  r.label = lab3.slice(0, crop_front[0], crop_front[0] + cropped[0])
                .slice(1, crop_front[1], crop_front[1] + cropped[1])
                .slice(2, crop_front[2], crop_front[2] + cropped[2])
                .contiguous();
  return r;
}

}  // namespace benchhost::kits19
