// Image augmentations (random-resized-crop, flip, resize, normalise) and ImageFileDataset.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"

namespace benchhost::data {

namespace {

void check_hwc(const Tensor& t, const char* what) {
  if (!t.defined() || t.dtype() != DType::u8 || t.dim() != 3 || !t.device().is_cpu() || t.size(0) < 1 ||
      t.size(1) < 1 || t.size(2) < 1)
    BH_THROW(InvalidArgument, "{}: need a non-empty u8 HWC CPU tensor, got {}", what,
             t.defined() ? t.describe() : "an undefined tensor");
}

// Bilinear source taps for one output axis: out position o samples source coordinate
// start + (o + 0.5) * (extent / out) - 0.5 (pixel centres, align_corners = false), clamped to
// the image [0, limit).
struct Taps {
  std::vector<int> i0, i1;
  std::vector<float> w1;
};

Taps make_taps(int start, int extent, int out, int limit) {
  Taps t;
  t.i0.resize(out);
  t.i1.resize(out);
  t.w1.resize(out);
  const float step = static_cast<float>(extent) / static_cast<float>(out);
  for (int o = 0; o < out; ++o) {
    float src = static_cast<float>(start) + (static_cast<float>(o) + 0.5f) * step - 0.5f;
    src = std::clamp(src, 0.0f, static_cast<float>(limit - 1));
    const int i0 = static_cast<int>(src);
    t.i0[o] = i0;
    t.i1[o] = std::min(i0 + 1, limit - 1);
    t.w1[o] = src - static_cast<float>(i0);
  }
  return t;
}

}  // namespace

CropBox random_resized_crop_box(int height, int width, Rng& rng, std::array<float, 2> scale,
                                std::array<float, 2> ratio) {
  if (height < 1 || width < 1) BH_THROW(InvalidArgument, "random_resized_crop_box: empty image {}x{}", width, height);
  if (!(scale[0] > 0 && scale[0] <= scale[1]) || !(ratio[0] > 0 && ratio[0] <= ratio[1]))
    BH_THROW(InvalidArgument, "random_resized_crop_box: bad scale ({}, {}) or ratio ({}, {})", scale[0], scale[1],
             ratio[0], ratio[1]);
  const double area = static_cast<double>(height) * width;
  const float log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(scale[0], scale[1]);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int top = static_cast<int>(rng.below(static_cast<std::uint64_t>(height - h + 1)));
      const int left = static_cast<int>(rng.below(static_cast<std::uint64_t>(width - w + 1)));
      return {top, left, h, w};
    }
  }
  // Fallback: the whole image, cut to the nearest allowed aspect ratio, centred.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = std::max(1, static_cast<int>(std::lround(w / ratio[0])));
  } else if (in_ratio > ratio[1]) {
    w = std::max(1, static_cast<int>(std::lround(h * ratio[1])));
  }
  h = std::min(h, height);
  w = std::min(w, width);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

CropBox center_crop_box(int height, int width, int out_h, int out_w) {
  const int h = std::clamp(out_h, 1, height), w = std::clamp(out_w, 1, width);
  return {static_cast<int>(std::lround((height - h) / 2.0)), static_cast<int>(std::lround((width - w) / 2.0)), h, w};
}

CropBox resize_center_crop_box(int height, int width, int resize_short, int out_h, int out_w) {
  if (height < 1 || width < 1 || resize_short < 1 || out_h < 1 || out_w < 1)
    BH_THROW(InvalidArgument, "resize_center_crop_box: bad sizes (image {}x{}, resize {}, out {}x{})", width,
             height, resize_short, out_w, out_h);
  const double s = static_cast<double>(resize_short) / std::min(height, width);
  const double rh = height * s, rw = width * s;
  const double ch = std::min<double>(out_h, rh), cw = std::min<double>(out_w, rw);
  CropBox b;
  b.height = std::clamp(static_cast<int>(std::lround(ch / s)), 1, height);
  b.width = std::clamp(static_cast<int>(std::lround(cw / s)), 1, width);
  b.top = std::clamp(static_cast<int>(std::lround((rh - ch) / 2.0 / s)), 0, height - b.height);
  b.left = std::clamp(static_cast<int>(std::lround((rw - cw) / 2.0 / s)), 0, width - b.width);
  return b;
}

