// ABI 1.2 and 1.4 compatibility: a plugin built against ABI 1.1 still loads and runs, its steps
// read as "no loss scaling" and its evaluations as a bare metric without a verdict; the host reads
// only what a result's struct_size covers; the SDK adapter writes only what the host's struct
// covers, and carries EvalResult's value_json and verdict across the C boundary (ABI 1.4). (The
// newer-minor refusal is in plugin_loader_test.)
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

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

// Where ABI 1.0-1.3's bh_eval_result ended.
constexpr std::uint32_t kEvalResultSize_1_3 = offsetof(bh_eval_result, value_json);

// Evaluations as Mask R-CNN returns them (Note [Dictionary-valued evaluations], workload.hpp): the
// next result is whatever the test put in `next`.
class DictEvalWorkload : public benchhost::Workload {
 public:
  static inline benchhost::EvalResult next;
  static benchhost::WorkloadInfo describe() {
    benchhost::WorkloadInfo i;
    i.name = "dict_eval";
    return i;
  }
  benchhost::RunInfo setup(const benchhost::RunContext&) override { return {}; }
  benchhost::StepResult train_step() override { return {1, 0.0}; }
  benchhost::EvalResult evaluate() override { return next; }
};

using DictAdapter = benchhost::detail::PluginAdapter<DictEvalWorkload>;

struct AdapterEval {
  bh_status status = BH_STATUS_OK;
  bh_eval_result result{};
  std::string value_json;  // copied while the instance lives, as the host does
  std::string message;
};

// One evaluate through the adapter's C slot into a result whose struct_size the host set.
AdapterEval evaluate_through_adapter(const benchhost::EvalResult& returned, std::uint32_t host_struct_size) {
  DictEvalWorkload::next = returned;
  const bh_plugin_descriptor* d = DictAdapter::descriptor();
  bh_error err{};
  bh_workload* w = nullptr;
  EXPECT_EQ(d->create(&w, &err), BH_STATUS_OK) << err.message;
  AdapterEval out;
  static const char sentinel[] = "past the host's struct";
  out.result.struct_size = host_struct_size;
  out.result.value_json = sentinel;  // an older host's struct ends before these
  out.result.target_verdict = -7;
  out.status = d->evaluate(w, &out.result, &err);
  out.message = err.message;
  if (out.result.value_json == sentinel) out.value_json = "(untouched)";
  else if (out.result.value_json) out.value_json = out.result.value_json;
  d->destroy(w);
  return out;
}

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

// ---- ABI 1.4: dictionary-valued evaluations -----------------------------------------------------

TEST(AbiCompat, EvalResultKeepsAggregateInitialisationWithoutAValueOrVerdict) {
  const benchhost::EvalResult legacy{0.5, 100};  // how plugins written for 1.0-1.3 return an evaluation
  EXPECT_EQ(legacy.metric, 0.5);
  EXPECT_EQ(legacy.samples, 100);
  EXPECT_TRUE(legacy.value_json.empty());
  EXPECT_EQ(legacy.target_reached, -1);
}

TEST(AbiCompat, AdapterCarriesTheEvaluationsValueAndVerdictAcrossTheCBoundary) {
  benchhost::EvalResult e{0.381, 5000, R"({"BBOX": 0.381, "SEGM": 0.342})", 1};
  AdapterEval current = evaluate_through_adapter(e, sizeof(bh_eval_result));
  ASSERT_EQ(current.status, BH_STATUS_OK) << current.message;
  EXPECT_EQ(current.result.struct_size, sizeof(bh_eval_result));
  EXPECT_EQ(current.result.metric, 0.381);
  EXPECT_EQ(current.result.samples, 5000);
  EXPECT_EQ(current.value_json, R"({"BBOX": 0.381, "SEGM": 0.342})");
  EXPECT_EQ(current.result.target_verdict, BH_TARGET_REACHED);

  e.target_reached = 0;
  EXPECT_EQ(evaluate_through_adapter(e, sizeof(bh_eval_result)).result.target_verdict, BH_TARGET_NOT_REACHED);
  // No value and no verdict: NULL and zero, what a 1.3 plugin's zero-filled fields say.
  const AdapterEval plain = evaluate_through_adapter({0.7, 10}, sizeof(bh_eval_result));
  EXPECT_EQ(plain.result.value_json, nullptr);
  EXPECT_EQ(plain.result.target_verdict, BH_TARGET_HOST_DECIDES);

  // An older host's struct: the adapter writes only what it covers and says so.
  e.target_reached = 1;
  const AdapterEval older = evaluate_through_adapter(e, kEvalResultSize_1_3);
  ASSERT_EQ(older.status, BH_STATUS_OK) << older.message;
  EXPECT_EQ(older.result.struct_size, kEvalResultSize_1_3);
  EXPECT_EQ(older.result.metric, 0.381);
  EXPECT_EQ(older.value_json, "(untouched)");
  EXPECT_EQ(older.result.target_verdict, -7);
}

