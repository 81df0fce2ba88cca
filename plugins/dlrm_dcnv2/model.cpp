// DLRM-DCNv2 from SDK layers: explicit forward/backward through the bottom MLP, the 26 embedding
// bags, the low-rank cross network and the top MLP.
#include "model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/init.hpp"
#include "benchhost/nn/ops.hpp"

namespace dlrm {

using namespace benchhost;
using benchhost::nn::Activation;

void DlrmConfig::validate() const {
  BH_CHECK_AS(InvalidArgument, !table_sizes.empty() && table_sizes.size() == hotness.size(),
              "dlrm_dcnv2: {} table sizes but {} multi-hot sizes (options table-sizes and "
              "multi-hot-sizes must list one value per categorical feature)",
              table_sizes.size(), hotness.size());
  for (std::size_t k = 0; k < table_sizes.size(); ++k)
    BH_CHECK_AS(InvalidArgument, table_sizes[k] > 0 && hotness[k] > 0,
                "dlrm_dcnv2: feature {} has table size {} and multi-hot size {} (both must be > 0)",
                k, table_sizes[k], hotness[k]);
  BH_CHECK_AS(InvalidArgument, !bottom_mlp.empty() && bottom_mlp.back() == embedding_dim,
              "dlrm_dcnv2: the bottom MLP must end at the embedding dimension {} (got {}), since its "
              "output is concatenated with the pooled embeddings", embedding_dim,
              bottom_mlp.empty() ? 0 : bottom_mlp.back());
  BH_CHECK_AS(InvalidArgument, !top_mlp.empty() && top_mlp.back() == 1,
              "dlrm_dcnv2: the top MLP must end in 1 output (the click logit), got {}",
              top_mlp.empty() ? 0 : top_mlp.back());
  BH_CHECK_AS(InvalidArgument, cross_layers >= 0 && cross_rank > 0 && embedding_dim > 0,
              "dlrm_dcnv2: need cross-layers >= 0, cross-rank > 0, embedding-dim > 0");
}

std::string MemoryNeed::describe() const {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("{:.2f} GiB (embedding tables {:.2f} GiB + their gradient buffers {:.2f} GiB "
                     "+ Adagrad accumulators {:.2f} GiB + dense layers {:.3f} GiB + activations "
                     "{:.3f} GiB)",
                     total() / gib, table_bytes / gib, table_grad_bytes / gib,
                     table_state_bytes / gib, dense_bytes / gib, activation_bytes / gib);
}

MemoryNeed memory_need(const DlrmConfig& c, std::int64_t batch, bool training,
                       const std::vector<std::int64_t>& rows_held, std::int64_t global_batch) {
  MemoryNeed m;
  const std::vector<std::int64_t>& held = rows_held.empty() ? c.table_sizes : rows_held;
  double rows = 0, tables_here = 0;
  for (auto r : held) rows += static_cast<double>(r), tables_here += r > 0 ? 1.0 : 0.0;
  m.table_bytes = rows * static_cast<double>(c.embedding_dim) * 4.0;
  // Parameter::grad is allocated with the table's shape, and Adagrad keeps one accumulator per
  // weight (Note [Sparse embedding gradients]).
  m.table_grad_bytes = m.table_bytes;
  m.table_state_bytes = training ? m.table_bytes : 0.0;
  double dense = 0, act = 0;
  std::int64_t in = c.num_dense;
  for (auto o : c.bottom_mlp) dense += double(in * o + o), act += 2.0 * double(o), in = o;
  const std::int64_t d = c.interaction_dim();
  act += double(d) * 2;  // pooled embeddings + concatenation
  for (std::int64_t l = 0; l < c.cross_layers; ++l)
    dense += double(2 * d * c.cross_rank + d), act += double(c.cross_rank + 2 * d);
  in = d;
  for (auto o : c.top_mlp) dense += double(in * o + o), act += 2.0 * double(o), in = o;
  m.dense_bytes = dense * 4.0 * 3.0;  // weights, grads, accumulators
  m.activation_bytes = act * 4.0 * double(batch) * (training ? 2.0 : 1.0);
  if (global_batch > batch)  // sharded: the held tables pool (and take gradients) for the global batch
    m.activation_bytes += tables_here * double(c.embedding_dim) * 4.0 * double(global_batch) *
                          (training ? 2.0 : 1.0);
  return m;
}

double forward_flops_per_sample(const DlrmConfig& c) {
  double f = 0;
  std::int64_t in = c.num_dense;
  for (auto o : c.bottom_mlp) f += 2.0 * double(in * o), in = o;
  for (auto h : c.hotness) f += double(h * c.embedding_dim);
  const std::int64_t d = c.interaction_dim();
  f += double(c.cross_layers) * (4.0 * double(d * c.cross_rank) + 3.0 * double(d));
  in = d;
  for (auto o : c.top_mlp) f += 2.0 * double(in * o), in = o;
  return f;
}

// ---- CrossNet ----

CrossNet::CrossNet(std::int64_t dim, std::int64_t rank, std::int64_t layers) {
  for (std::int64_t l = 0; l < layers; ++l) {
    auto& layer = register_module(std::to_string(l), std::make_unique<nn::Module>());
    down_.push_back(&layer.register_module(
        "down", std::make_unique<nn::Linear>(dim, rank, /*bias=*/false, Activation::none)));
    up_.push_back(&layer.register_module(
        "up", std::make_unique<nn::Linear>(rank, dim, /*bias=*/true, Activation::none)));
  }
}

// x_{l+1} = x0 * u_l + x_l with u_l = W_l (V_l x_l) + b_l, through SDK ops so it runs wherever
// the weights are.
Tensor CrossNet::forward(const Tensor& x0) {
  x0_ = x0.is_contiguous() ? x0 : x0.contiguous();
  us_.clear();
  Tensor x = x0_;
  for (std::size_t l = 0; l < down_.size(); ++l) {
    Tensor u = up_[l]->forward(down_[l]->forward(x));
    x = nn::addcmul(x, x0_, u);
    us_.push_back(std::move(u));
  }
  return x;
}

// Given g = dL/dx_{l+1}:  du_l = g * x0,  dx0 += g * u_l,  dx_l = g + V_l^T W_l^T du_l; and x_0 is
// x0 itself, so the last g adds to dx0 too.
Tensor CrossNet::backward(const Tensor& dy) {
  Tensor dx0 = Tensor::zeros(x0_.shape(), x0_.dtype(), x0_.device());
  Tensor g = dy.is_contiguous() ? dy : dy.contiguous();
  for (std::size_t l = down_.size(); l-- > 0;) {
    Tensor du = nn::mul(g, x0_);
    nn::addcmul_(dx0, g, us_[l]);
    g = nn::add(g, down_[l]->backward(up_[l]->backward(du)));
  }
  nn::add_(dx0, g);
  return dx0;
}

// ---- Mlp ----

Mlp::Mlp(std::int64_t in, const std::vector<std::int64_t>& sizes, bool relu_last) {
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const bool relu = relu_last || i + 1 < sizes.size();
    layers_.push_back(&register_module(
        std::to_string(i), std::make_unique<nn::Linear>(in, sizes[i], /*bias=*/true,
                                                        relu ? Activation::relu : Activation::none)));
    in = sizes[i];
  }
}

