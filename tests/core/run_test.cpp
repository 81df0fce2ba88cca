// Run modes through the host library (in-process) and through the real executable (subprocess):
// host overhead with the null plugin, SKIPPED, time to train with the toy plugin, failures as
// results, exit codes, interrupts and timeouts.
#include <gtest/gtest.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "reporters.hpp"
#include "run_modes.hpp"
#include "test_support.hpp"

using namespace benchhost::host;
using nlohmann::json;

namespace {

struct InProcessRun {
  std::vector<RunRecord> records;
  nlohmann::ordered_json ttt;
  std::vector<MllogEvent> mllog;
};

InProcessRun run_in_process(const std::string& plugin_name, std::vector<std::string> args) {
  BrokenPlugin why;
  auto plugin = load_plugin(bhtest::plugin_file(plugin_name), &why);
  if (!plugin) throw std::runtime_error(why.reason);
  std::vector<const char*> argv{"benchhost", "--plugin", plugin_name.c_str()};
  for (auto& a : args) argv.push_back(a.c_str());
  Settings s = parse_cli(static_cast<int>(argv.size()), argv.data(), &plugin->info, {});
  InProcessRun out;
  EventBus bus;
  bus.add(std::make_unique<bhtest::CapturingReporter>(&out.mllog));
  out.ttt = run_selected_mode(s, plugin, Placement{}, bus);
  out.records = bus.records();
  return out;
}

}  // namespace

TEST(RunModes, NullPluginMeasuresHostOverheadPerStep) {
  constexpr int kSteps = 20000;
  InProcessRun r = run_in_process("null", {"--mode", "train", "-b", "1", "-w", "100", "-i", std::to_string(kSteps)});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  EXPECT_EQ(rec.iterations, kSteps);
  EXPECT_EQ(rec.samples, kSteps);
  ASSERT_TRUE(rec.step_ms_mean && rec.step_ms_p50 && rec.step_ms_p99 && rec.samples_per_second);
  EXPECT_LE(*rec.step_ms_p50, *rec.step_ms_p99);
  // The null plugin does nothing, so the whole step is the host's cost: prepare_batch +
  // train_step + synchronize through the C ABI, three clock reads, bookkeeping. Reported, never
  // asserted (tests do not depend on timing).
  const double ns_per_step = *rec.step_ms_mean * 1e6;
  const double wall_ns_per_step = *rec.seconds * 1e9 / kSteps;
  std::cout << fmt::format("[ host overhead ] null plugin: {:.0f} ns/step timed (p50 {:.0f} ns, p99 {:.0f} ns), "
                           "{:.0f} ns/step wall incl. progress events, {:.3g} steps/s\n",
                           ns_per_step, *rec.step_ms_p50 * 1e6, *rec.step_ms_p99 * 1e6, wall_ns_per_step,
                           *rec.samples_per_second);
  ::testing::Test::RecordProperty("host_overhead_ns_per_step", std::to_string(static_cast<long>(ns_per_step)));
  ASSERT_TRUE(rec.data_wait_fraction);
  EXPECT_EQ(rec.mfu_note, "the plugin declares no FLOPs per sample");
}

TEST(RunModes, InferenceReportsLatencyPercentilesPerBatch) {
  InProcessRun r = run_in_process("null", {"--mode", "infer", "-b", "1,8", "-w", "2", "-i", "50"});
  ASSERT_EQ(r.records.size(), 2u);
  for (const auto& rec : r.records) {
    ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
    ASSERT_TRUE(rec.latency_ms_avg && rec.latency_ms_p50 && rec.latency_ms_p90 && rec.latency_ms_p95 &&
                rec.latency_ms_p99);
    EXPECT_LE(*rec.latency_ms_p50, *rec.latency_ms_p99);
  }
  EXPECT_EQ(r.records[1].batch_size, 8);
  EXPECT_EQ(r.records[1].samples, 8 * 50);
}

