// Sharded embeddings: which rows each rank holds (and the fewest ranks a configuration needs),
// placement and the three all-to-alls of Note [Table-wise sharding], and the exchanges of Note
// [Row-wise sharding] (sharding.hpp).
#include "sharding.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"

namespace dlrm {

using namespace benchhost;

Sharding parse_sharding(const std::string& name) {
  if (name == "replicated") return Sharding::replicated;
  if (name == "table") return Sharding::table;
  if (name == "row") return Sharding::row;
  BH_THROW(InvalidArgument,
           "--dlrm_dcnv2.embedding-sharding: unknown value '{}' (choices: replicated = every rank "
           "holds every table, table = each table on one rank, row = every table split by rows "
           "over all ranks; both exchanged by all-to-all)", name);
}

const char* sharding_name(Sharding s) noexcept {
  switch (s) {
    case Sharding::table: return "table";
    case Sharding::row: return "row";
    default: return "replicated";
  }
}

std::vector<RowRange> row_ranges(const std::vector<std::int64_t>& table_sizes, int world, int rank) {
  std::vector<RowRange> out;
  for (std::int64_t rows : table_sizes) {
    const std::int64_t begin = chunk_offset(rows, world, rank);
    out.push_back({begin, begin + chunk_count(rows, world, rank)});
  }
  return out;
}

std::vector<std::vector<std::int64_t>> rows_held_by_rank(const std::vector<std::int64_t>& table_sizes,
                                                         Sharding s, int world) {
  std::vector<std::vector<std::int64_t>> held(static_cast<std::size_t>(world));
  if (s == Sharding::replicated || world == 1) {
    std::fill(held.begin(), held.end(), table_sizes);
  } else if (s == Sharding::table) {
    const std::vector<int> owner = place_tables(table_sizes, world);
    for (int r = 0; r < world; ++r)
      for (std::size_t k = 0; k < owner.size(); ++k) held[r].push_back(owner[k] == r ? table_sizes[k] : 0);
  } else {
    for (int r = 0; r < world; ++r)
      for (const RowRange& range : row_ranges(table_sizes, world, r)) held[r].push_back(range.size());
  }
  return held;
}

namespace {

// The busiest rank's need with `s` over `world` ranks.
double busiest_rank_need(const DlrmConfig& c, Sharding s, int world, std::int64_t batch, bool training) {
  double worst = 0;
  for (const auto& h : rows_held_by_rank(c.table_sizes, s, world))
    worst = std::max(worst, memory_need(c, batch, training, h, batch * world).total());
  return worst;
}

}  // namespace

std::string ways_to_fit(const DlrmConfig& c, std::int64_t global_batch, bool training, double avail) {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  std::string cannot, ways;
  for (Sharding s : {Sharding::table, Sharding::row}) {
    auto need = [&](int n) { return busiest_rank_need(c, s, n, std::max<std::int64_t>(1, global_batch / n), training); };
    int n = 2;
    while (n <= 65536 && need(n) > avail) n *= 2;
    if (n <= 65536)
      ways += fmt::format("--dlrm_dcnv2.embedding-sharding {} over at least {} ranks ({:.2f} GiB on the "
                          "busiest rank at global batch {}), or ", sharding_name(s), n, need(n) / gib, global_batch);
    else if (s == Sharding::table)
      cannot = "table-wise sharding cannot help (the largest table alone does not fit); ";
  }
  return cannot + "use " + ways + "smaller --dlrm_dcnv2.table-sizes (e.g. configs/dlrm_dcnv2/mini.conf)";
}

std::vector<int> place_tables(const std::vector<std::int64_t>& table_sizes, int world) {
  BH_CHECK_AS(InvalidArgument, world >= 1, "place_tables: world size {} < 1", world);
  std::vector<std::size_t> order(table_sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return table_sizes[a] > table_sizes[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(world), 0);
  std::vector<int> owner(table_sizes.size(), 0);
  for (std::size_t k : order) {
    const auto r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[k] = r;
    load[static_cast<std::size_t>(r)] += table_sizes[k];
  }
  return owner;
}

std::vector<std::int64_t> owned_features(const std::vector<int>& owner, int rank) {
  std::vector<std::int64_t> out;
  for (std::size_t k = 0; k < owner.size(); ++k)
    if (owner[k] == rank) out.push_back(static_cast<std::int64_t>(k));
  return out;
}

namespace {

// Copies `n` elements between flat (1-D) tensors at element offsets, across devices if need be.
void copy_flat(Tensor& dst, std::int64_t dst_off, const Tensor& src, std::int64_t src_off, std::int64_t n) {
  if (n == 0) return;
  dst.slice(0, dst_off, dst_off + n).copy_(src.slice(0, src_off, src_off + n));
}

Tensor flat(const Tensor& t) { return t.is_contiguous() ? t.view({t.numel()}) : t.contiguous().view({t.numel()}); }

// Rows before rank q's samples in the assembled global batch.
std::vector<std::int64_t> row_offsets(const std::vector<std::int64_t>& batch_sizes) {
  std::vector<std::int64_t> off(batch_sizes.size() + 1, 0);
  std::partial_sum(batch_sizes.begin(), batch_sizes.end(), off.begin() + 1);
  return off;
}

std::int64_t sum(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

}  // namespace

TableShardedEmbeddings::TableShardedEmbeddings(DlrmDcnV2& model, Communicator& comm,
                                               std::vector<int> owner)
    : model_(model), comm_(comm), owner_(std::move(owner)) {
  const auto features = static_cast<std::size_t>(model_.config().table_sizes.size());
  BH_CHECK_AS(InvalidArgument, owner_.size() == features,
              "dlrm_dcnv2: a placement of {} tables for a model of {}", owner_.size(), features);
  for (int r = 0; r < comm_.size(); ++r) owned_by_.push_back(owned_features(owner_, r));
  BH_CHECK_AS(InvalidArgument, owned_by_[static_cast<std::size_t>(comm_.rank())] == model_.owned_features(),
              "dlrm_dcnv2: rank {} holds other tables than the placement gives it", comm_.rank());
}

std::vector<Tensor> TableShardedEmbeddings::forward(const std::vector<Tensor>& sparse,
                                                    const std::vector<std::int64_t>& batch_sizes) {
  const int world = comm_.size(), me = comm_.rank();
  const DlrmConfig& c = model_.config();
  const std::size_t features = owner_.size();
  BH_CHECK_AS(InvalidArgument, sparse.size() == features && batch_sizes.size() == static_cast<std::size_t>(world),
              "dlrm_dcnv2: sharded embeddings need {} bags and {} batch sizes, got {} and {}",
              features, world, sparse.size(), batch_sizes.size());
  const DType id_type = sparse[0].dtype();
  for (std::size_t k = 0; k < features; ++k)
    BH_CHECK_AS(InvalidArgument,
                sparse[k].dtype() == id_type && sparse[k].dim() == 2 &&
                    sparse[k].size(0) == batch_sizes[static_cast<std::size_t>(me)] &&
                    sparse[k].size(1) == c.hotness[k],
                "dlrm_dcnv2: feature {} bags must be [{}, {}] like the others' id type, got {}", k,
                batch_sizes[static_cast<std::size_t>(me)], c.hotness[k], sparse[k].describe());
  batch_sizes_ = batch_sizes;
  return pooled_to_ranks(pool_owned_tables(ids_to_owners(sparse)));
}

// 1. ids to their tables' owners. Returns what this rank received: per sending rank q in rank
//    order, the bags of q's samples for each table held here.
Tensor TableShardedEmbeddings::ids_to_owners(const std::vector<Tensor>& sparse) {
  const int world = comm_.size(), me = comm_.rank();
  const DlrmConfig& c = model_.config();
  const DType id_type = sparse[0].dtype();
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(me)];
  const Device cd = comm_.device();
  const auto& mine_owned = owned_by_[static_cast<std::size_t>(me)];
  std::vector<std::int64_t> send_n(static_cast<std::size_t>(world), 0), recv_n(send_n);
  for (int r = 0; r < world; ++r) {
    for (std::int64_t k : owned_by_[static_cast<std::size_t>(r)]) send_n[r] += mine * c.hotness[k];
    for (std::int64_t k : mine_owned) recv_n[r] += batch_sizes_[r] * c.hotness[k];
  }
  Tensor send = Tensor::empty({sum(send_n)}, id_type, cd), recv = Tensor::empty({sum(recv_n)}, id_type, cd);
  std::int64_t pos = 0;
  for (int r = 0; r < world; ++r)
    for (std::int64_t k : owned_by_[static_cast<std::size_t>(r)]) {
      copy_flat(send, pos, flat(sparse[k]), 0, mine * c.hotness[k]);
      pos += mine * c.hotness[k];
    }
  comm_.alltoall(send, recv, send_n, recv_n).wait();
  return recv;
}

// 2. pool the owned tables over the global batch (undefined for the tables held elsewhere).
std::vector<Tensor> TableShardedEmbeddings::pool_owned_tables(const Tensor& recv) {
  const int world = comm_.size();
  const DlrmConfig& c = model_.config();
  const std::vector<std::int64_t> rows = row_offsets(batch_sizes_);
  const std::int64_t global = rows.back();
  const Device md = model_.dense_parameters().front()->value.device();
  const auto& mine_owned = owned_by_[static_cast<std::size_t>(comm_.rank())];
  std::vector<Tensor> ids(owner_.size()), pooled(owner_.size());
  for (std::int64_t k : mine_owned) ids[k] = Tensor::empty({global * c.hotness[k]}, recv.dtype(), md);
  std::int64_t pos = 0;
  for (int q = 0; q < world; ++q)
    for (std::int64_t k : mine_owned) {
      const std::int64_t n = batch_sizes_[q] * c.hotness[k];
      copy_flat(ids[k], rows[q] * c.hotness[k], recv, pos, n);
      pos += n;
    }
  for (std::int64_t k : mine_owned) pooled[k] = model_.table(k)->forward(ids[k].view({global, c.hotness[k]}));
  return pooled;
}

// Elements of the pooled all-to-all of step 3 per rank r: what this rank sends r (its tables'
// rows of r's samples) and what it receives from r (r's tables' rows of its own samples). Step 4
// exchanges the same counts the other way.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> TableShardedEmbeddings::pooled_counts() const {
  const int world = comm_.size(), me = comm_.rank();
  const std::int64_t dim = model_.config().embedding_dim;
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(me)];
  const auto owned_here = static_cast<std::int64_t>(owned_by_[static_cast<std::size_t>(me)].size());
  std::vector<std::int64_t> to_rank(static_cast<std::size_t>(world)), from_rank(to_rank);
  for (int r = 0; r < world; ++r) {
    to_rank[r] = batch_sizes_[r] * dim * owned_here;
    from_rank[r] = mine * dim * static_cast<std::int64_t>(owned_by_[static_cast<std::size_t>(r)].size());
  }
  return {to_rank, from_rank};
}

