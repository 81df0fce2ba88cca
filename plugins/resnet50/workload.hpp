#pragma once
/// @file plugins/resnet50/workload.hpp  The resnet50 workload (MLPerf key "resnet"): ResNet-50
/// v1.5 image classification on ImageNet folders, synthetic 224x224 data for throughput, and a
/// width/depth-scaled mini configuration on Fashion-MNIST (IDX files).
///
/// Modes: ttt (evaluate() = top-1 over the whole evaluation set), train (throughput; synthetic
/// data when RunContext::synthetic_data), infer (forward only in eval mode, one batch per step).
/// Options are declared once by describe() (prefix "resnet50.", Note [ResNet options]), with the
/// MLPerf rules of benchmark "resnet"; configs/resnet50/ holds mlperf.conf (LARS), sgd.conf (SGD +
/// momentum) and mini.conf. The model is in model.hpp, the data in data.hpp.
///
/// Threading: the host drives one instance from one thread; the data loader has its own threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/data/dataset.hpp"
#include "benchhost/data/pipeline.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "model.hpp"

namespace benchhost {
class DataParallel;
}

namespace benchhost::resnet {

class ResNetWorkload final : public Workload {
 public:
  ResNetWorkload();
  ~ResNetWorkload() override;

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
  ResNet& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  /// The model configuration the options describe.
  static ResNetConfig model_config(const Options& options);

 private:
  // setup()'s steps, in order; each reads ctx_ and what the steps before it built.
  void build_model();
  void read_batch_size();
  void build_data();
  void build_optimizer();
  void build_data_parallel();
  void log_hyperparameters();
  RunInfo run_info() const;

  RunContext ctx_;
  TrainingPrecision precision_;
  std::unique_ptr<ResNet> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<DataParallel> data_parallel_;
  std::unique_ptr<data::BatchSource> train_source_;
  std::unique_ptr<data::BatchSource> eval_source_;
  std::optional<data::Batch> batch_;
  Tensor infer_images_;
  std::int64_t epoch_ = -1;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t batch_size_ = 0;         ///< per rank
  std::int64_t samples_per_epoch_ = 0;  ///< over all ranks
  std::int64_t eval_samples_ = 0;
  std::int64_t decay_steps_ = 0;        ///< of the learning-rate schedule, after the warm-up
  float label_smoothing_ = 0;
  Hyperparameters hyper_;
};

}  // namespace benchhost::resnet
