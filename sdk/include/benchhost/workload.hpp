#pragma once
/// @file workload.hpp  The C++ side of a workload plugin.
///
/// A plugin author writes one class and one macro line:
///
///   class BertWorkload : public benchhost::Workload {
///    public:
///     static benchhost::WorkloadInfo describe();          // required, static: no construction
///     static std::string check_support(const benchhost::RunContext&);  // optional: "" = ok
///     benchhost::RunInfo setup(const benchhost::RunContext& ctx) override;
///     benchhost::StepResult train_step() override;
///     ...
///   };
///   BENCHHOST_PLUGIN(BertWorkload)
///
/// The macro defines the extern "C" entry point and trampolines that catch every exception and
/// turn it into a bh_status plus message (see error.hpp for the mapping). The workload never
/// measures time: the host owns every clock.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/mlperf_rules.hpp"
#include "benchhost/options.hpp"
#include "benchhost/plugin_abi.h"

namespace benchhost {

class Communicator;  // comm/communicator.hpp

/// Static description of a workload: what `benchhost list` and `info` print, and what the
/// host needs to run it. Serialised to JSON across the boundary.
struct WorkloadInfo {
  std::string name;         ///< plugin name, also the option prefix and configs/<name>/
  std::string version;      ///< plugin version, "1.0.0"
  std::string benchmark;    ///< MLPerf benchmark key ("bert", "resnet", ...); "" if none
  std::string description;
  std::string metric_name;  ///< e.g. "masked_lm_accuracy"
  double metric_target = 0;
  bool higher_is_better = true;
  std::vector<std::string> devices{"cpu"};        ///< device types: "cpu", "cuda"
  std::vector<std::string> precisions{"fp32"};    ///< "fp32", "tf32", "fp16", "bf16", "fp8"
  std::vector<std::string> modes{"ttt", "train", "infer"};
  std::vector<OptionSpec> options;   ///< declared once: options.hpp, Note [Options declared once]
  std::vector<std::string> configs;  ///< config files shipped in configs/<name>/
  std::string default_config;        ///< used when --config is not given ("" = none)
  /// What MLPerf requires of `benchmark` (Note [MLPerf rules declared by the plugin]); unused
  /// when `benchmark` is "".
  mlperf::Rules mlperf;

  std::string to_json() const;
  static WorkloadInfo from_json(const std::string& json);  ///< throws InvalidArgument
};

/// Everything setup() gets from the host.
struct RunContext {
  std::string mode;       ///< "ttt", "train", "infer", "loader"
  Device device;
  std::string precision = "fp32";  ///< "fp32", "tf32", "fp16", "bf16", "fp8"
  std::uint64_t seed = 0;
  std::int64_t batch_size = 0;  ///< per rank; 0 = the workload's configured default
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int num_threads = 1;
  bool synthetic_data = false;
  Options options;  ///< checked against the plugin's declaration, declared defaults behind them
  std::string config_dir;
  /// Owned by the host; null in unit tests and for a plugin that does not share the host's SDK
  /// library (Note [One SDK in the process], docs/plugin-abi.md).
  Communicator* communicator = nullptr;