TEST(AbiCompat, AdapterRefusesAVerdictOutsideMinusOneToOne) {
  const AdapterEval bad = evaluate_through_adapter({0.3, 10, "", 2}, sizeof(bh_eval_result));
  EXPECT_EQ(bad.status, BH_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(bad.message.find("target_reached is 2"), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("dict_eval"), std::string::npos) << bad.message;
}

TEST(AbiCompat, HostIgnoresEvalFieldsPastTheResultsStructSize) {
  bh_eval_result r{};
  r.struct_size = kEvalResultSize_1_3;
  r.metric = 0.25;
  r.samples = 7;
  std::memset(reinterpret_cast<unsigned char*>(&r) + kEvalResultSize_1_3, 0x5A, sizeof r - kEvalResultSize_1_3);
  clear_fields_beyond_struct_size(r);
  EXPECT_EQ(r.value_json, nullptr);
  EXPECT_EQ(r.target_verdict, BH_TARGET_HOST_DECIDES);
  const Evaluation e = evaluation_from("old", r);
  EXPECT_EQ(e.metric, 0.25);
  EXPECT_EQ(e.samples, 7);
  EXPECT_TRUE(e.value.is_null());
  EXPECT_FALSE(e.target_reached.has_value());
}

TEST(AbiCompat, HostParsesTheValueAndVerdict) {
  bh_eval_result r{};
  r.struct_size = sizeof r;
  r.metric = 0.381;
  r.value_json = R"({"BBOX": 0.381, "SEGM": 0.342})";
  r.target_verdict = BH_TARGET_NOT_REACHED;
  const Evaluation e = evaluation_from("maskrcnn", r);
  ASSERT_TRUE(e.value.is_object());
  EXPECT_EQ(e.value.dump(), R"({"BBOX":0.381,"SEGM":0.342})");  // the plugin's field order kept
  ASSERT_TRUE(e.target_reached.has_value());
  EXPECT_FALSE(*e.target_reached);
  r.value_json = "";  // "" is "no value", as NULL
  r.target_verdict = BH_TARGET_REACHED;
  const Evaluation plain = evaluation_from("maskrcnn", r);
  EXPECT_TRUE(plain.value.is_null());
  EXPECT_TRUE(*plain.target_reached);
  r.value_json = "0.5";  // a number is an eval_accuracy too
  EXPECT_EQ(evaluation_from("maskrcnn", r).value, 0.5);
}

TEST(AbiCompat, HostRefusesAValueOrVerdictItCannotLogNamingThePlugin) {
  auto message_of = [](const char* value_json, std::int32_t verdict) -> std::string {
    bh_eval_result r{};
    r.struct_size = sizeof r;
    r.value_json = value_json;
    r.target_verdict = verdict;
    try {
      evaluation_from("maskrcnn", r);
    } catch (const PluginError& e) {
      EXPECT_EQ(e.status(), BH_STATUS_FAILED);
      return e.message();
    }
    return "(accepted)";
  };
  const std::string truncated = message_of(R"({"BBOX": 0.38, "SEGM": )", 0);
  EXPECT_NE(truncated.find("maskrcnn.evaluate: value_json is not one JSON value"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find(R"('{"BBOX": 0.38, "SEGM": ')"), std::string::npos) << truncated;
  EXPECT_NE(message_of("0.3 0.4", 0).find("not one JSON value"), std::string::npos);
  const std::string array = message_of("[0.38, 0.34]", 0);
  EXPECT_NE(array.find("is a JSON array"), std::string::npos) << array;
  EXPECT_NE(message_of("null", 0).find("is a JSON null"), std::string::npos);
  const std::string verdict = message_of(nullptr, 7);
  EXPECT_NE(verdict.find("maskrcnn.evaluate: target_verdict 7"), std::string::npos) << verdict;
}

TEST(AbiCompat, PluginBuiltAgainstAbi_1_1_TrainsToTargetOnTheHostsComparison) {
  // Its evaluate leaves 0x5A bytes where ABI 1.4's value_json and target_verdict lie: a host that
  // read them would follow a wild pointer or refuse the verdict. It reaches 0.5 at the 2nd evaluation.
  bhtest::TempDir tmp("abi_1_1_ttt");
  const auto report = tmp.path / "report.json", mllog = tmp.path / "run.mllog";
  auto p = bhtest::run_benchhost(fmt::format("--plugin-dir '{}' --plugin abi_1_1 --mode ttt -o '{}' --mllog '{}'",
                                             bhtest::plugin_dir().string(), report.string(), mllog.string()));
  ASSERT_EQ(p.exit_code, kExitOk) << p.output;
  const auto j = nlohmann::json::parse(bhtest::read_file(report));
  const auto& rec = j["results"][0];
  EXPECT_EQ(rec["status"], "PASSED") << rec.dump(2);
  ASSERT_EQ(rec["ttt"]["evals"].size(), 2u) << rec.dump(2);
  EXPECT_EQ(rec["ttt"]["evals"][1]["metric"], 0.5);
  EXPECT_TRUE(rec["ttt"]["evals"][1]["value"].is_null());
  EXPECT_TRUE(rec["ttt"]["evals"][1]["target_reached"].is_null());
  const std::string log = bhtest::read_file(mllog);
  EXPECT_NE(log.find(R"("key": "eval_accuracy", "value": 0.25, )"), std::string::npos) << log;
  EXPECT_NE(log.find(R"("key": "eval_accuracy", "value": 0.5, )"), std::string::npos) << log;
}
