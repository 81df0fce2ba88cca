// The maskrcnn workload's data (see data.hpp, Note [Mask R-CNN transforms]).

#include "data.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/error.hpp"
#include "openimages.hpp"
#include "synthetic_coco2017.hpp"

namespace benchhost::maskrcnn {

namespace {

constexpr float kPixelMean[3] = {102.9801f, 115.9465f, 122.7717f};  // B, G, R

std::int64_t round_up32(std::int64_t v) { return (v + 31) / 32 * 32; }

}  // namespace

std::pair<int, int> resized_size(int h, int w, int min_size, int max_size) {
  BH_CHECK_AS(InvalidArgument, h > 0 && w > 0 && min_size > 0, "Mask R-CNN resize: bad sizes {}x{} -> {}", h, w,
              min_size);
  // maskrcnn_benchmark transforms.Resize.get_size (float arithmetic as Python's).
  double size = min_size;
  const double mn = std::min(h, w), mx = std::max(h, w);
  if (max_size > 0 && mx / mn * size > max_size) size = std::round(max_size * mn / mx);
  if ((w <= h && w == size) || (h <= w && h == size)) return {h, w};
  if (w < h) return {static_cast<int>(size * h / w), static_cast<int>(size)};
  return {static_cast<int>(size), static_cast<int>(size * w / h)};
}

MaskRcnnDataset::MaskRcnnDataset(std::shared_ptr<const coco::Coco2017Dataset> inner, bool train, int min_size,
                                 int max_size, float pixel_std)
    : inner_(std::move(inner)), train_(train), min_size_(min_size), max_size_(max_size), pixel_std_(pixel_std) {
  BH_CHECK_AS(InvalidArgument, inner_ != nullptr, "MaskRcnnDataset: no dataset");
  BH_CHECK_AS(InvalidArgument, pixel_std_ > 0, "MaskRcnnDataset: pixel std {} must be positive", pixel_std_);
}

data::Sample MaskRcnnDataset::get(const data::SampleContext& ctx) const {
  data::Sample s = inner_->get(ctx);
  const Tensor src = s.at("image").contiguous();
  const int h = static_cast<int>(src.size(0)), w = static_cast<int>(src.size(1));
  const auto [oh, ow] = resized_size(h, w, min_size_, max_size_);
  const Tensor img = (oh == h && ow == w) ? src : data::resize_bilinear(src, oh, ow);
  Rng rng = ctx.rng();
  const bool flip = train_ && rng.uniform() < 0.5f;
  // BGR x 255 - mean, CHW, mirrored on request.
  Tensor out = Tensor::empty({3, oh, ow});
  const std::uint8_t* in = img.data<std::uint8_t>();
  float* o = out.data<float>();
  const std::int64_t plane = static_cast<std::int64_t>(oh) * ow;
  const float inv_std = 1.0f / pixel_std_;
  for (int y = 0; y < oh; ++y)
    for (int x = 0; x < ow; ++x) {
      const std::uint8_t* px = in + (static_cast<std::int64_t>(y) * ow + (flip ? ow - 1 - x : x)) * 3;
      const std::int64_t at = static_cast<std::int64_t>(y) * ow + x;
      for (int c = 0; c < 3; ++c) o[c * plane + at] = (static_cast<float>(px[2 - c]) - kPixelMean[c]) * inv_std;
    }
  // Boxes and polygons: scaled (BoxList.resize: x by ow / w, y by oh / h), then mirrored.
  const float rx = static_cast<float>(ow) / static_cast<float>(w), ry = static_cast<float>(oh) / static_cast<float>(h);
  Tensor boxes = s.at("boxes").contiguous().clone();
  float* b = boxes.data<float>();
  for (std::int64_t i = 0; i < boxes.size(0); ++i, b += 4) {
    float x1 = b[0] * rx, y1 = b[1] * ry, x2 = b[2] * rx, y2 = b[3] * ry;
    if (flip) {
      const float fx1 = static_cast<float>(ow) - x2 - 1.0f, fx2 = static_cast<float>(ow) - x1 - 1.0f;
      x1 = fx1;
      x2 = fx2;
    }
    b[0] = x1, b[1] = y1, b[2] = x2, b[3] = y2;
  }
  Tensor poly = s.at("polygons").contiguous().clone();
  double* xy = poly.data<double>();
  for (std::int64_t i = 0; i + 1 < poly.numel(); i += 2) {
    // maskrcnn_benchmark keeps polygons as float32 tensors: scale in f32 as it does.
    float x = static_cast<float>(xy[i]) * rx, y = static_cast<float>(xy[i + 1]) * ry;
    if (flip) x = static_cast<float>(ow) - x - 1.0f;
    xy[i] = x;
    xy[i + 1] = y;
  }
  s.set("image", out);
  s.set("image_size", Tensor::from_vector_i64({oh, ow}, {2}));
  s.set("boxes", boxes);
  s.set("polygons", poly);
  return s;
}

data::TensorDict maskrcnn_collate(const std::vector<data::Sample>& samples) {
  BH_CHECK_AS(InvalidArgument, !samples.empty(), "maskrcnn_collate: no samples");
  const auto n = static_cast<std::int64_t>(samples.size());
  std::int64_t hp = 0, wp = 0, coords = 0, polys = 0;
  for (const data::Sample& s : samples) {
    const Tensor& im = s.at("image");
    BH_CHECK_AS(DataError, im.dim() == 3 && im.size(0) == 3 && im.dtype() == DType::f32,
                "maskrcnn_collate: image must be f32 [3, H, W], got {}", shape_str(im.shape()));
    hp = std::max(hp, im.size(1));
    wp = std::max(wp, im.size(2));
    coords += s.at("polygons").numel();
    polys += s.at("polygon_sizes").numel();
  }
  hp = round_up32(hp);
  wp = round_up32(wp);
  Tensor images = Tensor::zeros({n, 3, hp, wp});
  Tensor xy = Tensor::empty({coords}, DType::f64);
  Tensor sizes = Tensor::empty({polys}, DType::i64), owner = Tensor::empty({polys}, DType::i64),
         which = Tensor::empty({polys}, DType::i64);
  std::int64_t at_c = 0, at_p = 0;
  std::vector<data::Sample> rest(samples.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const data::Sample& s = samples[static_cast<std::size_t>(i)];
    const Tensor im = s.at("image").contiguous();
    const std::int64_t h = im.size(1), w = im.size(2);
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t y = 0; y < h; ++y)
        std::memcpy(images.data<float>() + ((i * 3 + c) * hp + y) * wp, im.data<float>() + (c * h + y) * w,
                    static_cast<std::size_t>(w) * sizeof(float));
    const Tensor p = s.at("polygons").contiguous(), ps = s.at("polygon_sizes").contiguous(),
                 po = s.at("polygon_object").contiguous();
    if (p.numel() > 0) std::memcpy(xy.data<double>() + at_c, p.data<double>(), static_cast<std::size_t>(p.numel()) * 8);
    for (std::int64_t k = 0; k < ps.numel(); ++k, ++at_p) {
      sizes.data<std::int64_t>()[at_p] = ps.data<std::int64_t>()[k];
      owner.data<std::int64_t>()[at_p] = po.data<std::int64_t>()[k];
      which.data<std::int64_t>()[at_p] = i;
    }
    at_c += p.numel();
    data::Sample r;
    r.set("boxes", s.at("boxes"));
    r.set("labels", s.at("labels"));
    r.set("image_size", s.at("image_size"));
    r.set("image_id", s.at("image_id"));
    r.set("orig_size", s.at("orig_size"));
    rest[static_cast<std::size_t>(i)] = std::move(r);
  }
  data::TensorDict out = coco::detection_collate(rest);
  out.set("image", images);
  out.set("polygons", xy);
  out.set("polygon_sizes", sizes);
  out.set("polygon_object", owner);
  out.set("polygon_image", which);
  return out;
}

