#pragma once
/// @file plugins/dlrm_dcnv2/model.hpp  DLRM with a DCN-v2 interaction (MLPerf DLRM-DCNv2).
///
/// The MLPerf reference (torchrec DLRM_DCN, recommendation_v2/torchrec_dlrm):
///   dense [B, 13] -> bottom MLP 512-256-128, ReLU after every layer -> d [B, 128]
///   26 multi-hot bags -> EmbeddingBag (sum) per table, dim 128 -> e_k [B, 128]
///   x0 = concat(d, e_0 .. e_25) [B, 27 * 128 = 3456]
///   3 low-rank cross layers: x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l, V_l [512, 3456],
///     W_l [3456, 512], b_l [3456]
///   top MLP 1024-1024-512-256 (ReLU) then Linear(256, 1) -> logit; loss BCE with logits (mean).
/// Parameter names: bottom.<i>.{weight,bias}, emb.<k>.weight, cross.<l>.down.weight (V_l),
/// cross.<l>.up.{weight,bias} (W_l, b_l), top.<i>.{weight,bias}; tools/peers/dlrm_peer.py uses
/// the same names in its weight files.
///
/// Initialisation as the reference: Linear weights and biases U(+-1/sqrt(fan_in)) (PyTorch's
/// nn.Linear default), cross kernels Xavier-normal with zero bias, tables
/// U(+-sqrt(1 / rows)) (torchrec's EmbeddingBagConfig default). Each parameter draws from its own
/// stream of (seed, name) (nn/init.hpp), so the tables are identical whatever the thread count.
///
/// Every layer runs through SDK ops (the cross layer's x0 * u + x_l too), so the model trains on
/// whichever device its parameters are on (Module::to after initialize()). With tables sharded
/// over processes (sharding.hpp) a process holds only some tables and runs the model in two
/// halves: its tables' pooling, and interact() on every feature's pooled embeddings.
///
/// Not thread-safe: one training thread drives the model; ops parallelise inside.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/layers.hpp"
#include "benchhost/nn/module.hpp"

namespace dlrm {

using benchhost::Tensor;

struct DlrmConfig {
  std::int64_t num_dense = 13;
  std::vector<std::int64_t> bottom_mlp{512, 256, 128};  ///< last == embedding_dim
  std::vector<std::int64_t> table_sizes;                ///< rows per categorical feature
  std::vector<std::int64_t> hotness;                    ///< row ids per sample per feature
  std::int64_t embedding_dim = 128;
  std::int64_t cross_layers = 3;
  std::int64_t cross_rank = 512;
  std::vector<std::int64_t> top_mlp{1024, 1024, 512, 256, 1};  ///< last must be 1
  benchhost::nn::BagPooling pooling = benchhost::nn::BagPooling::sum;

  std::int64_t interaction_dim() const {
    return embedding_dim * (1 + static_cast<std::int64_t>(table_sizes.size()));
  }
  /// InvalidArgument naming the inconsistent option (bottom MLP end vs embedding dim, ...).
  void validate() const;
};

/// Bytes a training run needs, computed before anything is allocated.
struct MemoryNeed {
  double table_bytes = 0;       ///< embedding weights
  double table_grad_bytes = 0;  ///< Parameter::grad of the tables (full shape, Note [Sparse embedding gradients])
  double table_state_bytes = 0; ///< Adagrad accumulators of the tables
  double dense_bytes = 0;       ///< MLP and cross weights + grads + accumulators
  double activation_bytes = 0;  ///< forward activations kept for backward, and their gradients
  double total() const {
    return table_bytes + table_grad_bytes + table_state_bytes + dense_bytes + activation_bytes;
  }
  std::string describe() const;  ///< "412.3 GiB (tables 97.4 GiB + grads 97.4 GiB + ...)"
};
/// `rows_held`: per feature, the rows of its table this process holds (empty = every row of
/// every table; sharding.hpp); `global_batch`: the samples a held table pools per step when
/// tables are sharded (the whole global batch; 0 = `batch`).
MemoryNeed memory_need(const DlrmConfig& c, std::int64_t batch, bool training,
                       const std::vector<std::int64_t>& rows_held = {}, std::int64_t global_batch = 0);

/// Multiply-accumulates per sample of the forward pass (training ~ 3x); embeddings count as adds.
double forward_flops_per_sample(const DlrmConfig& c);

/// The low-rank cross network (DCN-v2).
class CrossNet : public benchhost::nn::Module {
 public:
  CrossNet(std::int64_t dim, std::int64_t rank, std::int64_t layers);
  Tensor forward(const Tensor& x0);
  Tensor backward(const Tensor& dy);  ///< returns dx0
  std::int64_t layers() const { return static_cast<std::int64_t>(down_.size()); }
  benchhost::nn::Linear& down(std::int64_t l) { return *down_[l]; }
  benchhost::nn::Linear& up(std::int64_t l) { return *up_[l]; }