Tensor crop(const Tensor& hwc, CropBox box) {
  check_hwc(hwc, "crop");
  if (box.top < 0 || box.left < 0 || box.height < 1 || box.width < 1 || box.top + box.height > hwc.size(0) ||
      box.left + box.width > hwc.size(1))
    BH_THROW(InvalidArgument, "crop: window {}x{} at ({}, {}) is outside the {}x{} image", box.width, box.height,
             box.left, box.top, hwc.size(1), hwc.size(0));
  return hwc.slice(0, box.top, box.top + box.height).slice(1, box.left, box.left + box.width).contiguous();
}

Tensor hflip(const Tensor& hwc) {
  check_hwc(hwc, "hflip");
  const Tensor src = hwc.contiguous();
  const std::int64_t h = src.size(0), w = src.size(1), c = src.size(2);
  Tensor out = Tensor::empty(src.shape(), DType::u8);
  const auto* s = src.data<std::uint8_t>();
  auto* d = out.data<std::uint8_t>();
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x)
      std::memcpy(d + (y * w + x) * c, s + (y * w + (w - 1 - x)) * c, static_cast<std::size_t>(c));
  return out;
}

Tensor resize_bilinear(const Tensor& hwc, int out_h, int out_w) {
  check_hwc(hwc, "resize_bilinear");
  if (out_h < 1 || out_w < 1) BH_THROW(InvalidArgument, "resize_bilinear: output {}x{} is empty", out_w, out_h);
  const Tensor src = hwc.contiguous();
  const int h = static_cast<int>(src.size(0)), w = static_cast<int>(src.size(1)), c = static_cast<int>(src.size(2));
  const Taps ty = make_taps(0, h, out_h, h), tx = make_taps(0, w, out_w, w);
  Tensor out = Tensor::empty({out_h, out_w, c}, DType::u8);
  const auto* s = src.data<std::uint8_t>();
  auto* d = out.data<std::uint8_t>();
  for (int y = 0; y < out_h; ++y) {
    const std::uint8_t* r0 = s + static_cast<std::size_t>(ty.i0[y]) * w * c;
    const std::uint8_t* r1 = s + static_cast<std::size_t>(ty.i1[y]) * w * c;
    const float wy = ty.w1[y];
    for (int x = 0; x < out_w; ++x) {
      const int a = tx.i0[x] * c, b = tx.i1[x] * c;
      const float wx = tx.w1[x];
      for (int k = 0; k < c; ++k) {
        const float top = r0[a + k] + wx * (r0[b + k] - r0[a + k]);
        const float bot = r1[a + k] + wx * (r1[b + k] - r1[a + k]);
        d[(static_cast<std::size_t>(y) * out_w + x) * c + k] =
            static_cast<std::uint8_t>(std::clamp(top + wy * (bot - top) + 0.5f, 0.0f, 255.0f));
      }
    }
  }
  return out;
}

Tensor normalize(const Tensor& hwc, const Normalization& norm, Layout layout) {
  check_hwc(hwc, "normalize");
  const int h = static_cast<int>(hwc.size(0)), w = static_cast<int>(hwc.size(1));
  Tensor out = Tensor::empty(layout == Layout::chw ? Shape{hwc.size(2), h, w} : Shape{h, w, hwc.size(2)});
  resized_crop_normalize(hwc, {0, 0, h, w}, h, w, false, norm, layout, out.data<float>());
  return out;
}

