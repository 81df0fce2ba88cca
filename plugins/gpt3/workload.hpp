#pragma once
/// @file plugins/gpt3/workload.hpp  The `gpt3` workload: MLPerf GPT-3 175B (validation log
/// perplexity 2.69 on C4), the GPT-3 paper's family of sizes, and a mini configuration on local
/// English text. Configurations that cannot fit the device are refused in setup(), before any
/// allocation, with the memory they need and the parallelism they would take (model_costs.hpp).

#include <memory>
#include <string>
#include <vector>

#include "benchhost/optim/optimizer.hpp"
#include "benchhost/optim/schedule.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "data.hpp"
#include "model.hpp"

namespace benchhost::gpt3 {

class GptWorkload : public Workload {
 public:
  static WorkloadInfo describe();
  static std::string check_support(const RunContext& ctx);
  /// The model shape the options describe (ffn 0 = 4 x hidden, max-positions 0 = seq-len).
  static lm::ModelShape shape_from_options(const Options& o);

  RunInfo setup(const RunContext& ctx) override;
  void begin_epoch(std::int64_t epoch) override;
  StepResult train_step() override;
  EvalResult evaluate() override;
  StepResult infer_step() override;
  void synchronize() override;
  Hyperparameters hyperparameters() const override;
  void teardown() override;

  GptModel& model() { return *model_; }
  /// Cross-entropy (nats/token) on the validation windows of a unigram model fitted to the
  /// training tokens with add-one smoothing (NaN for synthetic data).
  double unigram_baseline() const { return unigram_baseline_; }
  double metric_target() const { return target_; }

 private:
  // The steps of setup(), in order.
  void read_run_options();
  void refuse_what_cannot_fit() const;
  void build_data();
  void measure_baseline();
  void build_model();
  void build_optimizer();
  void log_hyperparameters();
  RunInfo run_info() const;

  RunContext ctx_;
  TrainingPrecision precision_;
  GptConfig cfg_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::Schedule> schedule_;
  TokenStreams data_;
  std::vector<std::int64_t> order_;  ///< this epoch's order of the training windows
  std::int64_t batch_ = 0, eval_batch_ = 0, cursor_ = 0, step_ = 0, eval_windows_ = 0;
  bool synthetic_ = false;
  float clip_norm_ = 0;
  double target_ = 2.69, unigram_baseline_ = 0;
  Hyperparameters hyper_;
};

}  // namespace benchhost::gpt3
