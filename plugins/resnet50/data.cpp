// The resnet50 workload's data: its datasets, the synthetic source and the per-rank loaders. See
// data.hpp; the readers live in the SDK (IDX) and in datasets/imagenet.

#include "data.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "benchhost/data/idx.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/nn/ops.hpp"
#include "imagenet_folder.hpp"

namespace benchhost::resnet {
namespace fs = std::filesystem;

namespace {

/// The real dataset resnet50.dataset names, cut to resnet50.train-samples / eval-samples.
ImageDatasets real_datasets(const Options& o, const ResNetConfig& model) {
  ImageDatasets ds;
  if (o.get_string("dataset") == "fashion-mnist") {
    std::string dir = o.get_string("data-dir");
    if (dir.empty()) dir = "/usr/share/datasets/fashion-mnist";
    ds = fashion_mnist_datasets(dir, model, o.get_int("image-size"));
  } else {
    const std::string root = o.get_string("data-dir");
    BH_CHECK_AS(InvalidArgument, !root.empty(),
                "resnet50.dataset = imagenet needs resnet50.data-dir (a folder with train/ and "
                "val/; see datasets/imagenet/imagenet_folder.hpp), or use --synthetic");
    ds = imagenet_datasets(root, o.get_int("image-size"), model);
  }
  ds.train = first_n(ds.train, o.get_int("train-samples"));
  ds.eval = first_n(ds.eval, o.get_int("eval-samples"));
  return ds;
}

/// Shuffled, rank-sharded training batches (the tail that does not fill a batch on every rank
/// is dropped) and the whole evaluation set in order, unevenly shared by the ranks.
DataSources loader_sources(const ImageDatasets& ds, const RunContext& ctx, std::int64_t batch_size,
                           std::int64_t eval_batch_size, int loader_threads) {
  data::RunLoaderOptions lo;  // Note [Training and evaluation loaders]
  lo.rank = ctx.rank;
  lo.world_size = ctx.world_size;
  lo.seed = ctx.seed;
  lo.num_threads = loader_threads;
  lo.device = ctx.device;  // pinned host memory and a side-stream copy on CUDA
  DataSources out;
  out.train = data::training_loader(ds.train, batch_size, lo);
  BH_CHECK_AS(InvalidArgument, out.train->batches_per_epoch() > 0,
              "resnet50: {} training samples give no full batch of {} per rank", ds.train->size(), batch_size);
  out.eval = data::evaluation_loader(ds.eval, eval_batch_size, lo);
  out.eval_samples = ds.eval->size();
  out.samples_per_epoch = out.train->batches_per_epoch() * batch_size * ctx.world_size;
  return out;
}

}  // namespace

DataSources build_data_sources(const RunContext& ctx, const ResNetConfig& model, std::int64_t batch_size) {
  const Options& o = ctx.options;
  if (ctx.synthetic_data || o.get_string("dataset") == "synthetic" || ctx.mode == "infer")
    return synthetic_sources(ctx, model, o.get_int("image-size"), batch_size);
  const std::int64_t threads = o.get_int("loader-threads") > 0 ? o.get_int("loader-threads") : ctx.num_threads;
  const int loader_threads = static_cast<int>(std::max<std::int64_t>(1, threads));
  return loader_sources(real_datasets(o, model), ctx, batch_size, o.get_int("eval-batch-size"), loader_threads);
}

DataSources synthetic_sources(const RunContext& ctx, const ResNetConfig& model, std::int64_t image_size,
                              std::int64_t batch_size) {
  // Note [Synthetic data]: the same batch every step, like DeepLearningExamples' --data-backend
  // synthetic: measures the model, not the input pipeline.
  const std::int64_t batches = 100;
  const Shape image_shape = model.layout == nn::ImageLayout::nhwc
                                ? Shape{image_size, image_size, model.in_channels}
                                : Shape{model.in_channels, image_size, image_size};
  DataSources out;
  out.train = std::make_unique<data::SyntheticSource>(
      std::vector<data::FieldSpec>{{"image", image_shape, DType::f32, -2.0, 2.0},
                                   {"label", {}, DType::i64, 0.0, static_cast<double>(model.num_classes)}},
      batch_size, batches, ctx.device, ctx.seed);
  out.samples_per_epoch = batches * batch_size * ctx.world_size;
  return out;
}

ImageDatasets fashion_mnist_datasets(const std::string& dir, const ResNetConfig& model, std::int64_t image_size) {
  auto idx = [&](const char* images, const char* labels) {
    const fs::path pi = fs::path(dir) / images, pl = fs::path(dir) / labels;
    if (!fs::exists(pi) || !fs::exists(pl))
      BH_THROW(DataError,
               "resnet50: Fashion-MNIST files {} / {} not found (apt-get install "
               "dataset-fashion-mnist, or set resnet50.data-dir)",
               pi.string(), pl.string());
    // Fashion-MNIST pixel mean/std over the training set.
    auto ds = std::make_shared<data::IdxClassificationDataset>(pi.string(), pl.string(), 0.2860f, 0.3530f);
    // Images of another shape (an IDX header saying 1x784 for 28x28) or labels the classifier has
    // no output for are data errors naming the file, not a run that trains on nonsense.
    const Tensor& im = ds->images();
    BH_CHECK_AS(DataError, im.size(1) == image_size && im.size(2) == image_size,
                "{}: images are {}x{} but resnet50.image-size is {}", pi.string(), im.size(1), im.size(2), image_size);
    const std::int64_t* l = ds->labels().data<std::int64_t>();
    for (std::int64_t i = 0; i < ds->labels().numel(); ++i)
      BH_CHECK_AS(DataError, l[i] >= 0 && l[i] < model.num_classes,
                  "{}: label {} of image {} is outside [0, {}) (resnet50.num-classes)", pl.string(), l[i], i,
                  model.num_classes);
    return ds;
  };
  return {idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
          idx("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")};
}

ImageDatasets imagenet_datasets(const std::string& root, std::int64_t image_size, const ResNetConfig& model) {
  const imagenet::ImageList tr = imagenet::scan_train(root);
  const imagenet::ImageList va = imagenet::scan_val(root, tr.classes);
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(tr.classes.size()) <= model.num_classes,
              "resnet50: {} has {} classes but the model has resnet50.num-classes = {}", root, tr.classes.size(),
              model.num_classes);
  data::ImageTransform t;
  t.out_height = t.out_width = static_cast<int>(image_size);
  t.layout = model.layout == nn::ImageLayout::nhwc ? data::Layout::hwc : data::Layout::chw;
  t.train = true;
  ImageDatasets ds;
  ds.train = imagenet::make_dataset(tr, t);
  t.train = false;
  t.resize_short = static_cast<int>(std::lround(image_size * 256.0 / 224.0));
  ds.eval = imagenet::make_dataset(va, t);
  return ds;
}

