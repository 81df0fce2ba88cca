#pragma once
/// @file plugins/rnnt/workload.hpp  The rnnt workload (MLPerf key "rnnt"): RNN-T speech
/// recognition on LibriSpeech as MLPerf's preparation leaves it, synthetic batches for
/// throughput, and a mini configuration on espeak-ng speech (datasets/librispeech/synthetic.hpp).
///
/// Modes: ttt (evaluate() = corpus WER of greedy decoding on the evaluation set with the EMA
/// weights), train (throughput), infer (greedy decoding of one synthetic batch). Options are
/// declared once by describe() (prefix "rnnt.", Note [RNN-T options]) with the MLPerf rules of
/// benchmark "rnnt"; configs/rnnt/ holds mlperf.conf and mini.conf. The model is in model.hpp,
/// the data in data.hpp.
///
/// Note [RNN-T training step]
/// One step: the loader's batch (per rank, rnnt.batch-size or -b) is cut into
/// grad-accumulation micro-batches; each runs features -> model -> transducer loss ('mean' over
/// its utterances, divided by the number of micro-batches, as train.py) -> backward; then data
/// parallelism reduces the gradients, global-norm clipping (rnnt.clip-norm, inside apex's
/// FusedLAMB in the reference) and LAMB with the reference's LR policy update the weights, and
/// the EMA (rnnt.ema) folds them in. The returned loss is the step's sum of micro-batch losses.
///
/// Threading: the host drives one instance from one thread; the data loader has its own threads.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/data/pipeline.hpp"
#include "benchhost/optim/ema.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "data.hpp"
#include "model.hpp"

namespace benchhost {
class DataParallel;
}

namespace benchhost::rnnt {

/// The reference's LR policy (common/optimizers.py lr_policy, policy 'exponential'), with the
/// reference's 1-based step s = step + 1 and epoch e = step / steps_per_epoch + 1:
///   s < W: a = (s + 1) / (W + 1) with W = warmup_epochs * steps_per_epoch;
///   s < W + H: a = 1 (H = hold_epochs * steps_per_epoch);  else a = gamma^(e - warmup - hold);
///   lr = max(a * base_lr, min_lr).
class RnntLrSchedule final : public optim::Schedule {
 public:
  RnntLrSchedule(float base_lr, double warmup_epochs, double hold_epochs, double gamma, float min_lr,
                 std::int64_t steps_per_epoch);
  float lr(std::int64_t step) const override;
  std::string describe() const override;

 private:
  float base_lr_, min_lr_;
  double warmup_epochs_, hold_epochs_, gamma_;
  std::int64_t steps_per_epoch_;
};

/// A batch as the model takes it (Note [RNN-T batches] of data.hpp, time-major on the device).
struct ModelBatch {
  Tensor features;       ///< f32 [T, B, F]
  Tensor labels;         ///< i32 [B, U]
  Tensor frame_lengths;  ///< i32 [B], after StackTime
  Tensor label_lengths;  ///< i32 [B]
  std::vector<std::int64_t> feature_lengths;  ///< host copy, before StackTime
};

class RnntWorkload final : public Workload {
 public:
  RnntWorkload();
  ~RnntWorkload() override;

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
  Rnnt& model() { return *model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  /// The model configuration the options describe, for a tokenizer of `vocab_size` pieces.
  static RnntConfig model_config(const Options& options, std::int64_t vocab_size);
  /// A loader batch (or sub-batch) as the model takes it.
  ModelBatch to_model_batch(const data::Batch& batch, std::int64_t begin, std::int64_t end) const;
  /// The transducer loss of one batch and its gradients accumulated into the parameters (no
  /// update; the peer test compares both).
  double loss_and_gradients(const ModelBatch& batch, double scale = 1.0);

 private:
  void build_model(std::int64_t vocab_size);
  void build_optimizer();
  void build_data_parallel();
  void log_hyperparameters();
  RunInfo run_info() const;

  RunContext ctx_;
  TrainingPrecision precision_;
  std::unique_ptr<Rnnt> model_;
  std::unique_ptr<optim::Lamb> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  std::unique_ptr<optim::Ema> ema_;
  std::unique_ptr<DataParallel> data_parallel_;
  DataSources data_;
  std::optional<data::Batch> batch_;
  std::optional<data::Batch> infer_batch_;
  std::int64_t epoch_ = -1;
  std::int64_t batch_size_ = 0;  ///< per rank, per optimizer step
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t step_ = 0;
  Hyperparameters hyper_;
};

}  // namespace benchhost::rnnt
