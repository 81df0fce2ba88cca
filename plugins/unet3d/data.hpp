#pragma once
/// @file plugins/unet3d/data.hpp  The unet3d workload's data: KiTS19 training patches through the
/// SDK's parallel loader (datasets/kits19), the evaluation cases this rank scores, and synthetic
/// patches for throughput runs.

#include <cstdint>
#include <memory>
#include <vector>

#include "benchhost/data/pipeline.hpp"
#include "benchhost/workload.hpp"
#include "kits19.hpp"
#include "model.hpp"

namespace benchhost::unet3d {

struct DataSources {
  std::shared_ptr<const kits19::Kits19Index> index;  ///< null for synthetic data (declared first: the loader reads it)
  std::unique_ptr<data::BatchSource> train;  ///< {"image" f32 [B,1,p,p,p], "label" u8 [B,1,p,p,p]}
  std::vector<std::int64_t> eval_cases;      ///< this rank's share of the evaluation cases (indices into index->eval())
  std::int64_t samples_per_epoch = 0;        ///< training samples of one epoch over all ranks
  std::int64_t train_cases = 0;              ///< training cases in the set (MLPerf: 168)
  std::int64_t eval_samples = 0;             ///< evaluation cases over all ranks (MLPerf: 42)
};

/// Real (unet3d.data-dir, generated first when unet3d.generate) or synthetic data.
DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size);

}  // namespace benchhost::unet3d
