#pragma once
/// @file mlperf_rules.hpp  What MLPerf requires of a benchmark, declared by its plugin.
///
/// Note [MLPerf rules declared by the plugin]
/// The MLPerf Training rules and mlcommons/logging's compliance files (training_3.0.0/
/// closed_<benchmark>.yaml) fix, per benchmark, which hyperparameter keys a result logs and how
/// often, which values the closed division allows, the quality target, how many runs are scored
/// and how many of the fastest and slowest are dropped (the olympic mean), and when the model is
/// evaluated. A plugin declares all of this in WorkloadInfo::mlperf, next to the code that logs
/// the keys, and nothing outside the plugin's folder names a benchmark:
///   - the host logs submission_division closed for a declared closed benchmark (unless the run
///     says otherwise) and takes the olympic drops from the declaration;
///   - tools/mllog_check.py reads the declarations (`benchhost list --json`) and checks an MLLOG
///     file against the one whose benchmark key the file names.
/// The rules travel inside describe_json under "mlperf" (docs/plugin-abi.md), so an old host or
/// plugin that does not know them ignores them.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace benchhost {

/// MLLOG hyperparameter values keep their JSON type; lists become JSON arrays.
/// One key is special: "weights_initialization", a list of tensor names, which the host logs as
/// one weights_initialization event per tensor with metadata {"tensor": name} (the form the
/// closed resnet rules check) instead of as a hyperparameter.
using HyperValue = std::variant<std::int64_t, double, std::string, bool, std::vector<double>,
                                std::vector<std::string>>;
using Hyperparameters = std::vector<std::pair<std::string, HyperValue>>;

namespace mlperf {

/// A test of one logged value. Empty (the default) accepts anything.
struct ValueCheck {
  /// The value must equal one of these (numbers compare as numbers: 0 == 0.0).
  std::vector<HyperValue> one_of;
  /// Bounds on a numeric value; a non-number fails a bounded check.
  std::optional<double> min, max;
  bool min_exclusive = false, max_exclusive = false;

  bool empty() const { return one_of.empty() && !min && !max; }
};
ValueCheck equals(HyperValue v);
ValueCheck one_of(std::vector<HyperValue> values);
ValueCheck positive();  ///< a number > 0
/// lo <= v <= hi, each bound exclusive on request: between(0.759, 1.0, false, true) is [0.759, 1).
ValueCheck between(double lo, double hi, bool lo_exclusive = false, bool hi_exclusive = false);

/// Checks of a dictionary's fields, by field name, in the order the rules state them.
using FieldChecks = std::vector<std::pair<std::string, ValueCheck>>;

enum class Occurrence { exactly_one, at_least_one };

/// One MLLOG key the benchmark's compliance rules require.
struct LoggedKey {
  std::string key;
  Occurrence occurrence = Occurrence::exactly_one;
  ValueCheck check;         ///< holds in both divisions
  ValueCheck closed_check;  ///< the closed division adds this
  /// Required only when the key `when_key` was logged with the value `when_value`
  /// (e.g. lars_opt_momentum when opt_name is "lars"); "" = always.
  std::string when_key, when_value;
  /// Each event must carry this metadata field ("tensor" for weights_initialization); "" = none.
  std::string metadata_field;
  /// Closed division: the set of that field's values over all events must be exactly this.
  std::vector<std::string> closed_metadata_values;
};

/// A key logged exactly once, with the check of both divisions and the one the closed adds.
LoggedKey logged_once(std::string key, ValueCheck check = {}, ValueCheck closed_check = {});
/// The same key required only when `when_key` was logged as `when_value` (e.g. the LARS keys).
LoggedKey logged_once_when(std::string key, std::string when_key, std::string when_value);

/// A benchmark's MLPerf rules. WorkloadInfo::benchmark is its key ("resnet", "bert", ...).
struct Rules {
  /// The plugin implements the closed-division reference of this benchmark: a run logs
  /// submission_division closed unless its configuration says open (a scaled mini does).
  bool closed_division = false;
  /// Keys beyond the common ones (submission_*, init/run/epoch/eval markers, train_samples,
  /// eval_samples, which every benchmark logs).
  std::vector<LoggedKey> keys;
  /// Closed division: some eval_accuracy must pass this (the quality target).
  ValueCheck closed_target;
  /// Open division: some eval_accuracy must pass this (open_<benchmark>.yaml: rnnt, unet3d and
  /// ssd require one value below 1.0, so that a perfect score on trivial data is not a result).
  ValueCheck open_target;
  /// Note [Dictionary-valued targets]
  /// A benchmark whose eval_accuracy is a dictionary (Mask R-CNN's {"BBOX": b, "SEGM": s}; Note
  /// [Dictionary-valued evaluations], workload.hpp) declares its targets field by field here
  /// instead of in closed_target / open_target. Declaring either list makes every eval_accuracy of
  /// the benchmark a dictionary with every field either list names (in both divisions, as
  /// closed_maskrcnn.yaml's CHECK says); without them every eval_accuracy is a number. The target
  /// is reached when one evaluation passes every listed check at once:
  ///   closed_target_fields = {{"BBOX", between(0.377, 1, false, true)},
  ///                           {"SEGM", between(0.339, 1, false, true)}};
  ///   open_target_fields = {{"BBOX", between(0, 1, false, true)}, ...};   // each below 1
  /// The host does not read these: it stops at the workload's verdict (EvalResult::target_reached).
  /// Closed division: some eval_accuracy, a dictionary, must pass all of these.
  FieldChecks closed_target_fields;
  /// Open division: some eval_accuracy, a dictionary, must pass all of these.
  FieldChecks open_target_fields;
  /// eval_accuracy is a dictionary (Note [Dictionary-valued targets]).
  bool eval_accuracy_is_dictionary() const { return !closed_target_fields.empty() || !open_target_fields.empty(); }
  /// Closed division: the eval_samples value the rules fix (empty = any).
  ValueCheck closed_eval_samples;
  /// Runs MLPerf scores a result from, and how many of the fastest and of the slowest are
  /// dropped before the mean (MLPerf Training rules, "Benchmark results").
  int runs = 1;
  int olympic_drop_each_side = 1;
  /// When the reference evaluates, in the rules' words ("every 4 epochs", ...).
  std::string eval_cadence;
};

}  // namespace mlperf
}  // namespace benchhost
