#pragma once
/// @file plugins/resnet50/data.hpp  The resnet50 workload's images: Fashion-MNIST (IDX files, the
/// mini configuration), ImageNet folders (datasets/imagenet, the MLPerf reference) and the
/// synthetic source of throughput runs, and the loaders that batch them per rank.
///
/// Shapes: a training or evaluation batch holds "image" [N, C, H, W] (Fashion-MNIST, and ImageNet
/// for an NCHW model) or [N, H, W, C] (ImageNet and synthetic data for an NHWC model), f32, and
/// "label" [N] i64. as_model_input() turns either into the layout the model runs.
///
/// Threading: the loaders run their own threads; the sources are driven from the training thread.

#include <cstdint>
#include <memory>
#include <string>

#include "benchhost/data/dataset.hpp"
#include "benchhost/data/pipeline.hpp"
#include "benchhost/workload.hpp"
#include "model.hpp"

namespace benchhost::resnet {

/// A run's training and evaluation batches.
struct DataSources {
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> eval;  ///< null for synthetic data (nothing to evaluate)
  std::int64_t samples_per_epoch = 0;       ///< training samples of one epoch over all ranks
  std::int64_t eval_samples = 0;            ///< the whole evaluation set, over all ranks
};

/// The sources the run's options describe (resnet50.dataset, data-dir, image-size, train-samples,
/// eval-samples, eval-batch-size, loader-threads): synthetic data for --synthetic, for
/// resnet50.dataset = synthetic and in inference mode, else the real dataset behind loaders.
/// `batch_size` is the per-rank training batch. Throws InvalidArgument or DataError naming the
/// option or file at fault.
DataSources build_data_sources(const RunContext& ctx, const ResNetConfig& model, std::int64_t batch_size);

/// The same batch every step (Note [Synthetic data] in data.cpp): per rank `batch_size` images of
/// image_size x image_size in the model's layout and channels, uniform in [-2, 2], and labels in
/// [0, classes); 100 batches make an epoch. No evaluation set.
DataSources synthetic_sources(const RunContext& ctx, const ResNetConfig& model, std::int64_t image_size,
                              std::int64_t batch_size);

/// The training and evaluation sets of a real dataset.
struct ImageDatasets {
  std::shared_ptr<const data::Dataset> train, eval;
};

/// Fashion-MNIST's four IDX files in `dir` (28x28 grey, [1, 28, 28] per image, normalised with
/// the training set's mean and std). Throws DataError naming the missing file and the package,
/// or the file whose images are not image_size x image_size or whose labels are outside
/// [0, num_classes).
ImageDatasets fashion_mnist_datasets(const std::string& dir, const ResNetConfig& model, std::int64_t image_size);

/// An ImageNet folder (train/, val/; datasets/imagenet/imagenet_folder.hpp): random-resized-crop
/// + flip to image_size for training, resize to image_size * 256/224 + centre crop for
/// evaluation, HWC for an NHWC model. Throws InvalidArgument when the folder has more classes
/// than the model.
ImageDatasets imagenet_datasets(const std::string& root, std::int64_t image_size, const ResNetConfig& model);

/// The first `n` samples of `dataset` (n <= 0 or n >= its size: the whole of it).
std::shared_ptr<const data::Dataset> first_n(std::shared_ptr<const data::Dataset> dataset, std::int64_t n);

/// Images as the model wants them. Datasets deliver CHW samples ([N, C, H, W]) unless asked for
/// HWC; an NHWC model gets [N, H, W, C] (a view when C is 1, a transposing copy otherwise).
Tensor as_model_input(const Tensor& images, const ResNetConfig& model);

}  // namespace benchhost::resnet