void resized_crop_normalize(const Tensor& src_in, CropBox box, int out_h, int out_w, bool flip,
                            const Normalization& norm, Layout layout, float* dst) {
  check_hwc(src_in, "resized_crop_normalize");
  const int c = static_cast<int>(src_in.size(2));
  if (c != 1 && c != 3) BH_THROW(InvalidArgument, "resized_crop_normalize: {} channels (need 1 or 3)", c);
  if (out_h < 1 || out_w < 1) BH_THROW(InvalidArgument, "resized_crop_normalize: output {}x{} is empty", out_w, out_h);
  const Tensor src = src_in.contiguous();
  const int h = static_cast<int>(src.size(0)), w = static_cast<int>(src.size(1));
  if (box.top < 0 || box.left < 0 || box.height < 1 || box.width < 1 || box.top + box.height > h ||
      box.left + box.width > w)
    BH_THROW(InvalidArgument, "resized_crop_normalize: window {}x{} at ({}, {}) is outside the {}x{} image",
             box.width, box.height, box.left, box.top, w, h);
  const Taps ty = make_taps(box.top, box.height, out_h, h);
  Taps tx = make_taps(box.left, box.width, out_w, w);
  if (flip) {
    std::reverse(tx.i0.begin(), tx.i0.end());
    std::reverse(tx.i1.begin(), tx.i1.end());
    std::reverse(tx.w1.begin(), tx.w1.end());
  }
  // (v / 255 - mean) / std  ==  v * scale + shift
  float scale[3], shift[3];
  for (int k = 0; k < c; ++k) {
    scale[k] = 1.0f / (255.0f * norm.std[k]);
    shift[k] = -norm.mean[k] / norm.std[k];
  }
  const auto* s = src.data<std::uint8_t>();
  const std::size_t plane = static_cast<std::size_t>(out_h) * out_w;
  // Horizontal pass per needed source row into planar float rows [c][out_w] (cached: consecutive
  // output rows share source rows), then a vertical blend that the compiler vectorises.
  const std::size_t row_len = static_cast<std::size_t>(out_w) * c;
  std::vector<float> row_a(row_len), row_b(row_len);
  int have_a = -1, have_b = -1;
  auto hpass = [&](int sy, float* out) {
    const std::uint8_t* r = s + static_cast<std::size_t>(sy) * w * c;
    if (c == 3) {
      float* o0 = out;
      float* o1 = out + out_w;
      float* o2 = out + 2 * out_w;
      for (int x = 0; x < out_w; ++x) {
        const std::uint8_t* pa = r + tx.i0[x] * 3;
        const std::uint8_t* pb = r + tx.i1[x] * 3;
        const float wx = tx.w1[x];
        o0[x] = pa[0] + wx * static_cast<float>(pb[0] - pa[0]);
        o1[x] = pa[1] + wx * static_cast<float>(pb[1] - pa[1]);
        o2[x] = pa[2] + wx * static_cast<float>(pb[2] - pa[2]);
      }
    } else {
      for (int x = 0; x < out_w; ++x) out[x] = r[tx.i0[x]] + tx.w1[x] * static_cast<float>(r[tx.i1[x]] - r[tx.i0[x]]);
    }
  };
  for (int y = 0; y < out_h; ++y) {
    const int y0 = ty.i0[y], y1 = ty.i1[y];
    if (have_a != y0) {
      if (have_b == y0) {
        std::swap(row_a, row_b);
        std::swap(have_a, have_b);
      } else {
        hpass(y0, row_a.data());
        have_a = y0;
      }
    }
    if (have_b != y1) {
      hpass(y1, row_b.data());
      have_b = y1;
    }
    const float wy = ty.w1[y];
    for (int k = 0; k < c; ++k) {
      const float* ra = row_a.data() + static_cast<std::size_t>(k) * out_w;
      const float* rb = row_b.data() + static_cast<std::size_t>(k) * out_w;
      const float sc = scale[k], sh = shift[k];
      if (layout == Layout::chw) {
        float* o = dst + k * plane + static_cast<std::size_t>(y) * out_w;
        for (int x = 0; x < out_w; ++x) o[x] = (ra[x] + wy * (rb[x] - ra[x])) * sc + sh;
      } else {
        float* o = dst + static_cast<std::size_t>(y) * row_len;
        for (int x = 0; x < out_w; ++x) o[static_cast<std::size_t>(x) * c + k] = (ra[x] + wy * (rb[x] - ra[x])) * sc + sh;
      }
    }
  }
}