TEST(RunModes, DeviceCountSweepRelaunchesUnderMpirun) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  // -n 2 from a single process: the host runs the point as `mpirun -np 2 benchhost ... -n 2` and
  // imports the child's record (per-rank step times gathered over the communicator).
  InProcessRun r = run_in_process("null", {"--mode", "train", "-b", "4", "-n", "1,2", "-w", "2", "-i", "20"});
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].status, RunStatus::passed) << r.records[0].message;
  const RunRecord& two = r.records[1];
  if (two.status == RunStatus::failed && two.message.find("built without MPI") != std::string::npos)
    GTEST_SKIP() << "this build has no MPI backend: " << two.message;
  ASSERT_EQ(two.status, RunStatus::passed) << two.message;
  EXPECT_EQ(two.devices, 2);
  EXPECT_EQ(two.samples, 2 * 4 * 20);  // samples of both ranks
  ASSERT_TRUE(two.rank_step_ms_min && two.rank_step_ms_median && two.rank_step_ms_max);
  EXPECT_LE(*two.rank_step_ms_min, *two.rank_step_ms_max);
  EXPECT_TRUE(two.scaling_efficiency.has_value());
}

TEST(RunModes, PointNotMatchingTheLaunchIsSkipped) {
  BrokenPlugin why;
  auto plugin = load_plugin(bhtest::plugin_file("null"), &why);
  ASSERT_TRUE(plugin) << why.reason;
  const char* argv[] = {"benchhost", "--plugin", "null", "--mode", "train", "-n", "3", "-i", "2"};
  Settings s = parse_cli(9, argv, &plugin->info, {});
  EventBus bus;
  Placement under_launcher;
  under_launcher.launcher = "slurm";  // a one-process srun: -n 3 cannot be this job
  run_selected_mode(s, plugin, under_launcher, bus);
  ASSERT_EQ(bus.records().size(), 1u);
  EXPECT_EQ(bus.records()[0].status, RunStatus::skipped);
  EXPECT_NE(bus.records()[0].message.find("-n 3 needs a launch with 3"), std::string::npos) << bus.records()[0].message;
}

TEST(RunModes, CheckSupportDeclineIsSkippedWithReason) {
  InProcessRun r = run_in_process("decline", {"--mode", "train", "-b", "1,2"});
  ASSERT_EQ(r.records.size(), 2u);
  for (const auto& rec : r.records) {
    EXPECT_EQ(rec.status, RunStatus::skipped);
    EXPECT_EQ(rec.message, "needs a GPU");
  }
}

