// The dlrm_dcnv2 data sources: the synthetic batches, the Criteo multi-hot days and the
// planted-teacher generator in front of them (data.hpp).
#include "data.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/data/file.hpp"
#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "synthetic.hpp"

namespace dlrm {

using namespace benchhost;
namespace criteo = benchhost::criteo;

DlrmData synthetic_data(const DlrmConfig& c, std::int64_t local_batch, std::int64_t global_batch,
                        std::uint64_t seed) {
  DlrmData data;
  Rng rng(seed, 0x5D);
  for (int b = 0; b < 4; ++b) {
    auto batch = criteo::make_batch(local_batch, c.hotness);
    float* d = batch.dense.data<float>();
    for (std::int64_t i = 0; i < batch.dense.numel(); ++i) d[i] = std::log(3.0f + 20.0f * rng.uniform());
    float* l = batch.labels.data<float>();
    for (std::int64_t i = 0; i < local_batch; ++i) l[i] = rng.uniform() < 0.25f ? 1.0f : 0.0f;
    for (std::size_t k = 0; k < batch.sparse.size(); ++k) {
      auto* s = batch.sparse[k].data<std::int32_t>();
      for (std::int64_t i = 0; i < batch.sparse[k].numel(); ++i)
        s[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(c.table_sizes[k])));
    }
    data.synthetic.push_back(std::move(batch));
  }
  data.train_size = global_batch * 256;
  return data;
}

namespace {

std::string join(const std::vector<std::int64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); }

// Fills `dir` with the planted-teacher generator's days (unless an identical copy is there) and
// returns its report. Rank 0 generates (or finds) the data; the others wait for it.
criteo::SyntheticReport generate(const Options& o, const DlrmConfig& c, const std::string& dir,
                                 const RunContext& ctx) {
  criteo::SyntheticOptions g;
  g.out_dir = dir;
  g.train_days = static_cast<int>(o.get_int("gen-days"));
  g.rows_per_day = o.get_int("gen-rows-per-day");
  g.eval_rows = o.get_int("gen-eval-rows");
  g.seed = static_cast<std::uint64_t>(o.get_int("gen-seed"));
  g.table_sizes = c.table_sizes;
  g.hotness = c.hotness;
  criteo::SyntheticReport rep;
  if (ctx.rank == 0) rep = criteo::ensure_synthetic(g);
  if (ctx.communicator && ctx.communicator->size() > 1) ctx.communicator->barrier();
  if (ctx.rank != 0) rep = criteo::ensure_synthetic(g);
  if (ctx.rank == 0)
    fmt::print(stderr, "dlrm_dcnv2: synthetic Criteo in {} ({} training samples); the planted "
                       "teacher's (Bayes-optimal) validation AUC is {:.5f}\n",
               dir, rep.train_samples, rep.teacher_auc_validation);
  return rep;
}

}  // namespace

DlrmData criteo_data(const Options& o, const DlrmConfig& c, std::int64_t global_batch, const RunContext& ctx) {
  const std::string dir = data::resolve_data_dir(o.get_string("data-dir"));
  BH_CHECK_AS(InvalidArgument, !dir.empty(),
              "dlrm_dcnv2: no --dlrm_dcnv2.data-dir given (point it at MLPerf's preprocessed "
              "Criteo multi-hot days, or use --synthetic for throughput runs)");
  DlrmData data;
  int num_days = static_cast<int>(o.get_int("num-days"));
  if (o.get_bool("generate")) {
    data.teacher_auc = generate(o, c, dir, ctx).teacher_auc_validation;
    num_days = static_cast<int>(o.get_int("gen-days")) + 1;
  }
  using Split = criteo::CriteoMultiHot::Split;
  data.train = std::make_unique<criteo::CriteoMultiHot>(dir, num_days, Split::train, c.table_sizes);
  data.validation = std::make_unique<criteo::CriteoMultiHot>(dir, num_days, Split::validation, c.table_sizes);
  BH_CHECK_AS(DataError, data.train->hotness() == c.hotness,
              "dlrm_dcnv2: {} has multi-hot sizes {} but the config says {}", dir,
              join(data.train->hotness()), join(c.hotness));
  data.train_size = data.train->size() / global_batch * global_batch;  // drop the last partial batch
  BH_CHECK_AS(DataError, data.train_size > 0,
              "dlrm_dcnv2: the training days of {} hold {} samples, less than one global batch "
              "of {}", dir, data.train->size(), global_batch);
  return data;
}

}  // namespace dlrm