Tensor Mlp::forward(const Tensor& x) {
  Tensor h = x;
  for (auto* l : layers_) h = l->forward(h);
  return h;
}

Tensor Mlp::backward(const Tensor& dy) {
  Tensor g = dy;
  for (std::size_t i = layers_.size(); i-- > 0;) g = layers_[i]->backward(g);
  return g;
}

// ---- DlrmDcnV2 ----

DlrmDcnV2::DlrmDcnV2(const DlrmConfig& config, std::vector<std::int64_t> owned, std::vector<RowRange> rows)
    : config_(config), owned_(std::move(owned)), rows_(std::move(rows)) {
  config_.validate();
  const auto features = static_cast<std::int64_t>(config_.table_sizes.size());
  if (rows_.empty())
    for (std::int64_t k = 0; k < features; ++k) rows_.push_back({0, config_.table_sizes[k]});
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(rows_.size()) == features,
              "dlrm_dcnv2: {} row ranges for {} tables", rows_.size(), features);
  for (std::int64_t k = 0; k < features; ++k)
    BH_CHECK_AS(InvalidArgument, 0 <= rows_[k].begin && rows_[k].begin <= rows_[k].end &&
                                     rows_[k].end <= config_.table_sizes[k],
                "dlrm_dcnv2: rows [{}, {}) of table {} are outside its {} rows", rows_[k].begin,
                rows_[k].end, k, config_.table_sizes[k]);
  if (owned_.empty())
    for (std::int64_t k = 0; k < features; ++k)
      if (rows_[k].size() > 0) owned_.push_back(k);
  for (std::size_t i = 0; i < owned_.size(); ++i)
    BH_CHECK_AS(InvalidArgument, owned_[i] >= 0 && owned_[i] < features && (i == 0 || owned_[i - 1] < owned_[i]),
                "dlrm_dcnv2: the tables held here must be ascending feature ids in [0, {}), got {} at "
                "position {}", features, owned_[i], i);
  bottom_ = &register_module("bottom", std::make_unique<Mlp>(config_.num_dense, config_.bottom_mlp,
                                                              /*relu_last=*/true));
  auto& emb = register_module("emb", std::make_unique<nn::Module>());
  by_feature_.assign(static_cast<std::size_t>(features), nullptr);
  for (std::int64_t k : owned_) {
    tables_.push_back(&emb.register_module(
        std::to_string(k), std::make_unique<nn::EmbeddingBag>(rows_[k].size(),
                                                              config_.embedding_dim,
                                                              config_.pooling, /*sparse_grad=*/true)));
    by_feature_[k] = tables_.back();
  }
  cross_ = &register_module("cross", std::make_unique<CrossNet>(config_.interaction_dim(),
                                                                config_.cross_rank,
                                                                config_.cross_layers));
  top_ = &register_module("top", std::make_unique<Mlp>(config_.interaction_dim(), config_.top_mlp,
                                                        /*relu_last=*/false));
}

