// The mini GPT-3 configuration trains to its calibrated validation log-perplexity target from a
// fixed seed (the end-to-end check that the model, data and optimizer are right), the plugin's
// other modes run on synthetic data, and its declared option ranges refuse what they must.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "benchhost/options.hpp"
#include "common/host_run.hpp"
#include "common/lm_mini_context.hpp"
#include "common/small_corpus.hpp"
#include "data.hpp"
#include "text/corpus.hpp"
#include "text/indexed_dataset.hpp"
#include "text/prepare.hpp"
#include "text_data/text_test_util.hpp"
#include "workload.hpp"

using namespace benchhost;
namespace fs = std::filesystem;

namespace {

RunContext mini_context(std::map<std::string, std::string> overrides = {}) {
  return test_support::lm_mini_context<gpt3::GptWorkload>(overrides);
}

std::string refusal(const std::string& name, const std::string& value) {
  return test_support::option_refusal<gpt3::GptWorkload>(name, value);
}



}  // namespace

TEST(Gpt3Options, OutOfRangeValuesAreRefusedNamingTheAllowedRange) {
  EXPECT_EQ(refusal("adam-beta2", "1"),
            "option --gpt3.adam-beta2: '1' is not below the maximum 1; allowed: a number in [0, 1)");
  EXPECT_EQ(refusal("seq-len", "0"),
            "option --gpt3.seq-len: '0' is below the minimum 1; allowed: an integer >= 1");
  EXPECT_EQ(refusal("lr", "0"), "option --gpt3.lr: '0' is not above the minimum 0; allowed: a number > 0");
  EXPECT_EQ(refusal("ffn", "-1"), "option --gpt3.ffn: '-1' is below the minimum 0; allowed: an integer >= 0");
  // 0 keeps meaning "derive it": ffn 4 x hidden, max-positions seq-len.
  const lm::ModelShape derived =
      gpt3::GptWorkload::shape_from_options(declared_options<gpt3::GptWorkload>({{"hidden", "64"}, {"seq-len", "32"}}));
  EXPECT_EQ(derived.ffn, 256);
  EXPECT_EQ(derived.max_positions, 32);
}

TEST(Gpt3Mini, ReachesTheTargetFromAFixedSeed) {
  if (text::default_kjv_path().empty()) GTEST_SKIP() << "bible-kjv-text is not installed";
  gpt3::GptWorkload w;
  const RunInfo info = w.setup(mini_context());
  const double unigram = w.unigram_baseline(), target = w.metric_target();
  std::printf("gpt3 mini: unigram log perplexity %.4f, target %.4f\n", unigram, target);
  ASSERT_LT(target, unigram - 1.0) << "the target must be well below a unigram model";
  const auto run = test_support::train_to_target(w, info, target, /*higher_is_better=*/false);
  ASSERT_TRUE(run.finite_loss);
  std::printf("gpt3 mini: validation log perplexity %.4f after %lld samples (target %.4f)\n", run.metric,
              static_cast<long long>(run.samples), target);
  EXPECT_TRUE(run.reached);
}

// The same mini run under the mixed-precision policies (bf16, and fp16 with dynamic loss scaling;
// on the CPU both emulated: half-precision storage, f32 arithmetic): the model must still reach the
// fp32 target, which a policy that mangled a conversion or a loss scale would not.
class Gpt3MiniPrecision : public ::testing::TestWithParam<std::string> {};