TEST(RunModes, ToyTimeToTrainConvergesAtAnEvaluation) {
  InProcessRun r = run_in_process("toy", {"--seed", "7"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  ASSERT_TRUE(rec.converged && *rec.converged);
  ASSERT_GE(rec.evals.size(), 2u);
  // Evaluations every 128 samples (the toy's eval-every), and only the last one meets the target.
  for (std::size_t k = 0; k < rec.evals.size(); ++k) {
    EXPECT_EQ(rec.evals[k].samples_trained, static_cast<std::int64_t>(128 * (k + 1)));
    if (k + 1 < rec.evals.size()) EXPECT_GT(rec.evals[k].metric, 0.002);
  }
  EXPECT_LE(rec.evals.back().metric, 0.002);
  EXPECT_EQ(rec.seed, derive_seed(7, 0));
  EXPECT_TRUE(rec.time_to_train_seconds.has_value());
  EXPECT_TRUE(rec.data_wait_fraction.has_value());
  // Deterministic: the same seed reaches the target at the same evaluation.
  InProcessRun again = run_in_process("toy", {"--seed", "7"});
  EXPECT_EQ(again.records[0].evals.size(), rec.evals.size());
  EXPECT_EQ(again.records[0].final_metric, rec.final_metric);
}

// bh_run_info.eval_start_samples (ABI 1.3): no evaluation before the start, and the evaluation
// points after it stay on the eval-every grid (3D U-Net: from epoch 1000, every 20 epochs).
TEST(RunModes, EvaluationStartsWhereTheWorkloadSays) {
  InProcessRun r = run_in_process("toy", {"--seed", "7", "--toy.eval-start", "600"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  ASSERT_FALSE(rec.evals.empty());
  EXPECT_EQ(rec.evals.front().samples_trained, 640);  // the first multiple of 128 at or past 600
  for (std::size_t k = 0; k < rec.evals.size(); ++k)
    EXPECT_EQ(rec.evals[k].samples_trained, static_cast<std::int64_t>(640 + 128 * k));
  std::size_t eval_events = 0;
  for (const auto& e : r.mllog) {
    eval_events += e.key == "eval_accuracy";
    if (e.key == "train_samples") EXPECT_EQ(e.value, 512);  // one epoch, when the workload says nothing
  }
  EXPECT_EQ(eval_events, rec.evals.size());
  // bh_run_info.train_samples (ABI 1.3): the dataset's count where an epoch drops a partial batch.
  InProcessRun counted = run_in_process("toy", {"--seed", "7", "--toy.mllog-train-samples", "515"});
  bool logged = false;
  for (const auto& e : counted.mllog)
    if (e.key == "train_samples") logged = e.value == 515;
  EXPECT_TRUE(logged);
  // Per-epoch evaluation (eval-every 0) skips the epoch ends before the start too.
  InProcessRun epochs = run_in_process("toy", {"--toy.lr", "0.0001", "--toy.max-epochs", "3", "--toy.eval-every", "0",
                                               "--toy.eval-start", "1024"});
  ASSERT_EQ(epochs.records.size(), 1u);
  ASSERT_EQ(epochs.records[0].evals.size(), 2u);  // epochs 2 and 3 (512 samples each)
  EXPECT_EQ(epochs.records[0].evals[0].samples_trained, 1024);
}

TEST(RunModes, EpochLimitAbortsAndDivergenceIsDetected) {
  // Too small a learning rate: never reaches the target within 2 epochs -> aborted, FAILED.
  InProcessRun slow = run_in_process("toy", {"--toy.lr", "0.0001", "--toy.max-epochs", "2", "--toy.eval-every", "0"});
  ASSERT_EQ(slow.records.size(), 1u);
  EXPECT_EQ(slow.records[0].status, RunStatus::failed);
  EXPECT_FALSE(*slow.records[0].converged);
  EXPECT_EQ(slow.records[0].epochs, 2);
  EXPECT_EQ(slow.records[0].evals.size(), 2u);  // once per epoch
  EXPECT_EQ(slow.ttt["status"], "INVALID");
  bool aborted = false;
  for (const auto& e : slow.mllog)
    if (e.key == "run_stop") aborted = e.metadata["status"] == "aborted";
  EXPECT_TRUE(aborted);
  // Far too large a learning rate: the loss overflows to Inf/NaN -> DIVERGED.
  InProcessRun wild = run_in_process("toy", {"--toy.lr", "5"});
  ASSERT_EQ(wild.records.size(), 1u);
  EXPECT_EQ(wild.records[0].status, RunStatus::diverged) << wild.records[0].message;
}

TEST(RunModes, RunsGetDistinctLoggedSeedsAndAnOlympicMean) {
  InProcessRun r = run_in_process("toy", {"--runs", "3", "--seed", "11"});
  ASSERT_EQ(r.records.size(), 3u);
  std::set<std::uint64_t> seeds;
  for (const auto& rec : r.records) seeds.insert(rec.seed);
  EXPECT_EQ(seeds.size(), 3u);
  std::vector<std::uint64_t> logged;
  for (const auto& e : r.mllog)
    if (e.key == "seed") logged.push_back(e.value.get<std::uint64_t>());
  EXPECT_EQ(logged.size(), 3u);
  EXPECT_EQ(std::set<std::uint64_t>(logged.begin(), logged.end()), seeds);
  EXPECT_EQ(r.ttt["status"], "VALID");
  EXPECT_EQ(r.ttt["dropped_each_side"], 1);
  EXPECT_EQ(r.ttt["kept_runs"].size(), 1u);
}

TEST(RunModes, InterruptStopsTheLoopAndKeepsWhatWasMeasured) {
  raise_interrupt_for_testing(SIGINT);
  InProcessRun r = run_in_process("null", {"--mode", "train", "-b", "1,2", "-i", "5"});
  raise_interrupt_for_testing(0);
  EXPECT_TRUE(r.records.empty());  // the grid stops before starting a new point
  raise_interrupt_for_testing(0);
}

TEST(RunModes, TimeoutIsATypedResult) {
  InProcessRun r = run_in_process("null", {"--mode", "train", "-i", "100000000", "--timeout", "1e-9"});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].status, RunStatus::timeout);
  EXPECT_NE(r.records[0].message.find("--timeout"), std::string::npos);
}

// ---- the real executable -------------------------------------------------------------------------

namespace {
std::string dirs() {
  return fmt::format("--plugin-dir '{}' ", bhtest::plugin_dir().string());
}
}  // namespace

// Note [Op times]: BENCHHOST_OP_TIMES ranks the ops of the timed steps only; the warm-up steps, whose
// first call of each shape autotunes, and the peak calibration after them are not counted. DLRM's
// optimizer runs once a step: 3 timed steps after 2 warm-up ones are 3 calls, not 5.
TEST(Executable, OpTimesCountTheTimedStepsOnly) {
  bhtest::TempDir tmp("op_times");
  auto p = bhtest::run_command(fmt::format(
      "BENCHHOST_OP_TIMES=1 '{}' --plugin-dir '{}' --plugin dlrm_dcnv2 --config mini --synthetic --mode train "
      "-b 4 -w 2 -i 3 -o '{}'",
      BENCHHOST_EXECUTABLE, BENCHHOST_PLUGIN_DIR, (tmp.path / "r.json").string()));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("\nbenchhost_op_times,optim_adagrad_multi,f32,3,"), std::string::npos) << p.output;
}

TEST(Executable, ThrowInSetupIsATypedFailureAndTheHostExitsCleanly) {
  bhtest::TempDir tmp("throw_setup");
  const auto report = tmp.path / "report.json";
  auto p = bhtest::run_benchhost(dirs() + "--plugin throw_setup -b 1 -i 3 -o '" + report.string() + "'");
  EXPECT_EQ(p.exit_code, kExitRunFailed) << p.output;
  EXPECT_NE(p.output.find("FAILED"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("/nonexistent/throw_setup/train.bin"), std::string::npos) << p.output;
  json j = json::parse(bhtest::read_file(report));
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["status"], "FAILED");
  EXPECT_EQ(j["summary"]["complete"], true);
  EXPECT_EQ(j["summary"]["exit_code"], kExitRunFailed);
}

TEST(Executable, ThrowMidRunKeepsEarlierSweepPoints) {
  bhtest::TempDir tmp("throw_midrun");
  const auto report = tmp.path / "report.json";
  const auto csv = tmp.path / "report.csv";
  auto p = bhtest::run_benchhost(dirs() + "--plugin throw_midrun -b 1,2,4,8 -w 1 -i 5 -o '" + report.string() +
                                 "' --csv '" + csv.string() + "'");
  EXPECT_EQ(p.exit_code, kExitRunFailed) << p.output;
  json j = json::parse(bhtest::read_file(report));
  ASSERT_EQ(j["results"].size(), 4u) << j.dump(2);
  EXPECT_EQ(j["results"][0]["status"], "PASSED");
  EXPECT_EQ(j["results"][1]["status"], "PASSED");
  EXPECT_EQ(j["results"][2]["status"], "OOM");
  EXPECT_NE(j["results"][2]["message"].get<std::string>().find("smaller batch size"), std::string::npos);
  EXPECT_EQ(j["results"][3]["status"], "PASSED");  // the host went on after the failure
  EXPECT_GT(j["results"][0]["samples_per_second"].get<double>(), 0);
  const std::string rows = bhtest::read_file(csv);
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 5) << rows;
  EXPECT_NE(rows.find(",OOM,"), std::string::npos);
  // No temporary files are left next to the reports.
  for (const auto& e : std::filesystem::directory_iterator(tmp.path))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Executable, DeclinedRunExitsAllSkipped) {
  auto p = bhtest::run_benchhost(dirs() + "--plugin decline");
  EXPECT_EQ(p.exit_code, kExitAllSkipped) << p.output;
  EXPECT_NE(p.output.find("SKIPPED"), std::string::npos);
  EXPECT_NE(p.output.find("needs a GPU"), std::string::npos);
}

