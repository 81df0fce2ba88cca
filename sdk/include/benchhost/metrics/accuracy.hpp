#pragma once
/// @file metrics/accuracy.hpp  Classification accuracies as accumulators that merge across ranks:
/// top-k accuracy (ResNet-50's top-1) and masked-LM accuracy (BERT).
///
/// Definitions:
///   top-k: a sample counts as correct when its label is among the k highest scores of its row,
///     ties broken toward the lower class index (the order torch.topk and a first-index argmax
///     give): correct iff #{c : s_c > s_label, or s_c == s_label and c < label} < k. A NaN score
///     at the label counts as wrong.
///   masked-LM: top-1 accuracy over the masked positions only: rows whose label is negative
///     (padding, -1 or -100) are not counted.
/// Both are correct / counted, over all ranks when compute() is given a communicator: each rank
/// adds its own share of the evaluation set and one allreduce sums the counts.
///
/// Threading: an accumulator is used by one thread at a time.

#include <cstdint>

#include "benchhost/tensor.hpp"

namespace benchhost {

class Communicator;  // comm/communicator.hpp

namespace metrics {

/// Correct and counted samples; the part every accuracy shares.
class CountAccuracy {
 public:
  void reset() { correct_ = counted_ = 0; }
  /// Counts the caller made itself. Throws InvalidArgument when correct > counted or either < 0.
  void add_counts(std::int64_t correct, std::int64_t counted);
  std::int64_t correct() const { return correct_; }  ///< on this rank
  std::int64_t counted() const { return counted_; }  ///< on this rank
  /// correct / counted over this rank, or (comm with more than one rank) over all ranks: a
  /// collective call that every rank makes, every rank gets the same value. NaN when nothing was
  /// counted anywhere.
  double compute(Communicator* comm = nullptr) const;
  /// Counted samples over all ranks (a collective when comm has more than one rank).
  std::int64_t total_counted(Communicator* comm = nullptr) const;

 private:
  std::int64_t correct_ = 0, counted_ = 0;
};

/// Top-k accuracy of score rows against class labels.
class TopKAccuracy : public CountAccuracy {
 public:
  explicit TopKAccuracy(int k = 1);
  int k() const { return k_; }
  /// scores [N, C] (f32, f16 or bf16, any device; logits or probabilities), labels [N] (i32 or
  /// i64) in [0, C). Copies both to the host. Throws InvalidArgument for mismatched shapes or a
  /// label outside [0, C).
  void add(const Tensor& scores, const Tensor& labels);

 private:
  int k_;
};

/// Masked-LM accuracy: top-1 over the positions whose label is >= 0.
class MaskedLmAccuracy : public CountAccuracy {
 public:
  /// scores [M, V] (any float dtype, any device: the arg-max runs there, only M indices are
  /// copied), labels [M] (i32 or i64; negative = not a masked position).
  void add(const Tensor& scores, const Tensor& labels);
};

}  // namespace metrics
}  // namespace benchhost
