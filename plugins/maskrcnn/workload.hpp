#pragma once
/// @file plugins/maskrcnn/workload.hpp  The maskrcnn workload (MLPerf key "maskrcnn"): Mask R-CNN
/// R-50-FPN on COCO 2017, box and mask COCO mAP by the SDK's evaluator; synthetic batches for
/// throughput; a mini on polygon-masked shapes from our generator.
///
/// Modes: ttt (evaluate() = COCO AP@[.5:.95] of boxes and of masks over val2017, detections by
/// the reference post-processing, masks pasted at each image's own size; MLLOG's eval_accuracy is
/// {"BBOX": b, "SEGM": s} and the run stops when both reach their targets), train, infer.
/// Options are declared once by describe() (prefix "maskrcnn.", Note [Mask R-CNN options]) with
/// the MLPerf rules of benchmark "maskrcnn"; configs/maskrcnn/ holds mlperf.conf and mini.conf.
/// The model is model.hpp, the data data.hpp, the targets and losses targets.hpp.
///
/// Threading: the host drives one instance from one thread; the data loader has its own threads.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchhost/metrics/coco_map.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "data.hpp"
#include "model.hpp"
#include "targets.hpp"

namespace benchhost {
class DataParallel;
}

namespace benchhost::maskrcnn {

/// maskrcnn_benchmark's WarmupMultiStepLR (linear warm-up): lr(x) = base * w(x) * gamma^(number
/// of milestones <= x), w(x) = factor * (1 - x / W) + x / W for x < W, else 1. `scale`
/// multiplies everything (2 for the biases: BIAS_LR_FACTOR).
class WarmupMultiStepSchedule final : public optim::Schedule {
 public:
  WarmupMultiStepSchedule(float base_lr, double warmup_factor, std::int64_t warmup_iters,
                          std::vector<std::int64_t> milestones, double gamma, double scale = 1.0);
  float lr(std::int64_t step) const override;
  std::string describe() const override;

 private:
  float base_lr_;
  double factor_;
  std::int64_t iters_;
  std::vector<std::int64_t> milestones_;
  double gamma_, scale_;
};

/// The learning rate and decay steps of a run at `global_batch` images (Note [Mask R-CNN LR
/// scaling], workload.cpp): maskrcnn.lr and maskrcnn.decay-steps scaled from
/// maskrcnn.lr-reference-batch.
struct ScaledSolver {
  double lr = 0;
  std::vector<std::int64_t> decay_steps;
};
ScaledSolver scaled_solver(const Options& options, std::int64_t global_batch);

/// The losses of one training step (Note [Mask R-CNN losses]).
struct StepLosses {
  double objectness = 0, rpn_box = 0, classifier = 0, box_reg = 0, mask = 0;
  double total() const { return objectness + rpn_box + classifier + box_reg + mask; }
};

class MaskRcnnWorkload final : public Workload {
 public:
  MaskRcnnWorkload();
  ~MaskRcnnWorkload() override;

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
  MaskRcnn& model() { return *model_; }
  static MaskRcnnConfig model_config(const Options& options);
  const StepLosses& last_losses() const { return last_; }
  /// The anchors of every level for feature grids (H_l, W_l) of P2..P6 (legacy generator).
  std::vector<Tensor> anchors_for(const std::vector<std::pair<std::int64_t, std::int64_t>>& grids);
  /// The box and mask mAP of the last evaluate().
  double last_bbox_map() const { return last_bbox_; }
  double last_segm_map() const { return last_segm_; }

 private:
  void build_model();
  void build_data();
  void build_optimizer();
  void build_data_parallel();
  void log_hyperparameters();
  RunInfo run_info() const;

  RunContext ctx_;
  TrainingPrecision precision_;
  std::unique_ptr<MaskRcnn> model_;
  std::unique_ptr<optim::Optimizer> optimizer_, bias_optimizer_;
  std::unique_ptr<optim::Schedule> schedule_, bias_schedule_;
  std::unique_ptr<DataParallel> data_parallel_;
  DataSources data_;
  std::optional<data::Batch> batch_;
  Tensor infer_images_;
  std::map<std::vector<std::pair<std::int64_t, std::int64_t>>, std::vector<Tensor>> anchor_cache_;
  /// The evaluation's ground truth per image id, masks rasterised once (evaluate()).
  std::unordered_map<std::int64_t, std::vector<metrics::CocoGroundTruth>> eval_ground_truth_;
  std::int64_t epoch_ = -1;
  std::int64_t step_ = 0;
  std::int64_t batch_size_ = 0;  ///< per rank
  StepLosses last_;
  double last_bbox_ = 0, last_segm_ = 0;
  Hyperparameters hyper_;
};

}  // namespace benchhost::maskrcnn
