#pragma once
/// @file metrics/auc.hpp  Exact area under the ROC curve (binary classification).
///
/// AUC is the probability that a random positive scores above a random negative, ties counting
/// one half: AUC = (1 / (P N)) * sum over (positive i, negative j) of [s_i > s_j] + 0.5 [s_i == s_j].
/// It is computed exactly, not from a histogram: the scores are sorted once (O(n log n)) and each
/// group of tied scores contributes pos_in_group * (negatives_below + neg_in_group / 2). This is the
/// trapezoidal area under the ROC curve with tied scores forming one diagonal segment, i.e. the
/// Mann-Whitney U statistic with average ranks for ties — the value torchmetrics' binary AUROC
/// (MLPerf DLRM's reference metric) and sklearn's roc_auc_score report.
///
/// Degenerate input: with no positives or no negatives the AUC is undefined; roc_auc() returns
/// NaN (quiet) and AucAccumulator::compute() does the same, so callers decide (the DLRM plugin
/// raises DataError naming the evaluation set). A NaN score is an InvalidArgument (it has no rank).
/// Labels must be exactly 0 or 1.
///
/// Threading: roc_auc() is re-entrant and sorts with oneTBB inside. An AucAccumulator is used by
/// one thread at a time.

#include <cstdint>
#include <span>
#include <vector>

namespace benchhost {

class Communicator;  // comm/communicator.hpp

namespace metrics {

/// Exact ROC AUC of `scores` against `labels` (same length). Any monotone transform of the scores
/// (logits vs probabilities) gives the same value, except where it creates or breaks ties.
/// @returns AUC in [0, 1], or NaN when one class is absent (including empty input).
/// @throws InvalidArgument for mismatched lengths, a NaN score or a label other than 0/1.
double roc_auc(std::span<const float> scores, std::span<const float> labels);

/// Collects (score, label) pairs over an evaluation pass, possibly on many ranks, and computes the
/// exact AUC over the union. Memory: 8 bytes per sample on each rank; compute() with a
/// communicator of size W gathers every rank's pairs onto every rank (8 bytes x total samples).
class AucAccumulator {
 public:
  void reset();
  /// Append a batch. Throws InvalidArgument for mismatched lengths or a label other than 0/1.
  void add(std::span<const float> scores, std::span<const float> labels);
  /// Samples added on this rank.
  std::int64_t size() const { return static_cast<std::int64_t>(scores_.size()); }
  /// Exact AUC over this rank's pairs, or (comm != nullptr with more than one rank) over all
  /// ranks' pairs: a collective call, every rank must call it, every rank gets the same value.
  double compute(Communicator* comm = nullptr) const;
  /// Total samples over all ranks (a collective when comm has more than one rank).
  std::int64_t total_size(Communicator* comm = nullptr) const;

 private:
  std::vector<float> scores_;
  std::vector<float> labels_;
};

}  // namespace metrics
}  // namespace benchhost
