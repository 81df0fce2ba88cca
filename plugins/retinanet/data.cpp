// The retinanet workload's data sources (see data.hpp).

#include "data.hpp"

#include <algorithm>

#include "benchhost/data/file.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/error.hpp"
#include "openimages.hpp"
#include "synthetic.hpp"

namespace benchhost::retinanet {

namespace {

// Note [Synthetic data]: the same batch every step (the other workloads' --synthetic): the model,
// not the input pipeline. Every image carries `boxes` random boxes of random classes.
DataSources synthetic_sources(const RunContext& ctx, std::int64_t batch_size, bool channels_last) {
  const Options& o = ctx.options;
  const std::int64_t s = o.get_int("image-size"), k = o.get_int("num-classes"), g = 4;
  const Shape image = channels_last ? Shape{s, s, 3} : Shape{3, s, s};
  const std::int64_t batches = 64;
  DataSources out;
  out.train = std::make_unique<data::SyntheticSource>(
      std::vector<data::FieldSpec>{{"image", image, DType::f32, -2.0, 2.0},
                                   {"labels", {g}, DType::i64, 0.0, static_cast<double>(k)},
                                   {"num_boxes", {}, DType::i64, static_cast<double>(g), static_cast<double>(g + 1)}},
      batch_size, batches, ctx.device, ctx.seed);
  out.synthetic_boxes = Tensor::empty({batch_size, g, 4});
  float* b = out.synthetic_boxes.data<float>();
  const float fs = static_cast<float>(s);
  for (std::int64_t i = 0; i < batch_size; ++i)
    for (std::int64_t j = 0; j < g; ++j, b += 4) {
      const float x = fs * (0.05f + 0.2f * static_cast<float>(j)), y = fs * (0.1f + 0.03f * static_cast<float>(i % 8));
      b[0] = x, b[1] = y, b[2] = x + fs * (0.1f + 0.05f * static_cast<float>(j)), b[3] = y + fs * 0.3f;
    }
  out.samples_per_epoch = batches * batch_size * ctx.world_size;
  out.num_classes = k;
  return out;
}

}  // namespace

DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size, bool channels_last) {
  const Options& o = ctx.options;
  if (ctx.synthetic_data || ctx.mode == "infer") return synthetic_sources(ctx, batch_size, channels_last);
  const std::string root = data::resolve_data_dir(o.get_string("data-dir"));
  BH_CHECK_AS(InvalidArgument, !root.empty(),
              "retinanet needs retinanet.data-dir: the MLPerf OpenImages export (<root>/train/data/*.jpg, "
              "<root>/train/labels/openimages-mlperf.json, the same under validation/), or --synthetic");
  if (o.get_bool("generate")) {
    coco::OpenImagesSyntheticOptions g;
    g.train_images = static_cast<int>(o.get_int("gen-train-images"));
    g.val_images = static_cast<int>(o.get_int("gen-val-images"));
    g.min_size = static_cast<int>(o.get_int("gen-min-size"));
    g.max_size = static_cast<int>(o.get_int("gen-max-size"));
    g.classes = static_cast<int>(o.get_int("gen-classes"));
    g.max_objects = static_cast<int>(o.get_int("gen-max-objects"));
    g.seed = static_cast<std::uint64_t>(o.get_int("gen-seed"));
    BH_CHECK_AS(InvalidArgument, g.min_size <= g.max_size, "retinanet.gen-min-size {} is above retinanet.gen-max-size {}",
                g.min_size, g.max_size);
    coco::ensure_openimages_synthetic(root, g, ctx.communicator);  // rank 0 writes, the others wait
  }
  const int size = static_cast<int>(o.get_int("image-size"));
  coco::DetectionTransform t;
  t.out_height = t.out_width = size;
  t.layout = channels_last ? data::Layout::hwc : data::Layout::chw;
  t.train = true;
  auto train = std::make_shared<const coco::OpenImagesDataset>(coco::open_openimages_split(root, "train"), t);
  t.train = false;
  auto eval = std::make_shared<const coco::OpenImagesDataset>(coco::open_openimages_split(root, "validation"), t);
  const std::int64_t k = o.get_int("num-classes");
  BH_CHECK_AS(DataError, train->split().num_classes <= k && eval->split().num_classes <= k,
              "{}: the data has {} / {} categories but retinanet.num-classes is {}", root, train->split().num_classes,
              eval->split().num_classes, k);

  data::RunLoaderOptions lo;  // Note [Training and evaluation loaders]
  lo.rank = ctx.rank;
  lo.world_size = ctx.world_size;
  lo.seed = ctx.seed;
  const std::int64_t threads = o.get_int("loader-threads") > 0 ? o.get_int("loader-threads") : ctx.num_threads;
  lo.num_threads = static_cast<int>(std::max<std::int64_t>(1, threads));
  lo.device = ctx.device;
  lo.collate = coco::detection_collate;
  DataSources out;
  out.train = data::training_loader(train, batch_size, lo);
  BH_CHECK_AS(InvalidArgument, out.train->batches_per_epoch() > 0,
              "retinanet: {} training images give no full batch of {} per rank", train->size(), batch_size);
  out.eval = data::evaluation_loader(eval, o.get_int("eval-batch-size"), lo);
  out.samples_per_epoch = out.train->batches_per_epoch() * batch_size * ctx.world_size;
  out.eval_samples = eval->size();
  out.num_classes = k;
  out.eval_coco = eval->split().coco;
  return out;
}

}  // namespace benchhost::retinanet
