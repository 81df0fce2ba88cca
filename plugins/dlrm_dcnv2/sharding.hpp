#pragma once
/// @file plugins/dlrm_dcnv2/sharding.hpp  Embedding tables split over the processes of a run.
///
/// Note [Table-wise sharding]
/// With `--dlrm_dcnv2.embedding-sharding table` each table lives on exactly one rank (model
/// parallel), while the MLPs and cross layers stay replicated (data parallel), as in the MLPerf
/// submissions' hybrid parallelism. Placement (place_tables): largest table first onto the rank
/// holding the fewest bytes so far (ties: the lower rank), so every rank computes the same
/// placement from the table sizes alone.
///
/// One training step, rank q holding the samples of its slice of the global batch (bs[q] rows):
///   1. ids all-to-all: q sends the bags of feature k ([bs[q], hotness_k] ids) to owner(k);
///      the owner assembles [sum bs, hotness_k] in rank order = the global batch's order.
///   2. the owner pools its tables over the whole global batch;
///   3. pooled all-to-all: the owner sends each rank q its rows ([bs[q], dim] per table), so q
///      holds every feature's pooled embedding for its own samples and runs interact();
///   4. backward, the reverse of 3: q sends the gradient of each pooled embedding to its owner,
///      which accumulates the table's sparse gradient over the global batch. The owner alone
///      updates the table, so no table gradient is all-reduced.
/// Gradient scale: every rank's loss is the mean over its own samples; the plugin scales dlogits
/// by 1 / world and sums the dense gradients, so dense and table gradients are both the
/// global-batch mean, exactly as with replicated tables (tests/dlrm: two ranks match one).
/// Counts: each rank's batch size is known to every rank (equal in training, chunk_count in
/// evaluation), and hotness is fixed per feature, so no counts are exchanged; a rank with no
/// samples in an evaluation round still takes part in the all-to-alls.
/// Buffers move on the communicator's device (host memory for mpi, the GPU for nccl).
///
/// Note [Row-wise sharding]
/// With `--dlrm_dcnv2.embedding-sharding row` every table is split by rows over all ranks (rank r
/// holds rows chunk_offset(R, P, r) .. + chunk_count(R, P, r), the numpy.array_split ranges of
/// comm/communicator.hpp), so a table larger than one rank's memory trains too. One step:
///   1. each rank sorts its samples' ids by the rank holding their row and sends each holder
///      (row - first row held, global sample index) pairs: one all-to-all of the pair counts
///      (F per destination), then one of the pairs;
///   2. each holder pools, per table, the ids it received into partial sums for every sample of
///      the global batch (ragged bags; a sample none of whose ids fall in the range gets zeros);
///   3. partial all-to-all: each holder sends each rank the partial sums of that rank's samples,
///      which adds the P partials in rank order (a fixed order: deterministic);
///   4. backward: every rank's pooled gradients go to every holder (allgather); each holder
///      accumulates its rows' sparse gradients from the bags of step 2.
/// Sum pooling only (a mean over a bag split between holders would need the bag's full size).
/// The same 1 / world scaling of dlogits as with table-wise sharding keeps the gradients equal
/// to the global-batch mean. Partial sums add in a different order than one process's bag sums,
/// so results match one process to rounding, not bit for bit.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "benchhost/comm/communicator.hpp"
#include "model.hpp"

