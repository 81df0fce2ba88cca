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

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/comm/communicator.hpp"
#include "model.hpp"

namespace dlrm {

enum class Sharding : std::uint8_t { replicated, table };
/// "replicated" | "table"; InvalidArgument naming the choices otherwise.
Sharding parse_sharding(const std::string& name);
const char* sharding_name(Sharding s) noexcept;

/// Owner rank of each table (Note [Table-wise sharding]); rows stand for bytes, since every
/// table has the same row width.
std::vector<int> place_tables(const std::vector<std::int64_t>& table_sizes, int world);
/// The features rank `rank` owns, ascending.
std::vector<std::int64_t> owned_features(const std::vector<int>& owner, int rank);

/// The all-to-all exchanges of Note [Table-wise sharding] for one model on one rank.
class TableShardedEmbeddings {
 public:
  /// `model` holds exactly owned_features(owner, comm.rank()). Both outlive this object.
  TableShardedEmbeddings(DlrmDcnV2& model, benchhost::Communicator& comm, std::vector<int> owner);

  /// Every feature's pooled embedding for this rank's samples: 26 x f32 [bs[rank], dim] on the
  /// model's device. `sparse`: this rank's bags (26 x i32/i64 [bs[rank], hotness_k], any
  /// device); `batch_sizes`: every rank's sample count, the same list on every rank.
  std::vector<benchhost::Tensor> forward(const std::vector<benchhost::Tensor>& sparse,
                                         const std::vector<std::int64_t>& batch_sizes);
  /// Backward of the last forward: `dpooled` = interact_backward()'s 26 x [bs[rank], dim]. The
  /// owned tables accumulate their sparse gradients (EmbeddingBag::backward).
  void backward(const std::vector<benchhost::Tensor>& dpooled);

  const std::vector<int>& owner() const { return owner_; }

 private:
  DlrmDcnV2& model_;
  benchhost::Communicator& comm_;
  std::vector<int> owner_;
  std::vector<std::vector<std::int64_t>> owned_by_;  // per rank: its features, ascending
  std::vector<std::int64_t> batch_sizes_;           // of the last forward
};

}  // namespace dlrm
