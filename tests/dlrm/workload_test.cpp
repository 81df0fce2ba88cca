// The dlrm_dcnv2 workload driven directly through its Workload class (the host-level mini run is
// in mini_test.cpp): setup errors, memory refusal, hyperparameters, data-parallel free training.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "benchhost/threading.hpp"
#include <thread>

#include "dlrm_test_util.hpp"
#include "thread_comm.hpp"
#include "workload.hpp"

using namespace benchhost;

TEST(DlrmWorkload, DescribeMatchesMlperf) {
  const WorkloadInfo w = dlrm::DlrmWorkload::describe();
  EXPECT_EQ(w.name, "dlrm_dcnv2");
  EXPECT_EQ(w.benchmark, "dlrm_dcnv2");
  EXPECT_DOUBLE_EQ(w.metric_target, 0.80275);
  EXPECT_TRUE(w.higher_is_better);
}

TEST(DlrmWorkload, MlperfTablesAreRefusedWithTheBytesNeeded) {
  RunContext ctx = dlrm_test::context_from_config("mlperf.conf", {{"data-dir", "/nonexistent"}});
  dlrm::DlrmWorkload w;
  try {
    w.setup(ctx);
    GTEST_SKIP() << "this machine has enough memory for the MLPerf tables (the data dir is missing "
                    "so setup should then fail on the data)";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(e.message().find("GiB"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("available"), std::string::npos) << e.message();
    EXPECT_GT(e.requested_bytes(), 3ull * 204184588ull * 128 * 4);  // tables x (w, grad, state)
  } catch (const DataError&) {
    // enough memory: refused on the missing data instead, which is fine too
  }
}

TEST(DlrmWorkload, HyperparametersCarryTheMlperfAdagradKeys) {
  RunContext ctx = dlrm_test::context_from_config("mini.conf", {{"generate", "false"}});
  ctx.synthetic_data = true;
  dlrm::DlrmWorkload w;
  w.setup(ctx);
  auto h = w.hyperparameters();
  auto get = [&](const std::string& k) -> HyperValue {
    for (auto& [n, v] : h)
      if (n == k) return v;
    ADD_FAILURE() << "missing " << k;
    return std::int64_t{-1};
  };
  EXPECT_EQ(std::get<std::string>(get("opt_name")), "adagrad");
  EXPECT_EQ(std::get<double>(get("opt_adagrad_epsilon")), 1e-10);
  EXPECT_EQ(std::get<double>(get("opt_adagrad_initial_accumulator_value")), 0.0);
  EXPECT_EQ(std::get<double>(get("opt_adagrad_learning_rate_decay")), 0.0);
  EXPECT_EQ(std::get<double>(get("opt_weight_decay")), 0.0);
  EXPECT_EQ(std::get<std::int64_t>(get("opt_learning_rate_warmup_steps")), 0);
  EXPECT_EQ(std::get<std::int64_t>(get("opt_learning_rate_decay_steps")), 0);
  EXPECT_EQ(std::get<std::int64_t>(get("global_batch_size")), 1024);
  // A synthetic training step runs and reports a finite loss.
  StepResult s = w.train_step();
  EXPECT_EQ(s.samples, 1024);
  EXPECT_TRUE(std::isfinite(s.loss));
}

TEST(DlrmWorkload, MissingDataDirIsAnActionableError) {
  RunContext ctx = dlrm_test::context_from_config(
      "mini.conf", {{"generate", "false"}, {"data-dir", "/nonexistent/criteo"}});
  dlrm::DlrmWorkload w;
  try {
    w.setup(ctx);
    FAIL() << "setup succeeded without data";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("/nonexistent/criteo/day_0_dense.npy"), std::string::npos) << e.message();
  }
}

// Experiment driver (not part of CI): DLRM_EXPERIMENT="key=value,..." overrides mini.conf.
TEST(DlrmWorkload, DISABLED_Experiment) {
  std::vector<std::pair<std::string, std::string>> over;
  if (const char* e = std::getenv("DLRM_EXPERIMENT")) {
    std::string s = e;
    std::size_t p = 0;
    while (p < s.size()) {
      auto q = s.find(';', p);
      if (q == std::string::npos) q = s.size();
      auto kv = s.substr(p, q - p);
      auto eq = kv.find('=');
      over.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      p = q + 1;
    }
  }
  RunContext ctx = dlrm_test::context_from_config("mini.conf", over);
  set_num_threads(2);
  dlrm::DlrmWorkload w;
  RunInfo info = w.setup(ctx);
  w.begin_epoch(0);
  std::int64_t seen = 0, next = info.eval_every_samples;
  while (seen < info.samples_per_epoch) {
    StepResult s = w.train_step();
    seen += s.samples;
    if (seen >= next) {
      next += info.eval_every_samples;
      EvalResult e = w.evaluate();
      fmt::print("samples {} loss {:.4f} auc {:.5f}\n", seen, s.loss, e.metric);
    }
  }
}

// Note [DLRM parallelism]: two data-parallel ranks (threads over an in-process communicator),
// each with half of every global batch, end with the same weights as one process with the whole
// batch: dense gradients averaged, table rows unioned and averaged.
TEST(DlrmWorkload, TwoRanksMatchOneProcess) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_dlrm_dp_{}", ::getpid());
  fs::remove_all(dir);
  const std::vector<std::pair<std::string, std::string>> over = {
      {"data-dir", dir.string()}, {"gen-rows-per-day", "2048"}, {"gen-eval-rows", "256"},
      {"gen-days", "1"}, {"global-batch-size", "256"}, {"eval-batch-size", "128"}};
  const int steps = 3;
  auto sums = [](dlrm::DlrmWorkload& w) {
    std::vector<double> s;
    for (auto* p : w.model().parameters()) {
      double a = 0;
      for (float v : p->value.to_float_vector()) a += std::fabs(v);
      s.push_back(a);
    }
    return s;
  };
  set_num_threads(1);
  dlrm::DlrmWorkload single;
  {
    RunContext ctx = dlrm_test::context_from_config("mini.conf", over);
    single.setup(ctx);
    single.begin_epoch(0);
    for (int i = 0; i < steps; ++i) single.train_step();
  }
  const auto want = sums(single);
  const double auc_single = single.evaluate().metric;

  dlrm_test::Group g(2);
  std::vector<std::vector<double>> got(2);
  std::vector<double> auc(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      dlrm_test::ThreadComm comm(g, r);
      RunContext ctx = dlrm_test::context_from_config("mini.conf", over);
      ctx.rank = r;
      ctx.world_size = 2;
      ctx.communicator = &comm;
      dlrm::DlrmWorkload w;
      w.setup(ctx);
      EXPECT_EQ(w.local_batch(), 128);
      w.begin_epoch(0);
      for (int i = 0; i < steps; ++i) EXPECT_EQ(w.train_step().samples, 128);
      got[r] = sums(w);
      auc[r] = w.evaluate().metric;
    });
  for (auto& t : threads) t.join();
  ASSERT_EQ(got[0].size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[0][i], want[i], 1e-4 * want[i] + 1e-6) << "parameter " << i;
    EXPECT_EQ(got[0][i], got[1][i]) << "replicas diverged at parameter " << i;
  }
  EXPECT_NEAR(auc[0], auc_single, 1e-4);
  EXPECT_EQ(auc[0], auc[1]);
  fs::remove_all(dir);
}