TEST(Executable, ListShowsPluginsAndBrokenFiles) {
  auto p = bhtest::run_benchhost("list " + dirs() + fmt::format("--plugin-dir '{}'", bhtest::broken_dir().string()));
  EXPECT_EQ(p.exit_code, kExitOk) << p.output;
  for (const char* s : {"null", "toy", "decline", "Broken plugin files", "abi_major_mismatch.so", "missing_symbol.so",
                        "not_a_library.so"})
    EXPECT_NE(p.output.find(s), std::string::npos) << s << "\n" << p.output;
}

TEST(Executable, InfoAndPluginHelpShowPluginOptions) {
  auto info = bhtest::run_benchhost("info toy " + dirs());
  EXPECT_EQ(info.exit_code, kExitOk) << info.output;
  EXPECT_NE(info.output.find("--toy.lr"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("float"), std::string::npos);
  auto help = bhtest::run_benchhost(dirs() + "--plugin toy --help");
  EXPECT_EQ(help.exit_code, kExitOk) << help.output;
  EXPECT_NE(help.output.find("--toy.eval-every"), std::string::npos) << help.output;
}

// A plugin without the SDK library runs, and gets no communicator (its setup fails if it does).
TEST(Executable, APluginWithoutTheSdkRunsWithoutACommunicator) {
  auto p = bhtest::run_benchhost(dirs() + "--plugin no_sdk --mode train -b 2 -w 0 -i 3");
  EXPECT_EQ(p.exit_code, kExitOk) << p.output;
}

TEST(Executable, UsageErrorsNameTheProblem) {
  auto p = bhtest::run_benchhost(dirs() + "--plugin toy --toy.learning-rate 3");
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("toy.learning-rate"), std::string::npos) << p.output;
  p = bhtest::run_benchhost(dirs() + "--plugin toi");
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("did you mean 'toy'"), std::string::npos) << p.output;
  p = bhtest::run_benchhost(dirs() + fmt::format("--plugin-dir '{}' --plugin missing_symbol", bhtest::broken_dir().string()));
  EXPECT_EQ(p.exit_code, kExitUsage) << p.output;
  EXPECT_NE(p.output.find("cannot be used"), std::string::npos) << p.output;
}

