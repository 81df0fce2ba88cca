// The dlrm_dcnv2 workload driven directly through its Workload class (the host-level mini run is
// in mini_test.cpp): the declaration (defaults, ranges, MLPerf rules), setup errors, memory
// refusal, hyperparameters, data-parallel free training.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "benchhost/threading.hpp"
#include <thread>

#include "dlrm_test_util.hpp"
#include "common/thread_comm.hpp"
#include "workload.hpp"

using namespace benchhost;

TEST(DlrmWorkload, DescribeMatchesMlperf) {
  const WorkloadInfo w = dlrm::DlrmWorkload::describe();
  EXPECT_EQ(w.name, "dlrm_dcnv2");
  EXPECT_EQ(w.benchmark, "dlrm_dcnv2");
  EXPECT_DOUBLE_EQ(w.metric_target, 0.80275);
  EXPECT_TRUE(w.higher_is_better);
  // The declared defaults are the MLPerf reference's.
  const Options defaults = declared_options<dlrm::DlrmWorkload>({});
  const auto& tables = criteo::mlperf_table_sizes();
  EXPECT_EQ(defaults.get_int_list("table-sizes"), std::vector<std::int64_t>(tables.begin(), tables.end()));
  EXPECT_EQ(defaults.get_int_list("top-mlp"), (std::vector<std::int64_t>{1024, 1024, 512, 256, 1}));
  EXPECT_EQ(defaults.get_int("global-batch-size"), 65536);
  EXPECT_EQ(defaults.get_float("learning-rate"), 0.005);
  EXPECT_EQ(defaults.get_string("embedding-sharding"), "replicated");
  // The closed-division rules: Adagrad with MLPerf's fixed settings, the AUC target, the eval set.
  const mlperf::Rules& r = w.mlperf;
  EXPECT_TRUE(r.closed_division);
  EXPECT_EQ(r.runs, 10);
  EXPECT_EQ(r.olympic_drop_each_side, 1);
  EXPECT_EQ(r.closed_target.min, 0.80275);
  EXPECT_EQ(r.closed_eval_samples.one_of, (std::vector<HyperValue>{std::int64_t{89137319}}));
  std::map<std::string, mlperf::LoggedKey> keys;
  for (const auto& k : r.keys) keys[k.key] = k;
  EXPECT_EQ(keys.size(), 10u);
  EXPECT_EQ(keys.at("opt_name").check.one_of, (std::vector<HyperValue>{std::string("adagrad")}));
  EXPECT_EQ(keys.at("opt_adagrad_epsilon").closed_check.one_of, (std::vector<HyperValue>{1e-10}));
  EXPECT_EQ(keys.at("opt_weight_decay").closed_check.one_of, (std::vector<HyperValue>{std::int64_t{0}}));
  EXPECT_TRUE(keys.at("global_batch_size").check.empty() && keys.at("global_batch_size").closed_check.empty());
}

