#pragma once
// The RunContext of a language-model plugin's mini configuration, as the bert and gpt3 tests run
// it: the config file's values, the data folder moved under the build tree (its name encodes the
// build options), explicit overrides, and a calibration aid:
// BH_MINI_OVERRIDES="lr=0.01,warmup-steps=5" replaces config values when no overrides are given.
// Every value is checked against the workload's declared options, with the declared defaults
// behind them (declared_options<W>); option_refusal<W> says how a value is refused.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "benchhost/options.hpp"
#include "benchhost/workload.hpp"

namespace benchhost::test_support {

/// W is the workload class (bert::BertWorkload, gpt3::GptWorkload): its name picks
/// configs/<name>/mini.conf.
template <class W>
RunContext lm_mini_context(const std::map<std::string, std::string>& overrides = {}) {
  const std::string plugin = W::describe().name;
  auto values = plugin_values(
      read_config_file(std::string(BENCHHOST_SOURCE_DIR) + "/configs/" + plugin + "/mini.conf"), plugin);
  values["data-dir"] = std::string(BENCHHOST_BINARY_DIR) + "/test-data/" +
                       values["data-dir"].substr(values["data-dir"].find_last_of('/') + 1);
  for (const auto& [k, v] : overrides) values[k] = v;
  if (const char* env = std::getenv("BH_MINI_OVERRIDES"); env && overrides.empty()) {
    const std::string list = env;
    for (std::size_t pos = 0; pos < list.size();) {
      std::size_t end = list.find(',', pos);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(pos, end - pos);
      const std::size_t eq = item.find('=');
      if (eq != std::string::npos) values[item.substr(0, eq)] = item.substr(eq + 1);
      pos = end + 1;
    }
  }
  RunContext ctx;
  ctx.mode = "ttt";
  ctx.seed = 1;
  ctx.num_threads = 2;
  ctx.options = declared_options<W>(values);
  return ctx;
}

/// The message with which W's declaration refuses `value` for its option `name` (InvalidArgument
/// from declared_options<W>), or "(accepted)".
template <class W>
std::string option_refusal(const std::string& name, const std::string& value) {
  try {
    declared_options<W>({{name, value}});
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  return "(accepted)";
}

/// The host's time-to-train loop in miniature: train epoch by epoch, evaluate every
/// info.eval_every_samples, stop at the target or after a sample budget (BH_MINI_BUDGET, else
/// `default_budget`: about twice what the mini target needs). BH_VERBOSE prints each evaluation.
struct MiniRun {
  double metric = NAN;
  std::int64_t samples = 0;
  bool reached = false;
  bool finite_loss = true;  ///< false: a training loss was NaN/Inf and the run stopped there
  std::int64_t steps = 0;            ///< train_step() calls
  std::int64_t updates_skipped = 0;  ///< steps that reported StepResult::update_skipped
  double loss_scale = 0;             ///< the last step's StepResult::loss_scale
};

inline MiniRun train_to_target(Workload& w, const RunInfo& info, double target, bool higher_is_better,
                               std::int64_t default_budget = 16000) {
  const bool verbose = std::getenv("BH_VERBOSE") != nullptr;
  const std::int64_t budget = std::getenv("BH_MINI_BUDGET") ? std::atoll(std::getenv("BH_MINI_BUDGET")) : default_budget;
  MiniRun run;
  std::int64_t next_eval = info.eval_every_samples;
  for (std::int64_t epoch = 0; epoch < info.max_epochs && !run.reached; ++epoch) {
    w.begin_epoch(epoch);
    for (std::int64_t done = 0; done < info.samples_per_epoch && !run.reached && run.samples < budget;) {
      const StepResult r = w.train_step();
      done += r.samples;
      run.samples += r.samples;
      ++run.steps;
      run.updates_skipped += r.update_skipped ? 1 : 0;
      run.loss_scale = r.loss_scale;
      if (!std::isfinite(r.loss)) {
        run.finite_loss = false;
        return run;
      }
      if (run.samples >= next_eval) {
        next_eval += info.eval_every_samples;
        run.metric = w.evaluate().metric;
        run.reached = higher_is_better ? run.metric >= target : run.metric <= target;
        if (verbose) {
          std::printf("  samples %lld train loss %.4f eval %.4f\n", static_cast<long long>(run.samples), r.loss, run.metric);
          std::fflush(stdout);
        }
      }
    }
  }
  return run;
}

}  // namespace benchhost::test_support