TEST(AtomicWrite, ReplacesWholeFile) {
  bhtest::TempDir tmp("atomic");
  const auto f = tmp.path / "sub" / "r.json";
  write_file_atomically(f, "first");
  write_file_atomically(f, "second");
  EXPECT_EQ(bhtest::read_file(f), "second");
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(f.parent_path())) n += !e.path().empty();
  EXPECT_EQ(n, 1u);
}

TEST(RunModes, LoaderModeMeasuresTheDataPipelineOnly) {
  InProcessRun r = run_in_process("toy", {"--mode", "loader", "-b", "32", "-w", "1", "-i", "10"});
  ASSERT_EQ(r.records.size(), 1u);
  ASSERT_EQ(r.records[0].status, RunStatus::passed) << r.records[0].message;
  EXPECT_EQ(r.records[0].kind, "loader");
  EXPECT_EQ(r.records[0].samples, 320);
  EXPECT_TRUE(r.records[0].samples_per_second.has_value());
  EXPECT_FALSE(r.records[0].final_loss.has_value());  // train_step was never called
}

// Note [Optional slots] (workload.hpp): a plugin that does not implement prepare_batch has a null
// slot, so --mode loader is SKIPPED with the reason instead of timing nothing (the null plugin
// once "loaded" millions of samples per second).
TEST(RunModes, LoaderModeWithoutADataStepIsSkipped) {
  InProcessRun r = run_in_process("null", {"--mode", "loader", "-b", "32", "-w", "1", "-i", "10"});
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].status, RunStatus::skipped);
  EXPECT_NE(r.records[0].message.find("has no prepare_batch slot"), std::string::npos) << r.records[0].message;
  BrokenPlugin why;
  const auto null = load_plugin(bhtest::plugin_file("null"), &why);
  ASSERT_TRUE(null) << why.reason;
  EXPECT_EQ(null->descriptor.prepare_batch, nullptr);
  EXPECT_EQ(null->descriptor.evaluate, nullptr);
  EXPECT_NE(null->descriptor.infer_step, nullptr);
}