namespace dlrm {

enum class Sharding : std::uint8_t { replicated, table, row };
/// "replicated" | "table" | "row"; InvalidArgument naming the choices otherwise.
Sharding parse_sharding(const std::string& name);
const char* sharding_name(Sharding s) noexcept;

/// Owner rank of each table (Note [Table-wise sharding]); rows stand for bytes, since every
/// table has the same row width.
std::vector<int> place_tables(const std::vector<std::int64_t>& table_sizes, int world);
/// The features rank `rank` owns, ascending.
std::vector<std::int64_t> owned_features(const std::vector<int>& owner, int rank);

/// The rows of every table that `rank` holds under row-wise sharding over `world` ranks.
std::vector<RowRange> row_ranges(const std::vector<std::int64_t>& table_sizes, int world, int rank);

/// Per rank, per feature: the rows of its table that the rank holds with `s` over `world` ranks
/// (every row of every table when replicated or with one rank).
std::vector<std::vector<std::int64_t>> rows_held_by_rank(const std::vector<std::int64_t>& table_sizes,
                                                         Sharding s, int world);

/// What to do when a configuration does not fit in `available_bytes` per rank: the fewest ranks
/// (a power of two) each sharding needs to train `global_batch` samples per step, or why
/// table-wise sharding cannot help, as a sentence naming the options to give.
std::string ways_to_fit(const DlrmConfig& c, std::int64_t global_batch, bool training, double available_bytes);

/// Embedding lookups whose tables are spread over the ranks of a communicator.
class ShardedEmbeddings {
 public:
  virtual ~ShardedEmbeddings() = default;
  /// Every feature's pooled embedding for this rank's samples: 26 x f32 [bs[rank], dim] on the
  /// model's device. `sparse`: this rank's bags (26 x i32/i64 [bs[rank], hotness_k], any
  /// device); `batch_sizes`: every rank's sample count, the same list on every rank. Every rank
  /// calls it, also one with no samples.
  virtual std::vector<benchhost::Tensor> forward(const std::vector<benchhost::Tensor>& sparse,
                                                 const std::vector<std::int64_t>& batch_sizes) = 0;
  /// Backward of the last forward: `dpooled` = interact_backward()'s 26 x [bs[rank], dim]. The
  /// tables held here accumulate their sparse gradients (EmbeddingBag::backward).
  virtual void backward(const std::vector<benchhost::Tensor>& dpooled) = 0;
};

/// The all-to-all exchanges of Note [Table-wise sharding] for one model on one rank.
class TableShardedEmbeddings final : public ShardedEmbeddings {
 public:
  /// `model` holds exactly owned_features(owner, comm.rank()). Both outlive this object.
  TableShardedEmbeddings(DlrmDcnV2& model, benchhost::Communicator& comm, std::vector<int> owner);
  std::vector<benchhost::Tensor> forward(const std::vector<benchhost::Tensor>& sparse,
                                         const std::vector<std::int64_t>& batch_sizes) override;
  void backward(const std::vector<benchhost::Tensor>& dpooled) override;
  const std::vector<int>& owner() const { return owner_; }

 private:
  // The steps of forward (Note [Table-wise sharding]), on the batch sizes of the last forward.
  benchhost::Tensor ids_to_owners(const std::vector<benchhost::Tensor>& sparse);
  std::vector<benchhost::Tensor> pool_owned_tables(const benchhost::Tensor& received_ids);
  std::vector<benchhost::Tensor> pooled_to_ranks(const std::vector<benchhost::Tensor>& pooled);
  std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> pooled_counts() const;

  DlrmDcnV2& model_;
  benchhost::Communicator& comm_;
  std::vector<int> owner_;
  std::vector<std::vector<std::int64_t>> owned_by_;  // per rank: its features, ascending
  std::vector<std::int64_t> batch_sizes_;           // of the last forward
};

/// The exchanges of Note [Row-wise sharding] for one model on one rank.
class RowShardedEmbeddings final : public ShardedEmbeddings {
 public:
  /// `model` holds row_ranges(table sizes, comm.size(), comm.rank()). Both outlive this object.
  RowShardedEmbeddings(DlrmDcnV2& model, benchhost::Communicator& comm);
  std::vector<benchhost::Tensor> forward(const std::vector<benchhost::Tensor>& sparse,
                                         const std::vector<std::int64_t>& batch_sizes) override;
  void backward(const std::vector<benchhost::Tensor>& dpooled) override;

 private:
  // The steps of forward (Note [Row-wise sharding]), on the batch sizes of the last forward.
  // Pairs: per holder rank, per feature, (row - first row held, global sample) flattened.
  using HolderPairs = std::vector<std::vector<std::vector<std::int64_t>>>;
  HolderPairs pairs_by_holder(const std::vector<benchhost::Tensor>& sparse) const;
  benchhost::Tensor pairs_to_holders(const HolderPairs& pairs, std::vector<std::int64_t>& counts);
  std::vector<benchhost::Tensor> partial_sums(const benchhost::Tensor& pairs, const std::vector<std::int64_t>& counts);
  std::vector<benchhost::Tensor> add_partial_sums(const std::vector<benchhost::Tensor>& partial);

  DlrmDcnV2& model_;
  benchhost::Communicator& comm_;
  std::vector<std::vector<RowRange>> ranges_;  // per rank, per feature
  std::vector<std::int64_t> batch_sizes_;      // of the last forward
};

}  // namespace dlrm
