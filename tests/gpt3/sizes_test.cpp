// GPT-3 family sizes, FLOPs and the memory refusal, counted from the configs without building
// the big models; the counting formula itself is checked against a real small model.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "benchhost/options.hpp"
#include "model.hpp"
#include "model_costs.hpp"
#include "workload.hpp"

using namespace benchhost;

namespace {

std::map<std::string, std::string> config(const std::string& name) {
  return plugin_values(read_config_file(std::string(BENCHHOST_SOURCE_DIR) + "/configs/gpt3/" + name), "gpt3");
}

lm::ModelShape shape_of_config(const std::string& name) {
  return gpt3::GptWorkload::shape_from_options(declared_options<gpt3::GptWorkload>(config(name)));
}

}  // namespace

TEST(Gpt3Sizes, FormulaMatchesARealModel) {
  lm::ModelShape s{.layers = 3, .hidden = 48, .heads = 4, .ffn = 100, .vocab = 301, .max_positions = 40, .seq_len = 32};
  gpt3::GptModel model({.shape = s}, 1);
  EXPECT_EQ(model.num_parameters(), lm::gpt_parameters(s));
  EXPECT_EQ(lm::transformer_layer_parameters(s), 4 * 48 * 48 + 2 * 48 * 100 + 9 * 48 + 100);
}

TEST(Gpt3Sizes, PaperFamilyFromTheConfigs) {
  struct Row {
    const char* config;
    double paper_params;  // GPT-3 paper, Table 2.1
    std::int64_t exact;   // ours: tied embeddings, learned positions, vocabulary 50257
  };
  const Row rows[] = {{"125m.conf", 125e6, 125'226'240},          {"350m.conf", 350e6, 355'871'744},
                      {"760m.conf", 760e6, 760'300'032},          {"1.3b.conf", 1.3e9, 1'315'723'264},
                      {"2.7b.conf", 2.7e9, 2'651'553'280},        {"6.7b.conf", 6.7e9, 6'658'404'352},
                      {"13b.conf", 13.0e9, 12'853'386'240},       {"175b.conf", 175.0e9, 174'604'259'328},
                      {"mlperf.conf", 175.0e9, 174'604'259'328}};
  for (const auto& r : rows) {
    const auto s = shape_of_config(r.config);
    const std::int64_t n = lm::gpt_parameters(s);
    EXPECT_EQ(n, r.exact) << r.config;
    EXPECT_NEAR(static_cast<double>(n) / r.paper_params, 1.0, 0.03) << r.config << ": " << n;
    EXPECT_EQ(s.hidden % s.heads, 0) << r.config;
    EXPECT_EQ(s.seq_len, 2048) << r.config;
  }
  const auto big = shape_of_config("mlperf.conf");
  EXPECT_EQ(big.layers, 96);
  EXPECT_EQ(big.hidden, 12288);
  EXPECT_EQ(big.heads, 96);
}

TEST(Gpt3Sizes, FlopsPerSampleIsSixNPlusAttention) {
  const auto s = shape_of_config("125m.conf");
  const double N = 12.0 * (4.0 * 768 * 768 + 2.0 * 768 * 3072) + 768.0 * 50257;  // matmul weights incl. tied head
  const double expected = 6 * N * 2048 + 12.0 * 12 * 768 * 2048 * 2048;
  EXPECT_DOUBLE_EQ(lm::gpt_train_flops_per_sample(s), expected);
  // 6N dominates for the big model: attention adds 12 L H T / 6N = 2.8% per token at 175B, T = 2048.
  const auto b = shape_of_config("175b.conf");
  const double six_n = 6.0 * static_cast<double>(lm::gpt_parameters(b)) * 2048;
  EXPECT_NEAR(lm::gpt_train_flops_per_sample(b) / six_n, 1.028, 0.003);
}

TEST(Gpt3Memory, Refuses175BBeforeAllocatingWithTheParallelismItNeeds) {
  auto values = config("mlperf.conf");
  values["device-memory-gib"] = "80";  // an H100
  RunContext ctx;
  ctx.mode = "train";
  ctx.synthetic_data = true;
  ctx.options = declared_options<gpt3::GptWorkload>(values);
  gpt3::GptWorkload w;
  try {
    w.setup(ctx);
    FAIL() << "175B must be refused on an 80 GiB device";
  } catch (const OutOfMemory& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("174604259328 parameters"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor parallelism 8 x pipeline parallelism"), std::string::npos) << m;
    EXPECT_NE(m.find("80.0 GiB"), std::string::npos) << m;
    EXPECT_GT(e.requested_bytes(), std::size_t{2'700'000'000'000});
    std::printf("refusal: %s\n", m.c_str());
  }
  const auto plan = lm::plan_gpt_memory(shape_of_config("mlperf.conf"), 1, true, 80.0 * (1ull << 30), "H100");
  EXPECT_FALSE(plan.fits);
  EXPECT_EQ(plan.tensor_parallel, 8);
  EXPECT_GE(plan.pipeline_parallel, 8);
  EXPECT_NEAR(plan.state_bytes, 16.0 * 174'604'259'328.0, 1.0);
  // 125M fits an 80 GiB device; 13B in fp32 does not fit 24 GiB.
  EXPECT_TRUE(lm::plan_gpt_memory(shape_of_config("125m.conf"), 8, true, 80.0 * (1ull << 30), "H100").fits);
  EXPECT_FALSE(lm::plan_gpt_memory(shape_of_config("13b.conf"), 1, false, 24.0 * (1ull << 30), "cpu").fits);
}