  /// The context the host passed, its options checked against `declaration`.
  static RunContext from_c(const bh_run_context& c, const std::string& plugin_name,
                           std::vector<OptionSpec> declaration);
};

/// Options for a hand-made context (tests, tools): `values` checked against W's declaration.
template <class W>
Options declared_options(std::map<std::string, std::string> values) {
  WorkloadInfo info = W::describe();
  return Options(info.name, std::move(info.options), std::move(values));
}

/// What setup() tells the host. See bh_run_info for the meaning of each field.
struct RunInfo {
  std::int64_t samples_per_epoch = 0;
  std::int64_t eval_every_samples = 0;
  std::int64_t global_batch_size = 0;
  std::int64_t max_epochs = 1;
  double train_flops_per_sample = 0;
  double infer_flops_per_sample = 0;
  std::int64_t eval_samples = 0;
  /// This configuration's time-to-train target; 0 = WorkloadInfo::metric_target.
  double metric_target = 0;
  /// No time-to-train evaluation before this many training samples (all ranks); the evaluation
  /// points stay the multiples of eval_every_samples (or the epoch ends). 0 = none skipped.
  /// Since ABI 1.3.
  std::int64_t eval_start_samples = 0;
  /// MLLOG's train_samples when the benchmark counts it otherwise than samples_per_epoch (the
  /// dataset's size where an epoch drops a partial batch); 0 = samples_per_epoch. Since ABI 1.3.
  std::int64_t train_samples = 0;
};

/// What one train_step (or infer_step) did. Aggregate: `return {batch, loss};` leaves the
/// mixed-precision fields at "no loss scaling". See bh_step_result for the meaning of each field.
struct StepResult {
  std::int64_t samples = 0;  ///< samples this rank consumed, skipped updates included
  double loss = std::numeric_limits<double>::quiet_NaN();  ///< NaN: not computed (inference)
  /// Dynamic loss scale in use after this step (fp16, e.g. DynamicLossScaler::scale());
  /// 0 = this workload does no loss scaling. Since ABI 1.2.
  double loss_scale = 0;
  /// The optimizer update of this step was skipped because the scaled gradients overflowed
  /// (DynamicLossScaler::unscale_and_update returned false). The host counts these and reports
  /// them. Since ABI 1.2.
  bool update_skipped = false;
};

/// What one evaluate() measured. Aggregate: `return {metric, samples};` is an evaluation logged as
/// that number and judged by the host against the target (as before ABI 1.4).
///
/// Note [Dictionary-valued evaluations]
/// Some benchmarks' MLLOG eval_accuracy is not one number: Mask R-CNN logs
/// {"BBOX": 0.381, "SEGM": 0.342} and is done when both parts reach their targets. Such a workload
/// sets `value_json` to the object MLLOG logs (the host logs it as a JSON value, with the same
/// metadata) and `target_reached` to its own verdict on the several-part target, and still puts one
/// number in `metric` (Mask R-CNN: BBOX), which is what reports, tables and CSV show. The checker
/// tests the logged parts against the plugin's declared per-field targets
/// (mlperf::Rules::closed_target_fields, mlperf_rules.hpp). With several ranks, every rank must
/// return the same verdict (decide it from values reduced across the ranks, like `metric`): each
/// rank's host stops at its own rank's verdict. Since ABI 1.4.
struct EvalResult {
  double metric = 0;
  std::int64_t samples = 0;
  /// MLLOG's eval_accuracy value as JSON text ("{\"BBOX\": 0.381, \"SEGM\": 0.342}"); "" = `metric`.
  /// Text that is not one JSON number or object fails the run.
  std::string value_json{};
  /// The workload's verdict on the target: -1 = none (the host compares `metric` with the
  /// target), 0 = not reached, 1 = reached (time-to-train stops). Other values are an error.
  int target_reached = -1;
};

std::string hyperparameters_to_json(const Hyperparameters& h);

class Workload {
 public:
  virtual ~Workload() = default;
  virtual RunInfo setup(const RunContext& ctx) = 0;
  virtual void begin_epoch(std::int64_t /*epoch*/) {}
  virtual void prepare_batch() {}
  virtual StepResult train_step() = 0;
  virtual EvalResult evaluate() { BH_THROW(Unsupported, "this workload has no evaluation"); }
  virtual StepResult infer_step() { BH_THROW(Unsupported, "this workload has no inference mode"); }
  virtual void synchronize() {}
  /// MLLOG hyperparameter keys (opt_base_learning_rate, global_batch_size, ...).
  virtual Hyperparameters hyperparameters() const { return {}; }
  virtual void teardown() {}
};

namespace detail {

/// Map the exception in flight to a status and write its message into err. Never throws.
bh_status status_from_current_exception(bh_error* err) noexcept;
void set_error(bh_error* err, const char* message) noexcept;

template <class F>
bh_status guarded(bh_error* err, F&& f) noexcept {
  try {
    f();
    return BH_STATUS_OK;
  } catch (...) {
    return status_from_current_exception(err);
  }
}

template <class W>
struct Instance {
  std::unique_ptr<W> workload;
  std::string name;
  std::string hyper_json;
  std::string eval_json;  ///< bh_eval_result.value_json points here until the next call
};

/// Whether the class declares its own `member` (its pointer-to-member type names the class)
/// rather than inheriting Workload's default.
template <class A, class B>
constexpr bool implements(A, B) {
  return !std::is_same_v<A, B>;
}

template <class W>
struct PluginAdapter {
  using I = Instance<W>;
  static I* self(bh_workload* w) { return reinterpret_cast<I*>(w); }
  static const std::string& info_json() {
    static const std::string json = W::describe().to_json();
    return json;
  }
  static const std::string& name() {
    static const std::string n = W::describe().name;
    return n;
  }
  static const std::vector<OptionSpec>& declaration() {
    static const std::vector<OptionSpec> d = W::describe().options;
    return d;
  }
  static RunContext context(const bh_run_context& c) { return RunContext::from_c(c, name(), declaration()); }
  static const char* describe_json() noexcept {
    try {
      return info_json().c_str();
    } catch (...) {
      return nullptr;  // the host reports "describe_json failed"
    }
  }
  static bh_status check_support(const bh_run_context* c, bh_error* err) noexcept {
    return guarded(err, [&] {
      if constexpr (requires(const RunContext& r) { W::check_support(r); }) {
        std::string why = W::check_support(context(*c));
        if (!why.empty()) throw Unsupported(why, __FILE__, __LINE__);
      }
    });
  }
  static bh_status create(bh_workload** out, bh_error* err) noexcept {
    return guarded(err, [&] {
      auto inst = std::make_unique<I>();
      inst->workload = std::make_unique<W>();
      inst->name = name();
      *out = reinterpret_cast<bh_workload*>(inst.release());
    });
  }
  static void destroy(bh_workload* w) noexcept {
    try {
      delete self(w);
    } catch (...) {
    }
  }
  static bh_status setup(bh_workload* w, const bh_run_context* c, bh_run_info* info,
                         bh_error* err) noexcept {
    return guarded(err, [&] {
      RunInfo r = self(w)->workload->setup(context(*c));
      const std::uint32_t host_size = info->struct_size;  // an older host's struct may be shorter
      info->struct_size = std::min<std::uint32_t>(host_size, sizeof(bh_run_info));  // what was filled
      info->samples_per_epoch = r.samples_per_epoch;
      info->eval_every_samples = r.eval_every_samples;
      info->global_batch_size = r.global_batch_size;
      info->max_epochs = r.max_epochs;
      info->train_flops_per_sample = r.train_flops_per_sample;
      info->infer_flops_per_sample = r.infer_flops_per_sample;
      info->eval_samples = r.eval_samples;
      if (BH_STRUCT_HAS_FIELD(host_size, bh_run_info, metric_target)) info->metric_target = r.metric_target;
      if (BH_STRUCT_HAS_FIELD(host_size, bh_run_info, eval_start_samples))
        info->eval_start_samples = r.eval_start_samples;
      if (BH_STRUCT_HAS_FIELD(host_size, bh_run_info, train_samples)) info->train_samples = r.train_samples;
    });
  }
  static bh_status begin_epoch(bh_workload* w, std::int64_t e, bh_error* err) noexcept {
    return guarded(err, [&] { self(w)->workload->begin_epoch(e); });
  }
  static bh_status prepare_batch(bh_workload* w, bh_error* err) noexcept {
    return guarded(err, [&] { self(w)->workload->prepare_batch(); });
  }
  static void fill(bh_step_result* out, const StepResult& s) {
    // An older host's struct may be shorter: write only what it covers and say so in struct_size.
    const std::uint32_t host_size = out->struct_size;
    out->struct_size = std::min<std::uint32_t>(host_size, sizeof(bh_step_result));
    out->samples = s.samples;
    out->loss = s.loss;
    if (BH_STRUCT_HAS_FIELD(host_size, bh_step_result, loss_scale)) out->loss_scale = s.loss_scale;
    if (BH_STRUCT_HAS_FIELD(host_size, bh_step_result, update_skipped)) out->update_skipped = s.update_skipped ? 1 : 0;
  }
  static bh_status train_step(bh_workload* w, bh_step_result* out, bh_error* err) noexcept {
    return guarded(err, [&] { fill(out, self(w)->workload->train_step()); });
  }
  static bh_status infer_step(bh_workload* w, bh_step_result* out, bh_error* err) noexcept {
    return guarded(err, [&] { fill(out, self(w)->workload->infer_step()); });
  }
  static bh_status evaluate(bh_workload* w, bh_eval_result* out, bh_error* err) noexcept {
    return guarded(err, [&] {
      EvalResult e = self(w)->workload->evaluate();
      BH_CHECK_AS(InvalidArgument, e.target_reached >= -1 && e.target_reached <= 1,
                  "{}: EvalResult::target_reached is {}; it must be -1 (no verdict), 0 (not reached) or 1 (reached)",
                  name(), e.target_reached);
      // The text lives in the instance until the next call (bh_eval_result.value_json).
      self(w)->eval_json = std::move(e.value_json);
      // An older host's struct may be shorter: write only what it covers and say so in struct_size.
      const std::uint32_t host_size = out->struct_size;
      out->struct_size = std::min<std::uint32_t>(host_size, sizeof(bh_eval_result));
      out->metric = e.metric;
      out->samples = e.samples;
      if (BH_STRUCT_HAS_FIELD(host_size, bh_eval_result, value_json))
        out->value_json = self(w)->eval_json.empty() ? nullptr : self(w)->eval_json.c_str();
      if (BH_STRUCT_HAS_FIELD(host_size, bh_eval_result, target_verdict))
        out->target_verdict = e.target_reached < 0    ? BH_TARGET_HOST_DECIDES
                              : e.target_reached == 0 ? BH_TARGET_NOT_REACHED
                                                      : BH_TARGET_REACHED;
    });
  }
  static bh_status synchronize(bh_workload* w, bh_error* err) noexcept {
    return guarded(err, [&] { self(w)->workload->synchronize(); });
  }
  static const char* hyperparameters_json(bh_workload* w) noexcept {
    try {
      self(w)->hyper_json = hyperparameters_to_json(self(w)->workload->hyperparameters());
      return self(w)->hyper_json.c_str();
    } catch (...) {
      return "{}";
    }
  }
  static bh_status teardown(bh_workload* w, bh_error* err) noexcept {
    return guarded(err, [&] { self(w)->workload->teardown(); });
  }