/// A dataset that yields the first `n` samples of another: used to cap the training or
/// evaluation set size without touching the dataset.
std::shared_ptr<const data::Dataset> first_n(std::shared_ptr<const data::Dataset> ds, std::int64_t n) {
  if (n <= 0 || n >= ds->size()) return ds;
  struct Prefix final : data::Dataset {
    std::shared_ptr<const data::Dataset> inner;
    std::int64_t n;
    std::int64_t size() const override { return n; }
    data::Sample get(const data::SampleContext& ctx) const override { return inner->get(ctx); }
    std::string source(std::int64_t i) const override { return inner->source(i); }
  };
  auto p = std::make_shared<Prefix>();
  p->inner = std::move(ds);
  p->n = n;
  return p;
}

Tensor as_model_input(const Tensor& images, const ResNetConfig& c) {
  BH_CHECK_AS(DataError, images.dim() == 4, "resnet50: expected a batch of images [N, ...], got {}",
              shape_str(images.shape()));
  if (c.layout == nn::ImageLayout::nhwc && images.size(3) != c.in_channels && images.size(1) == c.in_channels) {
    if (c.in_channels == 1) return images.contiguous().view({images.size(0), images.size(2), images.size(3), 1});
    return nn::permute_copy(images, {0, 2, 3, 1});  // the permute op: any device
  }
  return images;
}

}  // namespace benchhost::resnet