TEST(Mllog, OneFilePerRunWhenRunsAboveOne) {
  EXPECT_EQ(MllogReporter::path_for_run("out/result.txt", 0, 1), std::filesystem::path("out/result.txt"));
  EXPECT_EQ(MllogReporter::path_for_run("out/result.txt", 3, 5), std::filesystem::path("out/result_3.txt"));
}

// ---- mixed-precision step outcomes (ABI 1.2) -----------------------------------------------------
// The loss_scaling test plugin overflows on the 1-based steps (since setup, warm-up included) given
// in --loss_scaling.overflow-steps: each halves the scale from 65536; growth-interval clean steps
// in a row double it.

namespace {
// -w 2 -i 10: steps 1-2 are warm-up, 3-12 timed. Overflows at 1 (warm-up: not counted), 4, 5, 9.
// Scale: 1 ovf 32768 | 2, 3 clean | 4 ovf 16384 | 5 ovf 8192 | 6, 7, 8 clean -> 16384 | 9 ovf 8192 |
// 10, 11, 12 clean -> 16384.
const std::vector<std::string> kScaledTrainPoint{"--mode", "train", "-b", "4", "-w", "2", "-i", "10",
                                                 "--loss_scaling.overflow-steps", "1,4,5,9",
                                                 "--loss_scaling.growth-interval", "3"};
std::vector<std::string> with(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}
std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += " " + a;
  return out;
}
}  // namespace

TEST(LossScaling, ThroughputCountsSkippedUpdatesOfTimedStepsOnly) {
  InProcessRun r = run_in_process("loss_scaling", with(kScaledTrainPoint, {"--precision", "fp16"}));
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  EXPECT_EQ(rec.iterations, 10);
  ASSERT_TRUE(rec.updates_skipped.has_value());
  EXPECT_EQ(*rec.updates_skipped, 3);  // 4 with the warm-up overflow at step 1
  ASSERT_TRUE(rec.loss_scale.has_value());
  EXPECT_EQ(*rec.loss_scale, 16384);
  EXPECT_EQ(rec.message, "");
}