// 3. each rank's rows back to it: every feature's pooled embedding of this rank's samples.
std::vector<Tensor> TableShardedEmbeddings::pooled_to_ranks(const std::vector<Tensor>& pooled) {
  const int world = comm_.size();
  const std::int64_t dim = model_.config().embedding_dim;
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(comm_.rank())];
  const std::vector<std::int64_t> rows = row_offsets(batch_sizes_);
  const Device cd = comm_.device(), md = model_.dense_parameters().front()->value.device();
  const auto [send_n, recv_n] = pooled_counts();
  Tensor send = Tensor::empty({sum(send_n)}, DType::f32, cd), recv = Tensor::empty({sum(recv_n)}, DType::f32, cd);
  std::int64_t pos = 0;
  for (int q = 0; q < world; ++q)
    for (std::int64_t k : owned_by_[static_cast<std::size_t>(comm_.rank())]) {
      copy_flat(send, pos, flat(pooled[k]), rows[q] * dim, batch_sizes_[q] * dim);
      pos += batch_sizes_[q] * dim;
    }
  comm_.alltoall(send, recv, send_n, recv_n).wait();
  recv = recv.to(md);
  std::vector<Tensor> out(owner_.size());
  pos = 0;
  for (int r = 0; r < world; ++r)
    for (std::int64_t k : owned_by_[static_cast<std::size_t>(r)]) {
      out[k] = recv.slice(0, pos, pos + mine * dim).view({mine, dim});
      pos += mine * dim;
    }
  return out;
}