// The declaration refuses a value it does not allow before setup() sees it, naming the option, the
// value and what is allowed.
TEST(DlrmWorkload, OutOfRangeOptionsAreRefusedNamingWhatIsAllowed) {
  auto refusal = [](const std::string& key, const std::string& value) -> std::string {
    try {
      (void)dlrm_test::context_from_config("mini.conf", {{key, value}});
    } catch (const InvalidArgument& e) {
      return e.message();
    }
    return "accepted";
  };
  const std::string tables25 = "1000,1000,1000,1000,1000,3,1000,1000,63,1000,1000,1000,10,1000,1000,155,4,976,14,1000,1000,1000,1000,1000,108";
  std::string m = refusal("table-sizes", tables25);
  EXPECT_NE(m.find("--dlrm_dcnv2.table-sizes"), std::string::npos) << m;
  EXPECT_NE(m.find("has 25 elements"), std::string::npos) << m;
  EXPECT_NE(m.find("allowed: a comma-separated list of 26 integers >= 1"), std::string::npos) << m;
  m = refusal("pooling", "max");
  EXPECT_NE(m.find("--dlrm_dcnv2.pooling: 'max'"), std::string::npos) << m;
  EXPECT_NE(m.find("allowed: one of sum, mean"), std::string::npos) << m;
  m = refusal("embedding-sharding", "column");
  EXPECT_NE(m.find("allowed: one of replicated, table, row"), std::string::npos) << m;
  m = refusal("multi-hot-sizes", "3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,0");
  EXPECT_NE(m.find("element 26 '0'"), std::string::npos) << m;
  EXPECT_NE(refusal("learning-rate", "0").find("allowed: a number > 0"), std::string::npos);
  EXPECT_NE(refusal("target", "1").find("allowed: a number in (0.5, 1)"), std::string::npos);
  EXPECT_NE(refusal("bottom-mlp", "").find("has 0 elements"), std::string::npos);
  EXPECT_NE(refusal("max-epochs", "0").find("allowed: an integer >= 1"), std::string::npos);
  EXPECT_NE(refusal("evals-per-epoch", "-1").find("allowed: an integer >= 0"), std::string::npos);
  EXPECT_NE(refusal("embedding-size", "16").find("unknown option --dlrm_dcnv2.embedding-size"), std::string::npos);
  // Options that relate to each other are setup()'s to check: the bottom MLP must end at the
  // embedding dimension.
  RunContext ctx = dlrm_test::context_from_config("mini.conf", {{"generate", "false"}, {"bottom-mlp", "64,32,8"}});
  ctx.synthetic_data = true;
  dlrm::DlrmWorkload w;
  EXPECT_THROW(w.setup(ctx), InvalidArgument);
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
    // How many ranks row-wise sharding needs (every table split over them), and either how many
    // table-wise sharding needs or that it cannot help (one MLPerf table is 40M rows x 128 x 4 B
    // x 3 = 57 GiB).
    EXPECT_NE(e.message().find("--dlrm_dcnv2.embedding-sharding row over at least"), std::string::npos) << e.message();
    EXPECT_TRUE(e.message().find("--dlrm_dcnv2.embedding-sharding table over at least") != std::string::npos ||
                e.message().find("table-wise sharding cannot help") != std::string::npos) << e.message();
  } catch (const DataError&) {
    // enough memory: refused on the missing data instead, which is fine too
  }
}

