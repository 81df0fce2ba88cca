// The unet3d workload's data sources (see data.hpp).

#include "data.hpp"

#include <algorithm>

#include "benchhost/data/file.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/error.hpp"
#include "synthetic.hpp"

namespace benchhost::unet3d {

namespace {

std::array<std::int64_t, 3> triple(const std::vector<std::int64_t>& v) { return {v.at(0), v.at(1), v.at(2)}; }

// Note [Synthetic data]: the same batch every step (as the other workloads' --synthetic):
// measures the model, not the input pipeline. Patches of the training shape, labels 0..2.
DataSources synthetic_sources(const RunContext& ctx, std::int64_t batch_size) {
  const auto p = ctx.options.get_int_list("patch-size");
  const std::int64_t batches = 100;
  DataSources out;
  out.train = std::make_unique<data::SyntheticSource>(
      std::vector<data::FieldSpec>{{"image", {1, p[0], p[1], p[2]}, DType::f32, -2.0, 2.0},
                                   {"label", {1, p[0], p[1], p[2]}, DType::u8, 0.0, 3.0}},
      batch_size, batches, ctx.device, ctx.seed);
  out.samples_per_epoch = batches * batch_size * ctx.world_size;
  out.train_cases = out.samples_per_epoch;
  return out;
}

}  // namespace

DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size) {
  const Options& o = ctx.options;
  if (ctx.synthetic_data || ctx.mode == "infer") return synthetic_sources(ctx, batch_size);
  const std::string dir = data::resolve_data_dir(o.get_string("data-dir"));
  BH_CHECK_AS(InvalidArgument, !dir.empty(),
              "unet3d needs unet3d.data-dir: KiTS19 as MLPerf's preprocess_dataset.py leaves it (case_XXXXX_x.npy, "
              "case_XXXXX_y.npy, evaluation_cases.txt; see docs/workloads.md), or --synthetic");
  if (o.get_bool("generate")) {
    kits19::Kits19SyntheticOptions g;
    g.train_cases = static_cast<int>(o.get_int("gen-train-cases"));
    g.eval_cases = static_cast<int>(o.get_int("gen-eval-cases"));
    g.size_min = static_cast<int>(o.get_int("gen-size-min"));
    g.size_max = static_cast<int>(o.get_int("gen-size-max"));
    BH_CHECK_AS(InvalidArgument, g.size_min <= g.size_max, "unet3d.gen-size-min {} is above unet3d.gen-size-max {}",
                g.size_min, g.size_max);
    g.seed = static_cast<std::uint64_t>(o.get_int("gen-seed"));
    kits19::ensure_kits19_synthetic(dir, g, ctx.communicator);  // rank 0 writes, the others wait
  }
  kits19::Kits19IndexOptions io;
  io.min_train_shape = triple(o.get_int_list("patch-size"));
  auto index = std::make_shared<const kits19::Kits19Index>(dir, io);

  kits19::Kits19TrainOptions to;
  to.patch = io.min_train_shape;
  to.oversampling = o.get_float("oversampling");
  auto train = std::make_shared<const kits19::Kits19TrainDataset>(*index, to);

  // Shuffled, rank-sharded training cases; the tail that does not fill a batch on every rank is
  // dropped (the reference's drop_last).
  data::RunLoaderOptions lo;  // Note [Training and evaluation loaders]
  lo.rank = ctx.rank;
  lo.world_size = ctx.world_size;
  lo.seed = ctx.seed;
  const std::int64_t threads = o.get_int("loader-threads") > 0 ? o.get_int("loader-threads") : ctx.num_threads;
  lo.num_threads = static_cast<int>(std::max<std::int64_t>(1, threads));
  lo.device = ctx.device;

  DataSources out;
  out.train = data::training_loader(train, batch_size, lo);
  out.samples_per_epoch = out.train->batches_per_epoch() * batch_size * ctx.world_size;
  out.train_cases = train->size();
  // Evaluation: case j goes to rank j % world_size; the DICE metric sums over the ranks.
  const auto n_eval = static_cast<std::int64_t>(index->eval().size());
  for (std::int64_t j = ctx.rank; j < n_eval; j += ctx.world_size) out.eval_cases.push_back(j);
  out.eval_samples = n_eval;
  out.index = std::move(index);
  return out;
}

}  // namespace benchhost::unet3d
