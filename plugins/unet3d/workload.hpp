#pragma once
/// @file plugins/unet3d/workload.hpp  The unet3d workload (MLPerf key "unet3d"): 3D U-Net
/// segmentation of kidneys and tumours on KiTS19 as MLPerf's preprocessing leaves it, synthetic
/// patches for throughput, and a mini configuration on volumes from our generator with a planted
/// truth (datasets/kits19/synthetic.hpp).
///
/// Modes: ttt (evaluate() = mean DICE over the evaluation cases by the reference's sliding
/// window, from the start epoch on), train (throughput on random patches of the training cases,
/// or synthetic patches), infer (forward passes on one batch of patches). Options are declared
/// once by describe() (prefix "unet3d.", Note [3D U-Net options]) with the MLPerf rules of
/// benchmark "unet3d"; configs/unet3d/ holds mlperf.conf and mini.conf. The model is in
/// model.hpp, the data in data.hpp.
///
/// Threading: the host drives one instance from one thread; the data loader has its own threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/data/pipeline.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "data.hpp"
#include "model.hpp"

namespace benchhost {
class DataParallel;
}

namespace benchhost::unet3d {

/// The reference's learning rate (runtime/training.py): constant within an epoch; during the
/// first warmup_epochs epochs (1-based e <= W) init_lr + (base_lr - init_lr) * e / W, then
/// base_lr times decay_factor once for each decay epoch m already behind (m < e): the reference's
/// MultiStepLR, stepped after every epoch. A decay at the end of a warm-up epoch other than the
/// last is lost (the next warm-up epoch sets the rate again), so only m > W - 1 count. The MLPerf
/// runs decay nothing (lr_decay_epochs is empty).
class EpochWarmupSchedule final : public optim::Schedule {
 public:
  EpochWarmupSchedule(float init_lr, float base_lr, double warmup_epochs, std::int64_t steps_per_epoch,
                      std::vector<std::int64_t> decay_epochs = {}, double decay_factor = 1.0);
  float lr(std::int64_t step) const override;
  std::string describe() const override;

 private:
  float init_lr_, base_lr_;
  double warmup_epochs_;
  std::int64_t steps_per_epoch_;
  std::vector<std::int64_t> decay_epochs_;
  double decay_factor_;
};

class UNet3dWorkload final : public Workload {
 public:
  UNet3dWorkload();
  ~UNet3dWorkload() override;

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
  UNet3d& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  static UNet3dConfig model_config(const Options& options);
  /// The logits of the model for a batch of patches [B, 1, r, r, r] (f32, CPU), as f32 NCDHW on
  /// the CPU: the sliding window's model call.
  Tensor logits_ncdhw(const Tensor& patches);
  /// Loss of one batch without an update (for the peer test).
  double loss_of(const Tensor& images, const Tensor& labels);

 private:
  void build_model();
  void read_batch_size();
  void build_data();
  void build_optimizer();
  void build_data_parallel();
  void log_hyperparameters();
  RunInfo run_info() const;
  Tensor as_model_input(const Tensor& images) const;
  Tensor as_labels(const Tensor& labels) const;

  RunContext ctx_;
  TrainingPrecision precision_;
  std::unique_ptr<UNet3d> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<DataParallel> data_parallel_;
  DataSources data_;
  std::optional<data::Batch> batch_;
  Tensor infer_images_;
  std::int64_t epoch_ = -1;
  std::int64_t batch_size_ = 0;  ///< per rank
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t start_eval_epoch_ = 0, eval_every_epochs_ = 1;
  Hyperparameters hyper_;
};

}  // namespace benchhost::unet3d
