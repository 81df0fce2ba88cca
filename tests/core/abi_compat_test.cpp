// ABI 1.2 compatibility: a plugin built against ABI 1.1 still loads and runs, and its steps read
// as "no loss scaling"; the host reads only what a result's struct_size covers; the SDK adapter
// writes only what the host's struct covers. (The newer-minor refusal is in plugin_loader_test.)
#include <gtest/gtest.h>

#include <cstddef>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "plugin_loader.hpp"
#include "test_support.hpp"

using namespace benchhost::host;

namespace {

// Where ABI 1.1's bh_step_result ended: the size a 1.0/1.1 plugin or host puts in struct_size.
constexpr std::uint32_t kStepResultSize_1_1 = offsetof(bh_step_result, loss_scale);

class ScaledStepWorkload : public benchhost::Workload {
 public:
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "scaled_step";
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext&) override { return {}; }
  benchhost::StepResult train_step() override {
    benchhost::StepResult s{3, 0.25};
    s.loss_scale = 1024;
    s.update_skipped = true;
    return s;
  }
};

using Adapter = benchhost::detail::PluginAdapter<ScaledStepWorkload>;

// One train_step through the adapter's C slot into a result whose struct_size the host set.
bh_step_result step_through_adapter(std::uint32_t host_struct_size) {
  const bh_plugin_descriptor* d = Adapter::descriptor();
  bh_error err{};
  bh_workload* w = nullptr;
  EXPECT_EQ(d->create(&w, &err), BH_STATUS_OK) << err.message;
  bh_step_result r{};
  r.struct_size = host_struct_size;
  r.loss_scale = -7;     // sentinels: an older host's struct ends before these
  r.update_skipped = -7;
  EXPECT_EQ(d->train_step(w, &r, &err), BH_STATUS_OK) << err.message;
  d->destroy(w);
  return r;
}

}  // namespace

TEST(AbiCompat, StepResultKeepsAggregateInitialisationWithoutLossScaling) {
  const benchhost::StepResult legacy{4, 0.5};  // how plugins written for 1.0/1.1 return a step
  EXPECT_EQ(legacy.samples, 4);
  EXPECT_EQ(legacy.loss, 0.5);
  EXPECT_EQ(legacy.loss_scale, 0);
  EXPECT_FALSE(legacy.update_skipped);
}

TEST(AbiCompat, AdapterWritesTheLossScalingFieldsOnlyIntoAHostStructThatHasThem) {
  const bh_step_result current = step_through_adapter(sizeof(bh_step_result));
  EXPECT_EQ(current.struct_size, sizeof(bh_step_result));
  EXPECT_EQ(current.samples, 3);
  EXPECT_EQ(current.loss, 0.25);
  EXPECT_EQ(current.loss_scale, 1024);
  EXPECT_EQ(current.update_skipped, 1);

  const bh_step_result older = step_through_adapter(kStepResultSize_1_1);
  EXPECT_EQ(older.struct_size, kStepResultSize_1_1);  // says what was filled
  EXPECT_EQ(older.samples, 3);
  EXPECT_EQ(older.loss, 0.25);
  EXPECT_EQ(older.loss_scale, -7);  // untouched: past the 1.1 host's struct
  EXPECT_EQ(older.update_skipped, -7);
}

TEST(AbiCompat, HostIgnoresFieldsPastTheResultsStructSize) {
  bh_step_result r{};
  r.struct_size = kStepResultSize_1_1;
  r.samples = 2;
  r.loss = 0.5;
  r.loss_scale = 512;
  r.update_skipped = 1;
  clear_fields_beyond_struct_size(r);
  EXPECT_EQ(r.samples, 2);
  EXPECT_EQ(r.loss, 0.5);
  EXPECT_EQ(r.loss_scale, 0);
  EXPECT_EQ(r.update_skipped, 0);

  r.struct_size = sizeof(bh_step_result);
  r.loss_scale = 512;
  r.update_skipped = 1;
  clear_fields_beyond_struct_size(r);
  EXPECT_EQ(r.loss_scale, 512);
  EXPECT_EQ(r.update_skipped, 1);
}

TEST(AbiCompat, PluginBuiltAgainstAbi_1_1_Loads) {
  static_assert(BENCHHOST_ABI_MINOR > 1, "this test is about a plugin one minor or more behind the host");
  BrokenPlugin why;
  auto p = load_plugin(bhtest::plugin_file("abi_1_1"), &why);
  ASSERT_TRUE(p) << why.reason;
  EXPECT_EQ(p->abi, fmt::format("{}.1", BENCHHOST_ABI_MAJOR));
  EXPECT_TRUE(p->descriptor.train_step);
}

TEST(AbiCompat, PluginBuiltAgainstAbi_1_1_RunsAndReportsNoLossScaling) {
  // fp16, so a host that read the 1.1 plugin's stray bytes as loss-scaling outcomes would show them.
  bhtest::TempDir tmp("abi_1_1");
  const auto report = tmp.path / "report.json", csv = tmp.path / "report.csv";
  auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin abi_1_1 --mode train --precision fp16 -b 2 "
                                             "-w 1 -i 5 -o '{}' --csv '{}'",
                                             bhtest::plugin_dir().string(), report.string(), csv.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  EXPECT_EQ(p.output.find("loss scal"), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find("updates skipped"), std::string::npos) << p.output;
  const auto j = nlohmann::json::parse(bhtest::read_file(report));
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& rec = j["results"][0];
  EXPECT_EQ(rec["status"], "PASSED") << rec.dump(2);
  EXPECT_EQ(rec["iterations"], 5);
  EXPECT_EQ(rec["samples"], 10);
  EXPECT_TRUE(rec["updates_skipped"].is_null()) << rec.dump(2);
  EXPECT_TRUE(rec["loss_scale"].is_null()) << rec.dump(2);
  const std::string rows = bhtest::read_file(csv);
  // less the machine-load and peak columns
  const std::string row = bhtest::without_last_csv_fields(rows.substr(rows.find('\n') + 1), 8);
  EXPECT_EQ(row.substr(row.size() - 5), ",,,0\n") << rows;  // updates_skipped, loss_scale empty; promoted_calls 0
}