void TableShardedEmbeddings::backward(const std::vector<Tensor>& dpooled) {
  const int world = comm_.size(), me = comm_.rank();
  BH_CHECK_AS(InvalidArgument, !batch_sizes_.empty() && dpooled.size() == owner_.size(),
              "dlrm_dcnv2: sharded embeddings backward needs a forward first and {} gradients, got {}",
              owner_.size(), dpooled.size());
  const std::int64_t dim = model_.config().embedding_dim;
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(me)];
  const std::vector<std::int64_t> rows = row_offsets(batch_sizes_);
  const Device cd = comm_.device(), md = model_.dense_parameters().front()->value.device();
  const auto& mine_owned = owned_by_[static_cast<std::size_t>(me)];

  // 4. the reverse of step 3: every pooled gradient to its table's owner.
  const auto [recv_n, send_n] = pooled_counts();
  Tensor send = Tensor::empty({sum(send_n)}, DType::f32, cd), recv = Tensor::empty({sum(recv_n)}, DType::f32, cd);
  std::int64_t pos = 0;
  for (int r = 0; r < world; ++r)
    for (std::int64_t k : owned_by_[static_cast<std::size_t>(r)]) {
      BH_CHECK_AS(InvalidArgument, dpooled[k].numel() == mine * dim,
                  "dlrm_dcnv2: gradient of feature {} has {} elements, expected [{}, {}]", k,
                  dpooled[k].numel(), mine, dim);
      copy_flat(send, pos, flat(dpooled[k]), 0, mine * dim);
      pos += mine * dim;
    }
  comm_.alltoall(send, recv, send_n, recv_n).wait();
  const std::int64_t global = rows.back();
  std::vector<Tensor> grads(owner_.size());
  for (std::int64_t k : mine_owned) grads[k] = Tensor::empty({global * dim}, DType::f32, md);
  pos = 0;
  for (int q = 0; q < world; ++q)
    for (std::int64_t k : mine_owned) {
      copy_flat(grads[k], rows[q] * dim, recv, pos, batch_sizes_[q] * dim);
      pos += batch_sizes_[q] * dim;
    }
  for (std::int64_t k : mine_owned) model_.table(k)->backward(grads[k].view({global, dim}));
}