TEST(DlrmWorkload, HyperparametersCarryTheMlperfAdagradKeys) {
  RunContext ctx = dlrm_test::context_from_config("mini.conf", {{"generate", "false"}});
  ctx.synthetic_data = true;
  ctx.num_threads = 1;
  const int threads_before = get_num_threads();
  dlrm::DlrmWorkload w;
  w.setup(ctx);
  EXPECT_EQ(get_num_threads(), 1) << "setup applies --threads (it used to run on every core)";
  set_num_threads(threads_before);
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

namespace {

// Sum of |w| per parameter name after training, and the AUC evaluated afterwards, on one rank.
struct RankOutcome {
  std::map<std::string, double> sums;
  double auc = 0;
};

RankOutcome train_and_evaluate(dlrm::DlrmWorkload& w, int steps, std::int64_t local_batch) {
  w.begin_epoch(0);
  for (int i = 0; i < steps; ++i) EXPECT_EQ(w.train_step().samples, local_batch);
  RankOutcome out;
  for (auto* p : w.model().parameters()) {
    double a = 0;
    for (float v : p->value.to_float_vector()) a += std::fabs(v);
    out.sums[p->name] = a;
  }
  out.auc = w.evaluate().metric;
  return out;
}

// `world` ranks as threads over an in-process communicator, each with its share of every global
// batch; compared with one process taking the whole global batch. Every parameter a rank holds
// must match the single process's (replicated tables: every table on every rank; sharded: each
// table on its owner only, and every table on exactly one rank).
void expect_ranks_match_one_process(int world, const std::string& sharding, std::int64_t global_batch) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_dlrm_dp_{}_{}_{}", ::getpid(), world, sharding);
  fs::remove_all(dir);
  const std::vector<std::pair<std::string, std::string>> over = {
      {"data-dir", dir.string()}, {"gen-rows-per-day", "2048"}, {"gen-eval-rows", "256"},
      {"gen-days", "1"}, {"global-batch-size", std::to_string(global_batch)},
      {"eval-batch-size", "40"}, {"embedding-sharding", sharding}};
  const int steps = 3;
  set_num_threads(1);
  RankOutcome want;
  {
    dlrm::DlrmWorkload single;
    single.setup(dlrm_test::context_from_config("mini.conf", over));
    want = train_and_evaluate(single, steps, global_batch);
  }
  test_support::Group g(world);
  std::vector<RankOutcome> got(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      test_support::ThreadComm comm(g, r);
      RunContext ctx = dlrm_test::context_from_config("mini.conf", over);
      ctx.rank = r;
      ctx.world_size = world;
      ctx.communicator = &comm;
      dlrm::DlrmWorkload w;
      w.setup(ctx);
      EXPECT_EQ(w.local_batch(), global_batch / world);
      got[static_cast<std::size_t>(r)] = train_and_evaluate(w, steps, global_batch / world);
    });
  for (auto& t : threads) t.join();
  // Row-wise sharded tables are compared as the sum over their holders' shards.
  std::map<std::string, int> holders;
  std::map<std::string, double> shard_sums;
  for (int r = 0; r < world; ++r)
    for (const auto& [name, sum] : got[static_cast<std::size_t>(r)].sums) {
      ASSERT_TRUE(want.sums.count(name)) << "rank " << r << " holds an unknown parameter " << name;
      ++holders[name];
      if (sharding == "row" && name.rfind("emb.", 0) == 0)
        shard_sums[name] += sum;
      else
        EXPECT_NEAR(sum, want.sums[name], 1e-4 * want.sums[name] + 1e-6) << name << " on rank " << r;
    }
  for (const auto& [name, sum] : shard_sums) EXPECT_NEAR(sum, want.sums[name], 1e-4 * want.sums[name] + 1e-6) << name;
  for (const auto& [name, sum] : want.sums) {
    const bool table = name.rfind("emb.", 0) == 0;
    EXPECT_EQ(holders[name], table && sharding == "table" ? 1 : world) << name;
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_NEAR(got[static_cast<std::size_t>(r)].auc, want.auc, 1e-4) << "rank " << r;
    EXPECT_EQ(got[static_cast<std::size_t>(r)].auc, got[0].auc) << "ranks disagree on the AUC";
  }
  fs::remove_all(dir);
}

}  // namespace

// Note [DLRM parallelism]: data-parallel ranks with replicated tables end with the same weights
// as one process with the whole batch: dense gradients averaged, table rows unioned and averaged.
TEST(DlrmWorkload, TwoRanksMatchOneProcess) { expect_ranks_match_one_process(2, "replicated", 256); }

// Note [Table-wise sharding]: each table on one rank, looked up and trained through all-to-alls;
// three ranks make the evaluation shares uneven (86/85/85 samples in rounds of 40, the last
// round 6/5/5), so ranks take part in exchanges for each other's samples.
TEST(DlrmWorkload, TableShardedRanksMatchOneProcess) {
  expect_ranks_match_one_process(2, "table", 256);
  expect_ranks_match_one_process(3, "table", 255);
}

// Note [Row-wise sharding]: every table split by rows over the ranks (the mini's smallest table
// has 3 rows, so with 3 ranks each holds one row of it), ids routed to their rows' holders,
// partial sums added on the samples' ranks; uneven evaluation shares as above.
TEST(DlrmWorkload, RowShardedRanksMatchOneProcess) {
  expect_ranks_match_one_process(2, "row", 256);
  expect_ranks_match_one_process(3, "row", 255);
}

