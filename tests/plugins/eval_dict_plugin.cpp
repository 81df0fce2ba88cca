// An evaluation that is a dictionary, as Mask R-CNN's (Note [Dictionary-valued evaluations],
// workload.hpp): evaluation k (1-based) logs {"BBOX": 0.13 k, "SEGM": 0.12 k} as MLLOG's
// eval_accuracy, puts BBOX in the metric, and says itself whether the target is reached (from
// evaluation `reach-at` on). The describe() target (0.99) is out of the metric's reach before
// evaluation 8, so a run that stops earlier stopped on the workload's verdict. Options make it
// return what a broken plugin might: value_json that is not JSON, or JSON that is not a number or
// an object, or no verdict (the host then compares the metric with `target`). Training does no
// work: steps only count samples.
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "benchhost/workload.hpp"

namespace {

class EvalDictWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "eval_dict";
    i.version = "1.0.0";
    i.description = "evaluations logged as {\"BBOX\": b, \"SEGM\": s} with the workload's verdict (host tests)";
    i.metric_name = "bbox_map";
    i.metric_target = 0.99;
    i.higher_is_better = true;
    i.modes = {"ttt", "train"};
    using benchhost::choice_option;
    using benchhost::float_option;
    using benchhost::int_option;
    i.options = {choice_option("value", "dict", {"dict", "number", "malformed", "array"},
                               "eval_accuracy as a dictionary, the bare metric, text that is not JSON, or a JSON array"),
                 choice_option("verdict", "workload", {"workload", "none"},
                               "the workload decides the target (from reach-at on), or the host compares the metric"),
                 int_option("reach-at", 3, "the first evaluation (1-based) whose verdict is 'reached'").at_least(1),
                 float_option("target", 0, "this configuration's metric target (0 = describe's 0.99)").at_least(0),
                 int_option("max-epochs", 5, "give up after this many epochs").at_least(1).in("epochs")};
    // Note [Dictionary-valued targets] (mlperf_rules.hpp), as closed_maskrcnn.yaml / open_maskrcnn.yaml.
    namespace mlperf = benchhost::mlperf;
    i.mlperf.closed_target_fields = {{"BBOX", mlperf::between(0.377, 1.0, false, true)},
                                     {"SEGM", mlperf::between(0.339, 1.0, false, true)}};
    i.mlperf.open_target_fields = {{"BBOX", mlperf::between(0.0, 1.0, false, true)},
                                   {"SEGM", mlperf::between(0.0, 1.0, false, true)}};
    return i;
  }

  benchhost::RunInfo setup(const benchhost::RunContext& ctx) override {
    value_ = ctx.options.get_string("value");
    verdict_ = ctx.options.get_string("verdict") == "workload";
    reach_at_ = ctx.options.get_int("reach-at");
    benchhost::RunInfo r;
    r.samples_per_epoch = 40;
    r.eval_every_samples = 20;  // two evaluations per epoch
    r.global_batch_size = 4;
    r.max_epochs = ctx.options.get_int("max-epochs");
    r.metric_target = ctx.options.get_float("target");
    r.eval_samples = 10;
    return r;
  }

  benchhost::StepResult train_step() override { return {4, 1.0}; }

  benchhost::EvalResult evaluate() override {
    ++evaluations_;
    const double bbox = static_cast<double>(13 * evaluations_) / 100.0, segm = static_cast<double>(12 * evaluations_) / 100.0;
    benchhost::EvalResult e{bbox, 10};
    if (value_ == "dict") e.value_json = fmt::format("{{\"BBOX\": {}, \"SEGM\": {}}}", bbox, segm);
    if (value_ == "malformed") e.value_json = fmt::format("{{\"BBOX\": {}, \"SEGM\": ", bbox);
    if (value_ == "array") e.value_json = fmt::format("[{}, {}]", bbox, segm);
    if (verdict_) e.target_reached = evaluations_ >= reach_at_ ? 1 : 0;
    return e;
  }

 private:
  std::string value_;
  bool verdict_ = true;
  std::int64_t reach_at_ = 3, evaluations_ = 0;
};

}  // namespace

BENCHHOST_PLUGIN(EvalDictWorkload)
