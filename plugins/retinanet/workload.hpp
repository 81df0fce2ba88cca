#pragma once
/// @file plugins/retinanet/workload.hpp  The retinanet workload (MLPerf key "ssd"): RetinaNet with
/// a ResNeXt50-32x4d FPN backbone on the MLPerf OpenImages export, COCO mAP by the SDK's
/// evaluator; synthetic batches for throughput; a mini on images from our generator.
///
/// Modes: ttt (evaluate() = COCO AP@[.5:.95] over the validation split, detections by the
/// reference post-processing and scaled back to each image's size), train, infer. Options are
/// declared once by describe() (prefix "retinanet.", Note [RetinaNet options]) with the MLPerf
/// rules of benchmark "ssd"; configs/retinanet/ holds mlperf.conf and mini.conf. The model is in
/// model.hpp, the data in data.hpp; anchors, matching, losses and NMS are the SDK's detection
/// toolkit (nn/detection.hpp).
///
/// Threading: the host drives one instance from one thread; the data loader has its own threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "data.hpp"
#include "model.hpp"

namespace benchhost {
class DataParallel;
}

namespace benchhost::retinanet {

/// torchvision's warmup_lr_scheduler as MLPerf's train.py uses it: during the first
/// `warmup_iters` updates lr = base * (factor * (1 - x / W) + x / W) for update x (0-based), then
/// base; no decay.
class IterationWarmupSchedule final : public optim::Schedule {
 public:
  IterationWarmupSchedule(float base_lr, double warmup_factor, std::int64_t warmup_iters);
  float lr(std::int64_t step) const override;
  std::string describe() const override;

 private:
  float base_lr_;
  double factor_;
  std::int64_t iters_;
};

/// The loss of one batch: the mean over its images of the focal loss and of the L1 box loss
/// (each divided by the image's foreground anchors), as RetinaNet.compute_loss.
struct BatchLoss {
  double classification = 0, box_regression = 0;
  double total() const { return classification + box_regression; }
  std::vector<Tensor> dcls, dbox;  ///< per level, the head outputs' gradients (scaled by dloss)
};

/// Losses and gradients of a batch's head outputs against its targets (padded rows of boxes and
/// labels beyond num_boxes are ignored). `anchors` [A, 4] for one image, levels concatenated.
BatchLoss retinanet_batch_loss(const HeadOutputs& out, const Tensor& anchors, const Tensor& boxes,
                               const Tensor& labels, const Tensor& num_boxes, float dloss);

class RetinaNetWorkload final : public Workload {
 public:
  RetinaNetWorkload();
  ~RetinaNetWorkload() override;

  static WorkloadInfo describe();
  static std::string check_support(const RunContext& ctx);

  RunInfo setup(const RunContext& ctx) override;
  void begin_epoch(std::int64_t epoch) override;
  void prepare_batch() override;
  StepResult train_step() override;
  EvalResult evaluate() override;
  StepResult infer_step() override;
  void synchronize() override;
  Hyperparameters hyperparameters() const override;
  void teardown() override;

  // ---- for tests and tools ----
  RetinaNet& model() { return *model_; }
  static RetinaNetConfig model_config(const Options& options);
  /// The anchors of one image (levels concatenated) and per level.
  const Tensor& anchors() const { return anchors_; }

 private:
  void build_model();
  void build_data();
  void build_optimizer();
  void build_data_parallel();
  void build_anchors();
  void log_hyperparameters();
  RunInfo run_info() const;
  Tensor as_model_input(const Tensor& images) const;

  RunContext ctx_;
  TrainingPrecision precision_;
  std::unique_ptr<RetinaNet> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<DataParallel> data_parallel_;
  DataSources data_;
  std::optional<data::Batch> batch_;
  Tensor infer_images_;
  Tensor anchors_;                     ///< [A, 4] of one image, P3..P7
  std::vector<Tensor> level_anchors_;  ///< per level
  std::int64_t epoch_ = -1;
  std::int64_t batch_size_ = 0;        ///< per rank
  std::int64_t steps_per_epoch_ = 0;
  Hyperparameters hyper_;
};

}  // namespace benchhost::retinanet