void DlrmDcnV2::initialize(std::uint64_t seed) {
  auto init_linear = [&](nn::Linear& l) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(l.in_features()));
    Rng rw = nn::init::rng_for(seed, l.weight().name);
    nn::init::uniform_(l.weight().value, rw, -bound, bound);
    if (l.bias()) {
      Rng rb = nn::init::rng_for(seed, l.bias()->name);
      nn::init::uniform_(l.bias()->value, rb, -bound, bound);
    }
  };
  parameters();  // assigns the full dotted names used as stream ids
  for (auto* l : bottom_->layers()) init_linear(*l);
  for (auto* l : top_->layers()) init_linear(*l);
  for (std::int64_t l = 0; l < cross_->layers(); ++l) {
    Rng rv = nn::init::rng_for(seed, cross_->down(l).weight().name);
    nn::init::xavier_normal_(cross_->down(l).weight().value, rv);
    Rng ru = nn::init::rng_for(seed, cross_->up(l).weight().name);
    nn::init::xavier_normal_(cross_->up(l).weight().value, ru);
    nn::init::zeros_(cross_->up(l).bias()->value);
  }
  for (std::int64_t k : owned_) {  // bound and values from the whole table, whatever rows are here
    nn::EmbeddingBag* t = by_feature_[k];
    const float bound = std::sqrt(1.0f / static_cast<float>(config_.table_sizes[k]));
    Rng r = nn::init::rng_for(seed, t->weight().name);
    nn::init::uniform_slice_(t->weight().value, r, -bound, bound, rows_[k].begin * config_.embedding_dim);
  }
}

Tensor DlrmDcnV2::forward(const Tensor& dense, const std::vector<Tensor>& sparse) {
  BH_CHECK_AS(InvalidArgument, sparse.size() == by_feature_.size(),
              "dlrm_dcnv2: {} sparse features given, the model has {} tables", sparse.size(),
              by_feature_.size());
  BH_CHECK_AS(InvalidArgument, tables_.size() == by_feature_.size(),
              "dlrm_dcnv2: this process holds {} of the {} tables; use interact() with the pooled "
              "embeddings of the others (sharding.hpp)", tables_.size(), by_feature_.size());
  std::vector<Tensor> pooled;
  pooled.reserve(tables_.size());
  for (std::size_t k = 0; k < tables_.size(); ++k) pooled.push_back(tables_[k]->forward(sparse[k]));
  return interact(dense, pooled);
}

void DlrmDcnV2::backward(const Tensor& dlogits) {
  std::vector<Tensor> dpooled = interact_backward(dlogits);
  for (std::size_t k = 0; k < tables_.size(); ++k) tables_[k]->backward(dpooled[k]);
}

Tensor DlrmDcnV2::interact(const Tensor& dense, const std::vector<Tensor>& pooled) {
  BH_CHECK_AS(InvalidArgument, dense.dim() == 2 && dense.size(1) == config_.num_dense,
              "dlrm_dcnv2: dense features must be [B, {}], got {}", config_.num_dense,
              dense.describe());
  BH_CHECK_AS(InvalidArgument, pooled.size() == by_feature_.size(),
              "dlrm_dcnv2: {} pooled embeddings given, the model has {} features", pooled.size(),
              by_feature_.size());
  batch_ = dense.size(0);
  std::vector<Tensor> parts;
  parts.reserve(pooled.size() + 1);
  parts.push_back(bottom_->forward(dense));
  parts.insert(parts.end(), pooled.begin(), pooled.end());
  Tensor x = cross_->forward(nn::concat(parts, 1));
  return top_->forward(x).view({batch_});
}

std::vector<Tensor> DlrmDcnV2::interact_backward(const Tensor& dlogits) {
  Tensor dx0 = cross_->backward(top_->backward(dlogits.reshape({batch_, 1})));
  std::vector<std::int64_t> sizes(by_feature_.size() + 1, config_.embedding_dim);
  std::vector<Tensor> parts = nn::split(dx0, sizes, 1);
  bottom_->backward(parts[0]);
  parts.erase(parts.begin());
  return parts;
}

void DlrmDcnV2::zero_grad_fast() {
  for (auto* p : dense_parameters()) p->grad.zero_();
  for (auto* t : tables_) t->zero_grad_fast();
}

std::vector<nn::Parameter*> DlrmDcnV2::dense_parameters() {
  std::vector<nn::Parameter*> out;
  for (auto* p : parameters()) {
    bool is_table = false;
    for (auto* t : tables_) is_table = is_table || p == &t->weight();
    if (!is_table) out.push_back(p);
  }
  return out;
}

}  // namespace dlrm