// ---- row-wise (Note [Row-wise sharding]) ----

RowShardedEmbeddings::RowShardedEmbeddings(DlrmDcnV2& model, Communicator& comm)
    : model_(model), comm_(comm) {
  const DlrmConfig& c = model_.config();
  BH_CHECK_AS(InvalidArgument, c.pooling == nn::BagPooling::sum,
              "dlrm_dcnv2: row-wise sharded tables pool by sum only (a mean over a bag split between "
              "ranks needs the whole bag); use --dlrm_dcnv2.pooling sum or table-wise sharding");
  for (int r = 0; r < comm_.size(); ++r) ranges_.push_back(row_ranges(c.table_sizes, comm_.size(), r));
  for (std::size_t k = 0; k < c.table_sizes.size(); ++k) {
    const RowRange want = ranges_[static_cast<std::size_t>(comm_.rank())][k], got = model_.rows_held(static_cast<std::int64_t>(k));
    BH_CHECK_AS(InvalidArgument, want.begin == got.begin && want.end == got.end,
                "dlrm_dcnv2: rank {} holds rows [{}, {}) of table {}, the row sharding gives it [{}, {})",
                comm_.rank(), got.begin, got.end, k, want.begin, want.end);
  }
}

std::vector<Tensor> RowShardedEmbeddings::forward(const std::vector<Tensor>& sparse,
                                                  const std::vector<std::int64_t>& batch_sizes) {
  const int world = comm_.size();
  const auto features = model_.config().table_sizes.size();
  BH_CHECK_AS(InvalidArgument, sparse.size() == features && batch_sizes.size() == static_cast<std::size_t>(world),
              "dlrm_dcnv2: sharded embeddings need {} bags and {} batch sizes, got {} and {}",
              features, world, sparse.size(), batch_sizes.size());
  batch_sizes_ = batch_sizes;
  std::vector<std::int64_t> counts;
  const Tensor pairs = pairs_to_holders(pairs_by_holder(sparse), counts);
  return add_partial_sums(partial_sums(pairs, counts));
}

