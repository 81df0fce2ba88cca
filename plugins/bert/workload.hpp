#pragma once
/// @file plugins/bert/workload.hpp  The `bert` workload: MLPerf BERT-large pre-training
/// (masked LM accuracy 0.720 on MLPerf's data) and its mini configuration on local English text.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchhost/metrics/accuracy.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "data.hpp"
#include "model.hpp"

namespace benchhost::bert {

class BertWorkload : public Workload {
 public:
  static WorkloadInfo describe();
  static std::string check_support(const RunContext& ctx);

  RunInfo setup(const RunContext& ctx) override;
  void begin_epoch(std::int64_t epoch) override;
  StepResult train_step() override;
  EvalResult evaluate() override;
  StepResult infer_step() override;
  void synchronize() override;
  Hyperparameters hyperparameters() const override;
  void teardown() override;

  /// For tests and tools: the model, and the accuracy of always predicting the most frequent
  /// masked token of the training set, measured on the evaluated samples (NaN for synthetic data).
  BertModel& model() { return *model_; }
  double majority_baseline() const { return majority_baseline_; }
  /// The left-neighbour bigram predictor's accuracy on the same samples (masked_lm_baselines).
  double bigram_baseline() const { return bigram_baseline_; }
  double metric_target() const { return target_; }
  /// Next-sentence-prediction accuracy of the last evaluate() on the evaluated samples.
  double nsp_accuracy() const { return nsp_accuracy_; }
  /// MLPerf's evaluation interval for a global batch: FLOOR(0.05*(230.23*GBS+3e6), 25000).
  static std::int64_t mlperf_eval_interval(std::int64_t global_batch);

 private:
  // The steps of setup(), in order.
  void read_run_options();
  void build_data();
  void measure_baselines();
  void build_model();
  void build_optimizer();
  void log_hyperparameters();
  RunInfo run_info() const;

  RunContext ctx_;
  TrainingPrecision precision_;
  BertConfig cfg_;
  std::unique_ptr<BertModel> model_;
  std::unique_ptr<optim::Lamb> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  BertData data_;
  std::vector<std::int64_t> order_, eval_order_;
  std::int64_t batch_ = 0, eval_batch_ = 0, cursor_ = 0, step_ = 0, max_per_row_ = 3;
  std::int64_t max_predictions_ = 0, eval_limit_ = 0;
  metrics::TopKAccuracy train_nsp_{1};  ///< next sentence, on the training batches since the last evaluate()
  bool synthetic_ = false, packing_ = false;
  float clip_norm_ = 0;
  double target_ = 0.72, majority_baseline_ = 0, bigram_baseline_ = 0, nsp_accuracy_ = 0;
  Hyperparameters hyper_;
};

}  // namespace benchhost::bert