TEST_P(Gpt3MiniPrecision, ReachesTheTargetFromAFixedSeed) {
  if (text::default_kjv_path().empty()) GTEST_SKIP() << "bible-kjv-text is not installed";
  gpt3::GptWorkload w;
  RunContext ctx = mini_context();
  ctx.precision = GetParam();
  ASSERT_EQ(gpt3::GptWorkload::check_support(ctx), "");
  const RunInfo info = w.setup(ctx);
  const auto run = test_support::train_to_target(w, info, w.metric_target(), /*higher_is_better=*/false);
  ASSERT_TRUE(run.finite_loss);
  std::printf("gpt3 mini %s: validation log perplexity %.4f after %lld samples, %lld of %lld updates skipped, "
              "loss scale %g (target %.4f)\n", ctx.precision.c_str(), run.metric, static_cast<long long>(run.samples),
              static_cast<long long>(run.updates_skipped), static_cast<long long>(run.steps), run.loss_scale,
              w.metric_target());
  EXPECT_TRUE(run.reached);
  if (ctx.precision == "fp16") {
    EXPECT_GT(run.loss_scale, 1.0) << "fp16 reports its dynamic loss scale";
    EXPECT_LT(run.updates_skipped * 20, run.steps) << "at most 5% of the updates may overflow";
  } else {
    EXPECT_EQ(run.loss_scale, 0.0) << "bf16 needs no loss scaling";
    EXPECT_EQ(run.updates_skipped, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, Gpt3MiniPrecision, ::testing::Values("bf16", "fp16"));

TEST(Gpt3Modes, SyntheticTrainAndInferAtAnySize) {
  for (std::int64_t batch : {1, 3}) {
    RunContext ctx = mini_context({{"seq-len", "16"}, {"layers", "1"}});
    ctx.mode = "train";
    ctx.synthetic_data = true;
    ctx.batch_size = batch;
    gpt3::GptWorkload w;
    const RunInfo info = w.setup(ctx);
    EXPECT_GT(info.train_flops_per_sample, 0);
    EXPECT_NEAR(info.infer_flops_per_sample * 3, info.train_flops_per_sample, 1.0);
    const StepResult a = w.train_step();
    EXPECT_EQ(a.samples, batch);
    // Random tokens: the loss starts near log(vocab).
    EXPECT_NEAR(a.loss, std::log(static_cast<double>(w.model().config().shape.vocab)), 0.5);
    const StepResult b = w.infer_step();
    EXPECT_EQ(b.samples, batch);
    EXPECT_TRUE(std::isfinite(w.evaluate().metric));
  }
}

// What a user runs: `benchhost --plugin gpt3 --config mini`, time to train through the executable,
// and an MLLOG file that follows the MLPerf logging rules (tools/mllog_check.py).
TEST(Gpt3Mini, TimeToTrainThroughTheHostWithACompliantMllog) {
  if (text::default_kjv_path().empty()) GTEST_SKIP() << "bible-kjv-text is not installed";
  test_support::expect_mini_time_to_train("gpt3", "gpt3");
  // Hyperparameters are logged as configured: the closed rules compare opt_adam_beta_2 with 0.95
  // exactly, which its f32 rounding (0.949999988) would fail.
  const std::string mllog = test_support::read_text(fs::path(BENCHHOST_BINARY_DIR) / "host_runs" / "gpt3_mini_ttt" / "mllog.txt");
  for (const char* logged : {"\"key\": \"opt_adam_beta_2\", \"value\": 0.95,", "\"key\": \"opt_adam_epsilon\", \"value\": 1e-08,",
                             "\"key\": \"opt_adam_beta_1\", \"value\": 0.9,", "\"key\": \"opt_base_learning_rate\", \"value\": 0.003,"})
    EXPECT_NE(mllog.find(logged), std::string::npos) << logged;
}

// Note [FLOPs per sample] (plugins/lm_common/model_costs.hpp, docs/plugin-abi.md): the declared
// training FLOPs of a small GPT (2 layers, hidden 128, 4 heads, ffn 512, vocab 1281, 64 tokens)
// against a hand count of every matmul of the step, as [M x K] @ [K x N] = M K N multiply-adds,
// 2 FLOPs each, forward + backward = 3 x forward; causal masking is not discounted (the score and
// context matmuls are full T x T), embeddings, norms, softmax and the loss are not counted.
TEST(Gpt3Modes, DeclaredTrainFlopsMatchAHandCount) {
  RunContext ctx = mini_context({{"layers", "2"}, {"hidden", "128"}, {"heads", "4"}, {"ffn", "512"},
                                 {"vocab", "1281"}, {"seq-len", "64"}});
  ctx.mode = "train";
  ctx.synthetic_data = true;
  ctx.batch_size = 1;
  gpt3::GptWorkload w;
  const RunInfo info = w.setup(ctx);
  const double T = 64, H = 128, F = 512, V = 1281, heads = 4, dh = H / heads;
  const double layer = 3 * (T * H * H)         // q, k, v
                       + heads * (T * dh * T)  // scores
                       + heads * (T * T * dh)  // context
                       + T * H * H             // output projection
                       + T * H * F + T * F * H;  // MLP
  const double logits = T * H * V;  // tied output projection on every position
  const double forward_macs = 2 * layer + logits;
  EXPECT_NEAR(info.train_flops_per_sample, 3 * 2 * forward_macs, 1e-9 * forward_macs);
  EXPECT_NEAR(info.infer_flops_per_sample, 2 * forward_macs, 1e-9 * forward_macs);
}

// Note [Training data held in memory]: the indexes' token counts against the budget, before any
// token is copied.
TEST(Gpt3Data, StreamsThatCannotFitInMemoryAreRefusedBeforeTheyAreCopied) {
  text::test::TempDir dir;
  text::GptPrepareOptions opt;
  opt.corpus = test_support::write_small_corpus(dir / "corpus.txt");
  opt.out_dir = dir / "data";
  opt.merges = 20;
  opt.heldout_every = 4;
  const text::GptPrepared prepared = text::prepare_gpt_data(opt);
  const std::int64_t train_tokens = text::IndexedDataset(prepared.train_prefix).num_tokens(),
                     valid_tokens = text::IndexedDataset(prepared.valid_prefix).num_tokens();

  const MemoryBudget plenty{1e12, 1e12, "test: plenty"};
  const gpt3::TokenStreams d = gpt3::read_data_folder(opt.out_dir, "", opt.merges, 8, &plenty);
  EXPECT_EQ(static_cast<std::int64_t>(d.train.size()), train_tokens);
  EXPECT_EQ(static_cast<std::int64_t>(d.valid.size()), valid_tokens);

  const MemoryBudget tight{1e12, 4.0 * static_cast<double>(train_tokens + valid_tokens), "test: a small cgroup"};
  try {
    gpt3::read_data_folder(opt.out_dir, "", opt.merges, 8, &tight);
    ADD_FAILURE() << "the streams fitted in a quarter less than they take";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(e.message().find("gpt3: the data in"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(fmt::format("{} training and {} validation tokens, 4 bytes each", train_tokens, valid_tokens)),
              std::string::npos) << e.message();
    EXPECT_NE(e.message().find("test: a small cgroup"), std::string::npos) << e.message();
    EXPECT_EQ(e.requested_bytes(), static_cast<std::size_t>(4 * (train_tokens + valid_tokens)));
  }
}