std::vector<ImageTargets> batch_targets(const data::Batch& batch) {
  const Tensor boxes = batch["boxes"].to(Device::cpu()).contiguous();
  const Tensor labels = batch["labels"].to(Device::cpu()).contiguous();
  const Tensor counts = batch["num_boxes"].to(Device::cpu()).contiguous();
  const Tensor sizes = batch["image_size"].to(Device::cpu()).contiguous();
  const Tensor xy = batch["polygons"].to(Device::cpu()).contiguous();
  const Tensor psz = batch["polygon_sizes"].to(Device::cpu()).contiguous();
  const Tensor pobj = batch["polygon_object"].to(Device::cpu()).contiguous();
  const Tensor pimg = batch["polygon_image"].to(Device::cpu()).contiguous();
  const std::int64_t n = counts.numel(), g = boxes.size(1);
  std::vector<ImageTargets> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    ImageTargets& t = out[static_cast<std::size_t>(i)];
    const std::int64_t k = counts.data<std::int64_t>()[i];
    BH_CHECK_AS(DataError, k >= 0 && k <= g, "maskrcnn: image {} of the batch says {} boxes of {}", i, k, g);
    t.boxes = boxes.select(0, i).slice(0, 0, k).contiguous().clone();
    t.labels = labels.select(0, i).slice(0, 0, k).contiguous().clone();
    t.polygons.resize(static_cast<std::size_t>(k));
    t.height = sizes.data<std::int64_t>()[2 * i];
    t.width = sizes.data<std::int64_t>()[2 * i + 1];
    t.sample_key = static_cast<std::size_t>(i) < batch.indices.size()
                       ? static_cast<std::uint64_t>(batch.indices[static_cast<std::size_t>(i)])
                       : static_cast<std::uint64_t>(i);
  }
  std::int64_t at = 0;
  for (std::int64_t p = 0; p < psz.numel(); ++p) {
    const std::int64_t m = psz.data<std::int64_t>()[p], o = pobj.data<std::int64_t>()[p], im = pimg.data<std::int64_t>()[p];
    BH_CHECK_AS(DataError, m >= 0 && at + m <= xy.numel() && im >= 0 && im < n,
                "maskrcnn: polygon {} ({} coordinates, image {}) does not fit the batch", p, m, im);
    ImageTargets& t = out[static_cast<std::size_t>(im)];
    BH_CHECK_AS(DataError, o >= 0 && o < static_cast<std::int64_t>(t.polygons.size()),
                "maskrcnn: polygon {} belongs to object {} of an image with {}", p, o, t.polygons.size());
    t.polygons[static_cast<std::size_t>(o)].emplace_back(xy.data<double>() + at, xy.data<double>() + at + m);
    at += m;
  }
  return out;
}