Tensor load_transformed_image(std::span<const std::uint8_t> bytes, const std::string& name,
                              const ImageTransform& t, Rng& rng) {
  if (t.out_height < 1 || t.out_width < 1)
    BH_THROW(InvalidArgument, "image transform: output {}x{} is empty", t.out_width, t.out_height);
  const ImageInfo info = read_image_info(bytes, name);
  CropBox box;
  bool flip = false;
  if (t.train) {
    box = random_resized_crop_box(info.height, info.width, rng, t.scale, t.ratio);
    flip = rng.uniform() < t.flip_probability;
  } else {
    box = resize_center_crop_box(info.height, info.width, t.resize_short, t.out_height, t.out_width);
  }
  Tensor image;
  if (t.dct_scaling && sniff_image_format(bytes) == "jpeg") {
    DecodedRegion r = decode_jpeg_region(bytes, name, box, t.out_height, t.out_width, 3);
    image = std::move(r.image);
    box = r.box;
  } else {
    image = decode_image(bytes, name, 3);
    box.height = std::min<int>(box.height, static_cast<int>(image.size(0)) - box.top);
    box.width = std::min<int>(box.width, static_cast<int>(image.size(1)) - box.left);
  }
  Tensor out = Tensor::empty(t.layout == Layout::chw ? Shape{3, t.out_height, t.out_width}
                                                     : Shape{t.out_height, t.out_width, 3});
  resized_crop_normalize(image, box, t.out_height, t.out_width, flip, t.norm, t.layout, out.data<float>());
  return out;
}

// ---- ImageFileDataset ----

ImageFileDataset::ImageFileDataset(std::vector<std::string> paths, std::vector<std::int64_t> labels,
                                   ImageTransform transform)
    : paths_(std::move(paths)), labels_(std::move(labels)), transform_(transform) {
  if (paths_.size() != labels_.size())
    BH_THROW(InvalidArgument, "ImageFileDataset: {} paths but {} labels", paths_.size(), labels_.size());
}

std::shared_ptr<ImageFileDataset> ImageFileDataset::from_folder(const std::string& root, ImageTransform transform) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) BH_THROW(DataError, "{}: not a directory", root);
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  std::vector<std::string> paths;
  std::vector<std::int64_t> labels;
  for (std::size_t k = 0; k < classes.size(); ++k) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(fs::path(root) / classes[k], ec)) {
      if (!e.is_regular_file()) continue;
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (ext == ".jpg" || ext == ".jpeg" || ext == ".png") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      paths.push_back(std::move(f));
      labels.push_back(static_cast<std::int64_t>(k));
    }
  }
  if (paths.empty())
    BH_THROW(DataError, "{}: no images found (expected {}/<class>/<image>.jpg|.jpeg|.png)", root, root);
  auto ds = std::make_shared<ImageFileDataset>(std::move(paths), std::move(labels), transform);
  ds->class_names_ = std::move(classes);
  return ds;
}

Sample ImageFileDataset::get(const SampleContext& ctx) const {
  check_index(ctx.index, size());
  const std::string& path = paths_[static_cast<std::size_t>(ctx.index)];
  const auto bytes = read_file(path, std::size_t{1} << 30);
  Rng rng = ctx.rng();
  Sample s;
  s.set("image", load_transformed_image(bytes, path, transform_, rng));
  Tensor label = Tensor::empty({}, DType::i64);
  *label.data<std::int64_t>() = labels_[static_cast<std::size_t>(ctx.index)];
  s.set("label", std::move(label));
  return s;
}

std::string ImageFileDataset::source(std::int64_t index) const {
  return index >= 0 && index < size() ? paths_[static_cast<std::size_t>(index)] : std::string{};
}

}  // namespace benchhost::data