 private:
  std::vector<benchhost::nn::Linear*> down_, up_;
  Tensor x0_;
  std::vector<Tensor> us_;  // u_l = W_l V_l x_l + b_l of the last forward
};

/// A stack of Linear layers, ReLU after each except (optionally) the last.
class Mlp : public benchhost::nn::Module {
 public:
  Mlp(std::int64_t in, const std::vector<std::int64_t>& sizes, bool relu_last);
  Tensor forward(const Tensor& x);
  Tensor backward(const Tensor& dy);
  std::vector<benchhost::nn::Linear*>& layers() { return layers_; }

 private:
  std::vector<benchhost::nn::Linear*> layers_;
};

/// The rows [begin, end) of one table that a process holds (Note [Row-wise sharding]).
struct RowRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

class DlrmDcnV2 : public benchhost::nn::Module {
 public:
  /// `owned`: the features whose tables this process holds, ascending (Note [Table-wise
  /// sharding] in sharding.hpp); empty = every table (one process, or replicated tables).
  /// `rows`: per feature, the rows of its table held here (Note [Row-wise sharding]); empty =
  /// every row. A feature with an empty range gets no table here.
  explicit DlrmDcnV2(const DlrmConfig& config, std::vector<std::int64_t> owned = {},
                     std::vector<RowRange> rows = {});
  /// Re-initialise every parameter as the reference does (see the file comment). A table, or a
  /// range of its rows, gets the same values whichever process holds it.
  void initialize(std::uint64_t seed);

  /// logits [B] from dense f32 [B, 13] and 26 bags (i32/i64 [B, hotness_k]); every table local.
  Tensor forward(const Tensor& dense, const std::vector<Tensor>& sparse);
  /// Backward of the last forward given dlogits [B]; accumulates every gradient (the tables'
  /// as sparse rows).
  void backward(const Tensor& dlogits);

  // ---- the two halves, for tables held elsewhere ----
  /// logits [B] from the dense features and every feature's pooled embedding ([B, dim] each,
  /// in feature order, wherever it was computed).
  Tensor interact(const Tensor& dense, const std::vector<Tensor>& pooled);
  /// Backward of the last interact() through the top MLP, the cross network and the bottom MLP;
  /// returns the gradient of every pooled embedding ([B, dim] each, in feature order).
  std::vector<Tensor> interact_backward(const Tensor& dlogits);

  /// Zero the gradients: dense parameters fully, tables on their touched rows only.
  void zero_grad_fast();

  const DlrmConfig& config() const { return config_; }
  /// The tables this process holds, in feature order.
  std::vector<benchhost::nn::EmbeddingBag*>& tables() { return tables_; }
  /// Feature k's table, or nullptr when another process holds it.
  benchhost::nn::EmbeddingBag* table(std::int64_t k) const { return by_feature_.at(k); }
  const std::vector<std::int64_t>& owned_features() const { return owned_; }
  /// The rows of feature k's table held here.
  RowRange rows_held(std::int64_t k) const { return rows_.at(static_cast<std::size_t>(k)); }
  /// Every parameter except the tables.
  std::vector<benchhost::nn::Parameter*> dense_parameters();

 private:
  DlrmConfig config_;
  std::vector<std::int64_t> owned_;
  std::vector<RowRange> rows_;  // per feature
  Mlp* bottom_ = nullptr;
  std::vector<benchhost::nn::EmbeddingBag*> tables_, by_feature_;
  CrossNet* cross_ = nullptr;
  Mlp* top_ = nullptr;
  std::int64_t batch_ = 0;
};

}  // namespace dlrm