namespace {

// Note [Synthetic data]: the same batch every step (the other workloads' --synthetic): the model,
// not the input pipeline. Every image carries four boxes of classes 1..K-1, each box its own
// rectangle polygon.
DataSources synthetic_sources(const RunContext& ctx, std::int64_t batch_size) {
  const Options& o = ctx.options;
  const std::int64_t s = round_up32(o.get_int("min-size")), k = o.get_int("num-classes"), batches = 16;
  const double std = o.get_float("pixel-std");  // pixels minus the means span about -120..140
  DataSources out;
  out.train = std::make_unique<data::SyntheticSource>(
      std::vector<data::FieldSpec>{{"image", {3, s, s}, DType::f32, -120.0 / std, 140.0 / std}}, batch_size, batches,
      ctx.device, ctx.seed);
  const float fs = static_cast<float>(s);
  for (std::int64_t i = 0; i < batch_size; ++i) {
    ImageTargets t;
    t.height = t.width = s;
    t.sample_key = static_cast<std::uint64_t>(ctx.rank * batch_size + i);
    std::vector<float> b;
    std::vector<std::int64_t> l;
    for (int j = 0; j < 4; ++j) {
      const float x = fs * (0.05f + 0.2f * static_cast<float>(j)), y = fs * (0.1f + 0.03f * static_cast<float>(i % 8));
      const float x2 = x + fs * (0.1f + 0.05f * static_cast<float>(j)), y2 = y + fs * 0.3f;
      b.insert(b.end(), {x, y, x2, y2});
      l.push_back(1 + (i + j) % (k - 1));
      t.polygons.push_back({{x, y, x2, y, x2, y2, x, y2}});
    }
    t.boxes = Tensor::from_vector(b, {4, 4});
    t.labels = Tensor::from_vector_i64(l, {4});
    out.synthetic_targets.push_back(std::move(t));
  }
  out.samples_per_epoch = batches * batch_size * ctx.world_size;
  return out;
}

}  // namespace