  static const bh_plugin_descriptor* descriptor() noexcept {
    static bh_plugin_descriptor d = [] {
      bh_plugin_descriptor x{};
      x.abi_major = BENCHHOST_ABI_MAJOR;
      x.abi_minor = BENCHHOST_ABI_MINOR;
      x.struct_size = sizeof(bh_plugin_descriptor);
      static std::string version;
      try {
        version = W::describe().version;
      } catch (...) {
      }
      x.name = name().c_str();
      x.version = version.c_str();
      x.describe_json = &describe_json;
      x.check_support = &check_support;
      x.create = &create;
      x.destroy = &destroy;
      x.setup = &setup;
      // Note [Optional slots]: a slot the class does not implement stays null, so the host can
      // tell (it SKIPs --mode loader without prepare_batch, ttt without evaluate, infer without
      // infer_step) instead of timing a default that does nothing.
      if constexpr (implements(&W::begin_epoch, &Workload::begin_epoch)) x.begin_epoch = &begin_epoch;
      if constexpr (implements(&W::prepare_batch, &Workload::prepare_batch)) x.prepare_batch = &prepare_batch;
      x.train_step = &train_step;
      if constexpr (implements(&W::evaluate, &Workload::evaluate)) x.evaluate = &evaluate;
      if constexpr (implements(&W::infer_step, &Workload::infer_step)) x.infer_step = &infer_step;
      if constexpr (implements(&W::synchronize, &Workload::synchronize)) x.synchronize = &synchronize;
      if constexpr (implements(&W::hyperparameters, &Workload::hyperparameters))
        x.hyperparameters_json = &hyperparameters_json;
      if constexpr (implements(&W::teardown, &Workload::teardown)) x.teardown = &teardown;
      return x;
    }();
    return &d;
  }
};

}  // namespace detail
}  // namespace benchhost

/// Turn a benchhost::Workload subclass into the plugin's C entry point. Use once per plugin.
#define BENCHHOST_PLUGIN(WorkloadClass)                                                     \
  extern "C" __attribute__((visibility("default"))) const bh_plugin_descriptor*            \
  benchhost_plugin_descriptor(void) {                                                       \
    return ::benchhost::detail::PluginAdapter<WorkloadClass>::descriptor();                 \
  }
