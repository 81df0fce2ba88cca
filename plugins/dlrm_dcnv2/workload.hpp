#pragma once
/// @file plugins/dlrm_dcnv2/workload.hpp  The dlrm_dcnv2 Workload (MLPerf key dlrm_dcnv2).
///
/// Data (data.hpp): MLPerf's Criteo multi-hot layout (datasets/criteo/criteo.hpp), read batch by
/// batch in file order (the reference does not reshuffle the pre-shuffled days), or a synthetic
/// source of the same shapes (--synthetic). With `generate = true` a missing data directory is
/// first filled by the planted-teacher generator (datasets/criteo/synthetic.hpp) with the gen-*
/// options.
///
/// Optimiser: Adagrad for every parameter with the MLPerf settings (epsilon 1e-10, initial
/// accumulator 0, no decay, no warm-up): the tables' update touches only the rows of the batch.
///
/// Note [DLRM parallelism]
/// Each rank reads its slice of every global batch, and the MLPs and cross layers are data
/// parallel: their gradients are reduced with one flat allreduce. The tables are either
///   - replicated (embedding-sharding = replicated, the default): each table's touched rows are
///     unioned across ranks (allgather of row ids) and their gradient rows averaged with one
///     allreduce, so every replica applies the same sparse Adagrad update; or
///   - sharded table-wise (embedding-sharding = table): each table lives on one rank and is looked
///     up and trained through all-to-alls (Note [Table-wise sharding] in sharding.hpp), so a rank
///     holds only its share of the tables' memory; or
///   - sharded row-wise (embedding-sharding = row): every table split by rows over all ranks
///     (Note [Row-wise sharding]), for tables larger than one rank's memory.
///
/// Devices: the model lives on ctx.device (cpu or cuda:N); batches are read on the CPU and copied
/// to it each step; collectives move buffers on the communicator's device.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/metrics/auc.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/precision.hpp"
#include "benchhost/workload.hpp"
#include "criteo.hpp"
#include "data.hpp"
#include "model.hpp"
#include "sharding.hpp"

namespace dlrm {

class DlrmWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe();
  static std::string check_support(const benchhost::RunContext& ctx);

  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override;
  void begin_epoch(std::int64_t epoch) override;
  void prepare_batch() override;
  benchhost::StepResult train_step() override;
  benchhost::EvalResult evaluate() override;
  benchhost::StepResult infer_step() override;
  benchhost::Hyperparameters hyperparameters() const override;
  void synchronize() override;
  void teardown() override;

  // ---- for tests and tools ----
  DlrmDcnV2& model() { return *model_; }
  std::int64_t local_batch() const { return local_batch_; }
  double last_teacher_auc() const { return data_.teacher_auc; }  ///< 0 unless data was generated/found
  Sharding sharding() const { return sharding_; }

 private:
  // The steps of setup(), in order.
  void read_options();
  void choose_sharding();
  void check_memory() const;
  void build_data();
  void build_model();
  void build_optimizer();
  benchhost::RunInfo run_info() const;

  void read_train_batch();
  const benchhost::criteo::Batch& next_batch();
  /// Logits on ctx.device for this rank's rows (undefined when it has none in a sharded round);
  /// batch_sizes: every rank's rows in this call (used with sharded tables).
  benchhost::Tensor logits_for(const benchhost::Tensor& dense, const std::vector<benchhost::Tensor>& sparse,
                               const std::vector<std::int64_t>& batch_sizes);
  void reduce_gradients();
  void reduce_dense_gradients();
  void reduce_table_gradients();

  /// Every rank's share of one evaluation (samples), where it starts in the validation set, and
  /// the rounds of at most `per_round` samples it is evaluated in.
  struct EvalPlan {
    std::vector<std::int64_t> share, first;
    std::int64_t per_round = 0, rounds = 0;
  };
  EvalPlan plan_evaluation() const;
  /// Adds this rank's samples of `round` to `auc`; false when this rank is done and need not take
  /// part in further rounds.
  bool evaluate_round(const EvalPlan& plan, std::int64_t round, benchhost::metrics::AucAccumulator& auc);

  benchhost::RunContext ctx_;
  benchhost::TrainingPrecision precision_;
  DlrmConfig config_;
  std::unique_ptr<DlrmDcnV2> model_;
  Sharding sharding_ = Sharding::replicated;
  bool sharded_ = false;  ///< tables split over more than one rank
  std::unique_ptr<ShardedEmbeddings> exchange_;  ///< set when tables are sharded over ranks
  std::unique_ptr<benchhost::optim::Optimizer> optimizer_;
  DlrmData data_;
  benchhost::criteo::Batch batch_, eval_batch_;
  bool batch_ready_ = false;
  std::int64_t global_batch_ = 0, local_batch_ = 0, eval_batch_size_ = 0;
  std::int64_t cursor_ = 0;  // global sample index of the next training batch
  std::int64_t steps_ = 0, epoch_ = 0;
  double learning_rate_ = 0;  ///< as configured; logged as written, applied as f32
  std::int64_t evals_per_epoch_ = 0;
  std::int64_t max_epochs_ = 0;
  double target_ = 0;  ///< validation AUC target (dlrm_dcnv2.target)
};

}  // namespace dlrm