std::vector<std::int32_t> aspect_ratio_groups(const coco::Coco2017Split& split) {
  std::vector<std::int32_t> out;
  out.reserve(split.samples.size());
  for (const std::size_t pos : split.samples) {
    const coco::CocoImage& im = split.coco->images[pos];
    // bisect_right([1], h / w): h < w -> 0, h >= w -> 1 (integers compare exactly).
    out.push_back(im.height >= im.width ? 1 : 0);
  }
  return out;
}

DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size) {
  const Options& o = ctx.options;
  if (ctx.synthetic_data || ctx.mode == "infer") return synthetic_sources(ctx, batch_size);
  const std::string root = data::resolve_data_dir(o.get_string("data-dir"));
  BH_CHECK_AS(InvalidArgument, !root.empty(),
              "maskrcnn needs maskrcnn.data-dir: COCO 2017 as MLPerf's download_dataset.sh leaves it (<root>/train2017/"
              "*.jpg, <root>/val2017/*.jpg, <root>/annotations/instances_{{train,val}}2017.json), or --synthetic");
  if (o.get_bool("generate")) {
    coco::Coco2017SyntheticOptions g;
    g.train_images = static_cast<int>(o.get_int("gen-train-images"));
    g.val_images = static_cast<int>(o.get_int("gen-val-images"));
    g.min_size = static_cast<int>(o.get_int("gen-min-size"));
    g.max_size = static_cast<int>(o.get_int("gen-max-size"));
    g.classes = static_cast<int>(o.get_int("gen-classes"));
    g.max_objects = static_cast<int>(o.get_int("gen-max-objects"));
    g.seed = static_cast<std::uint64_t>(o.get_int("gen-seed"));
    BH_CHECK_AS(InvalidArgument, g.min_size <= g.max_size, "maskrcnn.gen-min-size {} is above maskrcnn.gen-max-size {}",
                g.min_size, g.max_size);
    coco::ensure_coco2017_synthetic(root, g, ctx.communicator);  // rank 0 writes, the others wait
  }
  const int min_size = static_cast<int>(o.get_int("min-size")), max_size = static_cast<int>(o.get_int("max-size"));
  auto train_split = coco::make_coco2017_train(root);
  auto eval_split = coco::make_coco2017_eval(root);
  const std::int64_t k = o.get_int("num-classes");
  BH_CHECK_AS(DataError, train_split->split().num_classes + 1 <= k && eval_split->split().num_classes + 1 <= k,
              "{}: the data has {} / {} categories but maskrcnn.num-classes is {} (categories + 1 for the background)",
              root, train_split->split().num_classes, eval_split->split().num_classes, k);
  const auto pixel_std = static_cast<float>(o.get_float("pixel-std"));
  auto train = std::make_shared<const MaskRcnnDataset>(train_split, true, min_size, max_size, pixel_std);
  auto eval = std::make_shared<const MaskRcnnDataset>(eval_split, false, min_size, max_size, pixel_std);

  // Note [Training and evaluation loaders], training batches grouped by aspect ratio.
  data::RunLoaderOptions lo;
  lo.rank = ctx.rank;
  lo.world_size = ctx.world_size;
  lo.seed = ctx.seed;
  const std::int64_t threads = o.get_int("loader-threads") > 0 ? o.get_int("loader-threads") : ctx.num_threads;
  lo.num_threads = static_cast<int>(std::max<std::int64_t>(1, threads));
  lo.device = Device::cpu();  // the targets are host work; the workload moves the images
  lo.collate = maskrcnn_collate;
  if (o.get_bool("aspect-ratio-grouping")) lo.group_ids = aspect_ratio_groups(train_split->split());
  DataSources out;
  out.train = data::training_loader(train, batch_size, lo);
  BH_CHECK_AS(InvalidArgument, out.train->batches_per_epoch() > 0,
              "maskrcnn: {} training images give no full batch of {} per rank", train->size(), batch_size);
  out.eval = data::evaluation_loader(eval, o.get_int("eval-batch-size"), lo);
  out.samples_per_epoch = out.train->batches_per_epoch() * batch_size * ctx.world_size;
  out.eval_samples = eval->size();
  out.eval_split = eval_split;
  return out;
}

}  // namespace benchhost::maskrcnn
