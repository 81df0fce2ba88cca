#pragma once
/// @file plugins/dlrm_dcnv2/data.hpp  Where the dlrm_dcnv2 samples come from.
///
/// Two sources of the same shapes (13 dense features, 26 multi-hot bags, a click label):
///   - MLPerf's Criteo multi-hot days under --dlrm_dcnv2.data-dir (the readers are
///     datasets/criteo/criteo.hpp), read batch by batch in file order: the reference does not
///     reshuffle the pre-shuffled days. With `generate = true` a missing directory is first
///     filled by the planted-teacher generator (datasets/criteo/synthetic.hpp) from the gen-*
///     options; rank 0 generates, the other ranks wait for it.
///   - a synthetic source (--synthetic, or inference without a data-dir): a few fixed random
///     batches, for throughput runs.
///
/// Threading: built once in setup(); the readers are immutable afterwards (criteo.hpp).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/options.hpp"
#include "benchhost/workload.hpp"
#include "criteo.hpp"
#include "model.hpp"

namespace dlrm {

/// The samples of one run, on the CPU.
struct DlrmData {
  /// The Criteo source's training days and validation half-day; null with the synthetic source.
  std::unique_ptr<benchhost::criteo::CriteoMultiHot> train, validation;
  /// The synthetic source: a few fixed batches of the local batch size; empty otherwise.
  std::vector<benchhost::criteo::Batch> synthetic;
  /// Training samples of one epoch (samples): whole global batches only.
  std::int64_t train_size = 0;
  /// The planted teacher's validation AUC when the data was generated (or found generated); 0
  /// otherwise.
  double teacher_auc = 0;
};

/// The synthetic source: four fixed batches of `local_batch` samples drawn from `seed` (dense
/// log(3 + U(0, 20)), ids uniform over each table, 25% clicks); an epoch is 256 global batches.
DlrmData synthetic_data(const DlrmConfig& c, std::int64_t local_batch, std::int64_t global_batch,
                        std::uint64_t seed);

/// The Criteo source of options data-dir and num-days, generated first when `generate` is set
/// (the gen-* options; the days then number gen-days + 1). Throws InvalidArgument without a
/// data-dir, DataError when the days are missing, unreadable, of other multi-hot sizes than `c`,
/// or hold less than one global batch of training samples.
DlrmData criteo_data(const benchhost::Options& o, const DlrmConfig& c, std::int64_t global_batch,
                     const benchhost::RunContext& ctx);

}  // namespace dlrm