// 1a. (row - first row held, global sample) pairs, grouped by holder, then by feature; samples
//     stay in order within a group.
RowShardedEmbeddings::HolderPairs RowShardedEmbeddings::pairs_by_holder(const std::vector<Tensor>& sparse) const {
  const int world = comm_.size(), me = comm_.rank();
  const DlrmConfig& c = model_.config();
  const std::size_t nf = c.table_sizes.size();
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(me)];
  const std::int64_t first_sample = row_offsets(batch_sizes_)[static_cast<std::size_t>(me)];
  HolderPairs pairs(static_cast<std::size_t>(world), std::vector<std::vector<std::int64_t>>(nf));
  for (std::size_t k = 0; k < nf; ++k) {
    const Tensor ids = sparse[k].to(Device::cpu()).contiguous();
    BH_CHECK_AS(InvalidArgument, ids.dim() == 2 && ids.size(0) == mine && ids.size(1) == c.hotness[k] &&
                                     (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
                "dlrm_dcnv2: feature {} bags must be i32/i64 [{}, {}], got {}", k, mine, c.hotness[k],
                ids.describe());
    const std::int64_t table_rows = c.table_sizes[k], base = table_rows / world, rem = table_rows % world;
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      const std::int64_t id = ids.dtype() == DType::i32 ? ids.data<std::int32_t>()[i] : ids.data<std::int64_t>()[i];
      BH_CHECK_AS(InvalidArgument, id >= 0 && id < table_rows,
                  "dlrm_dcnv2: feature {} id {} is outside its table of {} rows", k, id, table_rows);
      // The holder of row `id` under numpy.array_split ranges (communicator.hpp).
      const std::int64_t r = id < rem * (base + 1) ? id / (base + 1) : rem + (id - rem * (base + 1)) / base;
      auto& out = pairs[static_cast<std::size_t>(r)][k];
      out.push_back(id - ranges_[static_cast<std::size_t>(r)][k].begin);
      out.push_back(first_sample + i / c.hotness[k]);
    }
  }
  return pairs;
}

