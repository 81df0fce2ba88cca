#pragma once
/// @file datasets/criteo/synthetic.hpp  Criteo-shaped data from a planted teacher model.
///
/// Note [Planted teacher]
/// The generator writes the MLPerf multi-hot layout (criteo.hpp) for samples whose click
/// probability is known exactly, so the best achievable AUC is known. Per sample:
///   - 13 dense counts c_j (log-normal, 20% missing = 0), stored as log(c_j + 3) like torchrec;
///   - 26 bags of row ids, hotness_k ids each, drawn with a popularity skew (id = floor(R u^2));
///   - each table row r of table k carries a hidden scalar effect e_k(r) ~ N(0, 1) and a hidden
///     4-vector v_k(r) ~ N(0, I), both pure functions of (seed, k, r) (so tables of any size
///     cost no memory); bag k pools them as s_k = sum e / sqrt(H_k), w_k = sum v / sqrt(H_k);
///   - logit = b + sum_j a_j (x_j - m_j) + 0.6 relu(x_0 - m_0) + sum_k alpha_k s_k
///             (|alpha_k| larger for features whose rows are seen more often per sample)
///             + sum over 8 fixed feature pairs (k1, k2) of 0.35 <w_k1, w_k2>,
///     with b set so that about a quarter of the samples are clicks;
///   - label ~ Bernoulli(sigmoid(logit)).
/// The teacher's probability sigmoid(logit) is the Bayes-optimal score, so its AUC on the
/// validation set (printed by the generator, stored in dataset_info.json) is the ceiling that a
/// trained DLRM approaches. Everything is a pure function of the seed: same options, same bytes.
///
/// Layout written: days 0..train_days-1 with rows_per_day samples, then one evaluation day
/// (eval_rows samples: the first half is the validation set), plus dataset_info.json.

#include <cstdint>
#include <string>
#include <vector>

namespace benchhost::criteo {

struct SyntheticOptions {
  std::string out_dir;
  int train_days = 2;
  std::int64_t rows_per_day = 100000;
  std::int64_t eval_rows = 40000;
  std::vector<std::int64_t> table_sizes;  ///< 26 sizes; empty = mini_table_sizes()
  std::vector<std::int64_t> hotness;      ///< 26 multi-hot sizes; empty = MLPerf's
  std::uint64_t seed = 1;
};

struct SyntheticReport {
  double teacher_auc_validation = 0;  ///< AUC of the teacher's probabilities on the validation set
  double teacher_auc_train = 0;       ///< same on the training days
  double positive_rate = 0;           ///< fraction of clicks over all generated samples
  std::int64_t train_samples = 0, validation_samples = 0;
  bool generated = false;             ///< false: an up-to-date copy was already there
};

/// The mini configuration's table sizes: min(MLPerf size, 1000) per feature.
std::vector<std::int64_t> mini_table_sizes();

/// Generate the layout into opts.out_dir (created; files are written under temporary names and
/// renamed, dataset_info.json last). Throws InvalidArgument for bad options, DataError when the
/// directory cannot be written.
SyntheticReport generate_synthetic(const SyntheticOptions& opts);

/// If opts.out_dir/dataset_info.json records exactly these options (and the files exist), return
/// its report without regenerating; otherwise generate. Safe to race with another process doing
/// the same (both write identical bytes; renames are atomic).
SyntheticReport ensure_synthetic(const SyntheticOptions& opts);

}  // namespace benchhost::criteo
