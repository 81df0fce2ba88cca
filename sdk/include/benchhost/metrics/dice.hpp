#pragma once
/// @file metrics/dice.hpp  The 3D U-Net (KiTS19) evaluation metric: per-class Dice of predicted
/// class maps, averaged over cases, merged across ranks.
///
/// Definition (MLPerf image_segmentation/pytorch model/losses.py DiceScore: argmax of the logits,
/// one-hot of prediction and target, background excluded, smooth_nr = smooth_dr = 1e-6):
///   for one case and class c:  dice_c = (2 |P_c ∩ T_c| + 1e-6) / (|P_c| + |T_c| + 1e-6)
/// where P_c, T_c are the voxels predicted / labelled c; a class absent from both scores 1.0, a
/// class in only one of them scores ~0. per_class()[c-1] is the mean of dice_c over all cases,
/// c = 1..C-1; mean() averages those (MLPerf's "mean_dice" = (L1 dice + L2 dice) / 2).
///
/// Note [Dice across ranks]
/// The reference averages each rank's mean over its own eval shard (reduce_tensor of per-rank
/// means), which weighs cases unequally when the shards differ in size (42 eval cases over 8
/// ranks: shards of 6 and 5). Here every rank adds the Dice values of its own cases and one
/// allreduce sums (sum of dice per class, case count), so the result is the mean over all cases,
/// whatever the sharding; with equal shards the two agree. Counts are summed in double precision
/// from exact integer voxel counts (the reference sums one-hot floats in float32).
///
/// Threading: an accumulator is used by one thread at a time.

#include <cstdint>
#include <vector>

#include "benchhost/tensor.hpp"

namespace benchhost {

class Communicator;  // comm/communicator.hpp

namespace metrics {

class DiceScore {
 public:
  /// num_classes >= 2 (class 0 is the background and not scored). Throws InvalidArgument.
  explicit DiceScore(int num_classes = 3);
  int num_classes() const { return num_classes_; }
  /// One case: `prediction` and `label` are class maps of equal shape (any rank), u8 (or i32 /
  /// i64), any device (copied to the host). Throws InvalidArgument for mismatched shapes, an
  /// unsupported dtype or a class outside [0, num_classes).
  void add(const Tensor& prediction, const Tensor& label);
  /// Mean over cases of dice_c for c = 1..C-1; over all ranks when comm has more than one rank
  /// (a collective every rank calls, Note [Dice across ranks]). NaN entries when no case was added
  /// anywhere.
  std::vector<double> per_class(Communicator* comm = nullptr) const;
  /// Average of per_class() (a collective like per_class()).
  double mean(Communicator* comm = nullptr) const;
  /// Cases added on this rank.
  std::int64_t cases() const { return cases_; }
  void reset();

 private:
  int num_classes_;
  std::vector<double> dice_sums_;  ///< per class 1..C-1, sum over this rank's cases
  std::int64_t cases_ = 0;
};

}  // namespace metrics
}  // namespace benchhost