// 1b. the pairs to their holders: one all-to-all of the pair counts, then one of the pairs.
//     Returns the pairs received (on the CPU); `counts`[q * F + k]: pairs from q for feature k.
Tensor RowShardedEmbeddings::pairs_to_holders(const HolderPairs& pairs, std::vector<std::int64_t>& counts) {
  const int world = comm_.size();
  const auto features = static_cast<std::int64_t>(model_.config().table_sizes.size());
  const auto nf = static_cast<std::size_t>(features);
  const Device cd = comm_.device();
  Tensor counts_out = Tensor::empty({world * features}, DType::i64);
  for (int r = 0; r < world; ++r)
    for (std::size_t k = 0; k < nf; ++k)
      counts_out.data<std::int64_t>()[r * features + static_cast<std::int64_t>(k)] =
          static_cast<std::int64_t>(pairs[static_cast<std::size_t>(r)][k].size() / 2);
  Tensor counts_in = Tensor::empty({world * features}, DType::i64, cd);
  comm_.alltoall(counts_out.to(cd), counts_in).wait();
  counts_in = counts_in.to(Device::cpu());
  counts.assign(counts_in.data<std::int64_t>(), counts_in.data<std::int64_t>() + world * features);
  std::vector<std::int64_t> send_n(static_cast<std::size_t>(world), 0), recv_n(send_n);
  for (int r = 0; r < world; ++r)
    for (std::size_t k = 0; k < nf; ++k) {
      send_n[r] += static_cast<std::int64_t>(pairs[static_cast<std::size_t>(r)][k].size());
      recv_n[r] += 2 * counts[r * features + static_cast<std::int64_t>(k)];
    }
  Tensor send = Tensor::empty({sum(send_n)}, DType::i64), recv = Tensor::empty({sum(recv_n)}, DType::i64, cd);
  std::int64_t pos = 0;
  for (int r = 0; r < world; ++r)
    for (std::size_t k = 0; k < nf; ++k) {
      const auto& v = pairs[static_cast<std::size_t>(r)][k];
      std::copy(v.begin(), v.end(), send.data<std::int64_t>() + pos);
      pos += static_cast<std::int64_t>(v.size());
    }
  comm_.alltoall(send.to(cd), recv, send_n, recv_n).wait();
  return recv.to(Device::cpu());
}

// 2. partial sums over the rows held here, for every sample of the global batch. Blocks from
//    q come in q order and samples in order within them, so bags are ascending.
std::vector<Tensor> RowShardedEmbeddings::partial_sums(const Tensor& pairs, const std::vector<std::int64_t>& counts) {
  const int world = comm_.size();
  const DlrmConfig& c = model_.config();
  const auto features = static_cast<std::int64_t>(c.table_sizes.size());
  const auto nf = static_cast<std::size_t>(features);
  const std::int64_t global = row_offsets(batch_sizes_).back(), dim = c.embedding_dim;
  const Device md = model_.dense_parameters().front()->value.device();
  std::vector<std::vector<std::int64_t>> idx(nf), offsets(nf, std::vector<std::int64_t>(static_cast<std::size_t>(global) + 1, 0));
  const std::int64_t* pr = pairs.data<std::int64_t>();
  for (int q = 0; q < world; ++q)
    for (std::size_t k = 0; k < nf; ++k)
      for (std::int64_t j = 0; j < counts[q * features + static_cast<std::int64_t>(k)]; ++j, pr += 2) {
        idx[k].push_back(pr[0]);
        ++offsets[k][static_cast<std::size_t>(pr[1]) + 1];
      }
  std::vector<Tensor> partial(nf);
  for (std::size_t k = 0; k < nf; ++k) {
    nn::EmbeddingBag* table = model_.table(static_cast<std::int64_t>(k));
    if (table == nullptr) {  // no rows of this table here, so no ids either
      partial[k] = Tensor::zeros({global, dim}, DType::f32, md);
      continue;
    }
    std::partial_sum(offsets[k].begin(), offsets[k].end(), offsets[k].begin());
    const auto n = static_cast<std::int64_t>(idx[k].size());
    partial[k] = table->forward(Tensor::from_vector_i64(idx[k], {n}, md),
                                Tensor::from_vector_i64(offsets[k], {global + 1}, md));
  }
  return partial;
}