TEST(DlrmSharding, RowRangesSplitEveryTableLikeArraySplit) {
  const std::vector<std::int64_t> sizes{10, 3, 7};
  std::vector<std::int64_t> covered(sizes.size(), 0);
  for (int r = 0; r < 3; ++r) {
    const auto ranges = dlrm::row_ranges(sizes, 3, r);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_EQ(ranges[k].begin, covered[k]) << "table " << k << " rank " << r;
      covered[k] = ranges[k].end;
    }
  }
  EXPECT_EQ(covered, sizes);
  EXPECT_EQ(dlrm::row_ranges({10}, 3, 0)[0].size(), 4);  // 4, 3, 3
  EXPECT_EQ(dlrm::row_ranges({2}, 3, 2)[0].size(), 0);   // more ranks than rows: nothing here
}

TEST(DlrmSharding, PlacementBalancesRowsAndIsTheSameEverywhere) {
  // Largest first onto the least-loaded rank (ties: the lower rank).
  EXPECT_EQ(dlrm::place_tables({10, 9, 8, 1}, 2), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(dlrm::place_tables({5, 5, 5}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(dlrm::place_tables({5, 5, 5}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(dlrm::owned_features({0, 1, 1, 0}, 1), (std::vector<std::int64_t>{1, 2}));
  // The MLPerf tables over 8 ranks: every rank holds something, the busiest at most the largest
  // table plus an even share of the rest.
  const auto sizes = criteo::mlperf_table_sizes();
  const std::vector<std::int64_t> v(sizes.begin(), sizes.end());
  const auto owner = dlrm::place_tables(v, 8);
  std::vector<std::int64_t> load(8, 0);
  for (std::size_t k = 0; k < v.size(); ++k) load[owner[k]] += v[k];
  const std::int64_t total = std::accumulate(v.begin(), v.end(), std::int64_t{0});
  for (auto l : load) {
    EXPECT_GT(l, 0);
    EXPECT_LE(l, *std::max_element(v.begin(), v.end()) + total / 8);
  }
  EXPECT_THROW(dlrm::parse_sharding("rows"), InvalidArgument);
}

// Note [FLOPs per sample] (docs/plugin-abi.md): the declared training FLOPs of the mini DLRM-DCNv2
// (configs/dlrm_dcnv2/mini.conf: 13 dense features, bottom MLP 64-32-16, 26 bags of dim 16 with
// MLPerf's hotness, 3 cross layers of rank 64, top MLP 128-128-64-32-1) against a hand count,
// layer by layer. Linear layers: in x out multiply-adds, 2 FLOPs each; embedding bags: one add per
// looked-up row element (hotness x dim); each cross layer x_{l+1} = x0 * (W (V x_l) + b) + x_l:
// the two low-rank matmuls plus 3 element-wise ops per element (bias, product, sum). Training =
// 3 x forward, as the workload declares it (the bags' backward is a scatter of the same size,
// which the 3x overstates by a negligible amount).
TEST(DlrmWorkload, DeclaredTrainFlopsMatchAHandCount) {
  RunContext ctx = dlrm_test::context_from_config("mini.conf", {{"generate", "false"}});
  ctx.synthetic_data = true;
  ctx.num_threads = 1;
  dlrm::DlrmWorkload w;
  const RunInfo info = w.setup(ctx);
  const double bottom = 2.0 * (13 * 64 + 64 * 32 + 32 * 16);
  const double hotness =
      3 + 2 + 1 + 2 + 6 + 1 + 1 + 1 + 1 + 7 + 3 + 8 + 1 + 6 + 9 + 5 + 1 + 1 + 1 + 12 + 100 + 27 + 10 + 3 + 1 + 1;
  const double bags = hotness * 16;
  const double d = 16 * (1 + 26);  // bottom output + 26 pooled embeddings = 432
  const double cross = 3 * (2.0 * (d * 64 + 64 * d) + 3 * d);
  const double top = 2.0 * (d * 128 + 128 * 128 + 128 * 64 + 64 * 32 + 32 * 1);
  const double forward = bottom + bags + cross + top;
  EXPECT_DOUBLE_EQ(info.infer_flops_per_sample, forward);
  EXPECT_DOUBLE_EQ(info.train_flops_per_sample, 3 * forward);
  std::cout << "forward FLOPs per sample " << forward << ", of which embedding bags and cross element-wise "
            << bags + 3 * 3 * d << "\n";
}