TEST(LossScaling, TimeToTrainCountsEveryTrainingStep) {
  // 8 steps (4 samples each) per epoch, evaluation after each; the metric is updates applied, target
  // 10. Overflows at 2, 3, 5: 5 applied after epoch 1, 13 after epoch 2 -> converged in 16 steps.
  InProcessRun r = run_in_process("loss_scaling", {"--precision", "fp16", "--loss_scaling.overflow-steps", "2,3,5"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  ASSERT_EQ(rec.status, RunStatus::passed) << rec.message;
  ASSERT_EQ(rec.evals.size(), 2u);
  EXPECT_EQ(rec.evals[0].metric, 5);
  EXPECT_EQ(rec.evals[1].metric, 13);
  EXPECT_EQ(rec.iterations, 16);
  ASSERT_TRUE(rec.updates_skipped && rec.loss_scale);
  EXPECT_EQ(*rec.updates_skipped, 3);
  EXPECT_EQ(*rec.loss_scale, 65536 / 8);
}

TEST(LossScaling, RunWithoutLossScalingReportsNothingNew) {
  InProcessRun r = run_in_process("loss_scaling", with(kScaledTrainPoint, {"--precision", "fp32"}));
  ASSERT_EQ(r.records.size(), 1u);
  ASSERT_EQ(r.records[0].status, RunStatus::passed) << r.records[0].message;
  EXPECT_FALSE(r.records[0].updates_skipped.has_value());
  EXPECT_FALSE(r.records[0].loss_scale.has_value());
}

TEST(LossScaling, RunThatNeverUpdatedItsWeightsIsFlagged) {
  const std::string note = "every optimizer update was skipped: the loss scale never found a finite gradient";
  InProcessRun r = run_in_process("loss_scaling", {"--mode", "train", "--precision", "fp16", "-b", "4", "-w", "1", "-i",
                                                   "20", "--loss_scaling.overflow-every-step", "true"});
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& rec = r.records[0];
  EXPECT_EQ(rec.status, RunStatus::passed);  // it measured something; the note says what
  EXPECT_EQ(rec.message, note);
  ASSERT_TRUE(rec.updates_skipped && rec.loss_scale);
  EXPECT_EQ(*rec.updates_skipped, 20);
  EXPECT_EQ(*rec.loss_scale, 1);  // 2^16 halved 21 times, held at the minimum
  // One clean timed step is enough to drop the note.
  InProcessRun one_clean = run_in_process("loss_scaling", {"--mode", "train", "--precision", "fp16", "-w", "0", "-i", "3",
                                                           "--loss_scaling.overflow-steps", "1,2"});
  ASSERT_TRUE(one_clean.records[0].updates_skipped);
  EXPECT_EQ(*one_clean.records[0].updates_skipped, 2);
  EXPECT_EQ(one_clean.records[0].message, "");
  // Time to train: it cannot converge (FAILED, aborted); the note follows the reason.
  InProcessRun ttt = run_in_process("loss_scaling", {"--precision", "fp16", "--loss_scaling.overflow-every-step", "true",
                                                     "--loss_scaling.max-epochs", "1"});
  ASSERT_EQ(ttt.records.size(), 1u);
  EXPECT_EQ(ttt.records[0].status, RunStatus::failed);
  EXPECT_NE(ttt.records[0].message.find("did not reach updates_applied"), std::string::npos) << ttt.records[0].message;
  EXPECT_NE(ttt.records[0].message.find("; " + note), std::string::npos) << ttt.records[0].message;
}

// Note [Promoted calls]: the per-op counts survive the JSON round trip a -n sweep's parent makes
// and total into the CSV's last column.
TEST(PromotedCalls, RoundTripThroughJsonAndCsv) {
  RunRecord r;
  r.kind = "train";
  r.precision = "bf16";
  r.promoted_calls = {{"batch_norm_forward", 34}, {"add", 16}};
  const json j = json::parse(record_to_json(r).dump());
  EXPECT_EQ(j["promoted_calls"], json({{"add", 16}, {"batch_norm_forward", 34}}));
  EXPECT_EQ(record_from_json(j).promoted_calls, r.promoted_calls);
  const std::string rows = CsvReporter::render({r});
  // then the (unmeasured) machine-load columns and the five peak columns (Note [Calibrated MFU])
  EXPECT_EQ(rows.substr(rows.size() - 12), ",50,,,,,,,,\n") << rows;
  // The machine load travels the same way (a -n sweep's parent reads its child's report).
  r.machine_load = MachineLoad{2, 1.5, 1.25, 0.01, 3.5, true};
  const RunRecord back = record_from_json(json::parse(record_to_json(r).dump()));
  ASSERT_TRUE(back.machine_load.has_value());
  EXPECT_EQ(back.machine_load->cpus, 2);
  EXPECT_DOUBLE_EQ(back.machine_load->other_cpus, 1.25);
  EXPECT_DOUBLE_EQ(back.machine_load->steal_fraction, 0.01);
  EXPECT_TRUE(back.machine_load->busy);
  const std::string busy_rows = CsvReporter::render({r});
  const std::string busy_row = bhtest::without_last_csv_fields(busy_rows, 5);  // less the peak columns
  EXPECT_EQ(busy_row.substr(busy_row.size() - 19), ",50,1.25,0.01,true\n") << busy_rows;
  json older = j;
  older.erase("promoted_calls");  // a schema-2 report
  EXPECT_TRUE(record_from_json(older).promoted_calls.empty());
}

TEST(LossScaling, EveryReporterShowsTheCounts) {
  bhtest::TempDir tmp("loss_scaling");
  const auto report = tmp.path / "report.json", csv = tmp.path / "report.csv";
  auto p = bhtest::run_benchhost(dirs() + "--plugin loss_scaling --precision fp16" + joined(kScaledTrainPoint) + " -o '" +
                                 report.string() + "' --csv '" + csv.string() + "'");
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  EXPECT_NE(p.output.find("fp16 loss scaling: 3 of 10 updates skipped (overflow), final loss scale 16384\n"),
            std::string::npos)
      << p.output;
  const json j = json::parse(bhtest::read_file(report));
  ASSERT_EQ(j["results"].size(), 1u);
  const json& rec = j["results"][0];
  ASSERT_TRUE(rec["updates_skipped"].is_number_integer()) << rec.dump(2);
  EXPECT_EQ(rec["updates_skipped"], 3);
  ASSERT_TRUE(rec["loss_scale"].is_number_float()) << rec.dump(2);
  EXPECT_EQ(rec["loss_scale"], 16384.0);
  // Read back as a -n sweep's parent reads its child's report.
  const RunRecord back = record_from_json(rec);
  EXPECT_EQ(back.updates_skipped, std::optional<std::int64_t>(3));
  EXPECT_EQ(back.loss_scale, std::optional<double>(16384));
  const std::string rows = bhtest::read_file(csv);
  const std::string header = rows.substr(0, rows.find('\n'));
  const std::string tail = ",message,updates_skipped,loss_scale,promoted_calls,other_cpus,cpu_steal_fraction,busy_machine,"
                           "peak_tflops,peak_source,mfu_datasheet,datasheet_peak_tflops,datasheet_source";
  EXPECT_EQ(header.substr(header.size() - tail.size()), tail) << header;
  // The machine-load and peak columns follow (Note [A busy machine], Note [Calibrated MFU]): their
  // values depend on the machine.
  const std::string row = bhtest::without_last_csv_fields(rows, 8);
  EXPECT_EQ(row.substr(row.size() - std::string(",3,16384,0\n").size()), ",3,16384,0\n") << rows;

  // The same point in fp32: null in JSON, empty CSV cells, no console line.
  p = bhtest::run_benchhost(dirs() + "--plugin loss_scaling --precision fp32" + joined(kScaledTrainPoint) + " -o '" +
                            report.string() + "' --csv '" + csv.string() + "'");
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  EXPECT_EQ(p.output.find("loss scaling"), std::string::npos) << p.output;
  const json plain = json::parse(bhtest::read_file(report))["results"][0];
  EXPECT_TRUE(plain["updates_skipped"].is_null());
  EXPECT_TRUE(plain["loss_scale"].is_null());
  const std::string plain_rows = bhtest::without_last_csv_fields(bhtest::read_file(csv), 8);
  EXPECT_EQ(plain_rows.substr(plain_rows.size() - 5), ",,,0\n") << plain_rows;
}

TEST(LossScaling, MultiRankPointCarriesTheCountsThroughTheChildReport) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun not installed (openmpi-bin)";
  // -n 2 runs as a child job whose rank 0 writes the record; the parent reads it back from JSON.
  InProcessRun r = run_in_process("loss_scaling", with(kScaledTrainPoint, {"--precision", "fp16", "-n", "2"}));
  ASSERT_EQ(r.records.size(), 1u);
  const RunRecord& two = r.records[0];
  if (two.status == RunStatus::failed && two.message.find("built without MPI") != std::string::npos)
    GTEST_SKIP() << "this build has no MPI backend: " << two.message;
  ASSERT_EQ(two.status, RunStatus::passed) << two.message;
  EXPECT_EQ(two.devices, 2);
  EXPECT_EQ(two.updates_skipped, std::optional<std::int64_t>(3));  // per run, not summed over ranks
  EXPECT_EQ(two.loss_scale, std::optional<double>(16384));
}