// 3. each rank's partial sums to it, added in rank order.
std::vector<Tensor> RowShardedEmbeddings::add_partial_sums(const std::vector<Tensor>& partial) {
  const int world = comm_.size(), me = comm_.rank();
  const DlrmConfig& c = model_.config();
  const auto features = static_cast<std::int64_t>(c.table_sizes.size());
  const auto nf = static_cast<std::size_t>(features);
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(me)], dim = c.embedding_dim;
  const std::vector<std::int64_t> rows = row_offsets(batch_sizes_);
  const Device cd = comm_.device(), md = model_.dense_parameters().front()->value.device();
  std::vector<std::int64_t> send_n(static_cast<std::size_t>(world)), recv_n(send_n);
  for (int r = 0; r < world; ++r) {
    send_n[r] = features * batch_sizes_[r] * dim;
    recv_n[r] = features * mine * dim;
  }
  Tensor send = Tensor::empty({sum(send_n)}, DType::f32, cd), sums = Tensor::empty({sum(recv_n)}, DType::f32, cd);
  std::int64_t pos = 0;
  for (int q = 0; q < world; ++q)
    for (std::size_t k = 0; k < nf; ++k) {
      copy_flat(send, pos, flat(partial[k]), rows[q] * dim, batch_sizes_[q] * dim);
      pos += batch_sizes_[q] * dim;
    }
  comm_.alltoall(send, sums, send_n, recv_n).wait();
  sums = sums.to(md);
  std::vector<Tensor> out(nf);
  for (std::size_t k = 0; k < nf; ++k) {
    const std::int64_t at = static_cast<std::int64_t>(k) * mine * dim;
    out[k] = sums.slice(0, at, at + mine * dim).view({mine, dim});
    for (int r = 1; r < world; ++r) {
      const std::int64_t from = (r * features + static_cast<std::int64_t>(k)) * mine * dim;
      nn::add_(out[k], sums.slice(0, from, from + mine * dim).view({mine, dim}));
    }
  }
  return out;
}

void RowShardedEmbeddings::backward(const std::vector<Tensor>& dpooled) {
  const int world = comm_.size(), me = comm_.rank();
  const DlrmConfig& c = model_.config();
  const auto features = static_cast<std::int64_t>(c.table_sizes.size());
  BH_CHECK_AS(InvalidArgument, !batch_sizes_.empty() && dpooled.size() == static_cast<std::size_t>(features),
              "dlrm_dcnv2: sharded embeddings backward needs a forward first and {} gradients, got {}",
              features, dpooled.size());
  const std::int64_t mine = batch_sizes_[static_cast<std::size_t>(me)], dim = c.embedding_dim;
  for (std::int64_t b : batch_sizes_)
    BH_CHECK_AS(InvalidArgument, b == mine,
                "dlrm_dcnv2: row-sharded backward needs equal batches on every rank (training), got {} and {}",
                b, mine);
  const Device cd = comm_.device(), md = model_.dense_parameters().front()->value.device();
  // 4. every rank's pooled gradients to every holder.
  Tensor send = Tensor::empty({features * mine * dim}, DType::f32, cd);
  for (std::int64_t k = 0; k < features; ++k) {
    BH_CHECK_AS(InvalidArgument, dpooled[k].numel() == mine * dim,
                "dlrm_dcnv2: gradient of feature {} has {} elements, expected [{}, {}]", k,
                dpooled[k].numel(), mine, dim);
    copy_flat(send, k * mine * dim, flat(dpooled[k]), 0, mine * dim);
  }
  Tensor all = Tensor::empty({world * features * mine * dim}, DType::f32, cd);
  comm_.allgather(send, all).wait();
  all = all.to(md);
  for (std::int64_t k = 0; k < features; ++k) {
    nn::EmbeddingBag* table = model_.table(k);
    if (table == nullptr) continue;
    Tensor grad = Tensor::empty({world * mine * dim}, DType::f32, md);
    for (int r = 0; r < world; ++r)
      copy_flat(grad, r * mine * dim, all, (r * features + k) * mine * dim, mine * dim);
    table->backward(grad.view({world * mine, dim}));
  }
}

}  // namespace dlrm
