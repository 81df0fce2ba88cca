// The registry's dispatch rules: priority order, first acceptor wins, refusals reported.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/threading.hpp"

namespace benchhost::nn {
namespace {

TEST(OpRegistry, FirstAcceptingImplementationWinsInPriorityOrder) {
  static std::string last;
  auto mark = [](const char* n) { return [n](OpCall&) { last = n; }; };
  register_op_impl("test.order", OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, mark("ref"), true});
  register_op_impl("test.order", OpImpl{"cpu.fast", DeviceType::cpu, 50,
                                        [](const OpCall& c) { return c.attrs.get_bool("fast_ok") ? "" : std::string("fast_ok not set"); },
                                        mark("fast"), false});
  register_op_impl("test.order", OpImpl{"cuda.x", DeviceType::cuda, 100, nullptr, mark("cuda"), false});
  const OpDef& def = OpRegistry::instance().get("test.order");
  ASSERT_EQ(def.impls.size(), 3u);
  EXPECT_EQ(def.impls.front().name, "cuda.x");
  EXPECT_EQ(def.impls.back().name, "cpu.ref");

  OpCall c{{Tensor::zeros({2})}, {}, Attrs().set("fast_ok", 1)};
  dispatch("test.order", c);
  EXPECT_EQ(last, "fast");
  c.attrs.set("fast_ok", 0);
  dispatch("test.order", c);
  EXPECT_EQ(last, "ref");
}

// Note [Skipping implementations]: BENCHHOST_OP_SKIP names implementations dispatch passes over.
// The plain test run has no such variable; tests/nn_ops/CMakeLists.txt runs this test again with
// BENCHHOST_OP_SKIP=",cpu.named,test.skip/cpu.fast" (an empty entry, a bare implementation name
// and an op-qualified one), and the expectations follow the variable.
TEST(OpRegistry, SkippedImplementationsFollowTheEnvironment) {
  static std::string last;
  auto mark = [](const char* n) { return [n](OpCall&) { last = n; }; };
  register_op_impl("test.skip", OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, mark("ref"), true});
  register_op_impl("test.skip", OpImpl{"cpu.fast", DeviceType::cpu, 50, nullptr, mark("fast"), false});
  register_op_impl("test.skip", OpImpl{"cpu.named", DeviceType::cpu, 60, nullptr, mark("named"), false});
  register_op_impl("test.skip_other", OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, mark("other ref"), true});
  register_op_impl("test.skip_other", OpImpl{"cpu.fast", DeviceType::cpu, 50, nullptr, mark("other fast"), false});
  const char* env = std::getenv("BENCHHOST_OP_SKIP");
  const bool skipping = env != nullptr && std::string(env) == ",cpu.named,test.skip/cpu.fast";
  ASSERT_TRUE(env == nullptr || skipping) << "unexpected BENCHHOST_OP_SKIP=" << env;
  OpCall c{{Tensor::zeros({1})}, {}, {}};
  dispatch("test.skip", c);
  EXPECT_EQ(last, skipping ? "ref" : "named");
  dispatch("test.skip_other", c);  // "test.skip/cpu.fast" names another op's cpu.fast
  EXPECT_EQ(last, "other fast");
}

// Note [Op times]: BENCHHOST_OP_TIMES=shapes totals each op per dtype, shapes and attributes and
// prints the rows at exit; calls made while counting is off are left out. Each check runs in a
// fresh process (the mode is read once per process).
void time_two_shapes() {
  setenv("BENCHHOST_OP_TIMES", "shapes", 1);
  register_op_impl("test.timed", OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, [](OpCall&) {}, true});
  OpCall a{{Tensor::zeros({2, 3}), Tensor()}, {Tensor::zeros({3})}, {}};
  a.attrs.set("k", 1);
  a.attrs.set_ints("pad", {1, 2});
  OpCall b{{Tensor::zeros({4})}, {}, {}};
  set_op_times_counting(false);  // as the host does for warm-up steps: these two are not counted
  dispatch("test.timed", b);
  dispatch("test.timed", b);
  set_op_times_counting(true);
  dispatch("test.timed", a);
  dispatch("test.timed", a);
  dispatch("test.timed", b);
  std::exit(0);
}

TEST(OpRegistry, OpTimesByShapeSeparateTheShapesOfAnOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(time_two_shapes(), testing::ExitedWithCode(0),
              "benchhost_op_times,op,dtype shapes \\[attributes\\],calls,seconds,share");
  EXPECT_EXIT(time_two_shapes(), testing::ExitedWithCode(0),
              "benchhost_op_times,test\\.timed,f32 2x3 - -> 3 \\[k=1 pad=\\[1 2\\]\\],2,");
  EXPECT_EXIT(time_two_shapes(), testing::ExitedWithCode(0), "benchhost_op_times,test\\.timed,f32 4 ->,1,");
}

TEST(OpRegistry, NoAcceptorListsEveryRefusal) {
  register_op_impl("test.refuse", OpImpl{"cpu.a", DeviceType::cpu, 10, [](const OpCall&) { return std::string("needs bf16"); },
                                         [](OpCall&) {}, false});
  OpCall c{{Tensor::zeros({1})}, {}, {}};
  try {
    dispatch("test.refuse", c);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("cpu.a refused: needs bf16"), std::string::npos) << e.what();
  }
}

std::uint64_t promotions_of(const std::string& op) {
  for (const auto& [name, n] : OpRegistry::instance().promotion_counts())
    if (name == op) return n;
  return 0;
}

// Note [Half-precision promotion]: a bf16 call reaches an implementation only through an
// accepts() that takes it; otherwise it is computed in f32 and the bf16 outputs rounded once.
TEST(OpRegistry, HalfCallsArePromotedUnlessAnImplementationTakesThem) {
  static std::string last;
  static std::vector<DType> seen;
  // out[i] = in[i] * 3 + out[i] (an accumulating output), f32 only: the plain reference.
  auto triple_acc = [](OpCall& c) {
    last = "ref";
    seen.clear();
    for (const Tensor& t : c.inputs) seen.push_back(t.dtype());
    for (const Tensor& t : c.outputs) seen.push_back(t.dtype());
    const float* x = c.inputs[0].data<float>();
    float* y = c.outputs[0].data<float>();
    for (std::int64_t i = 0; i < c.inputs[0].numel(); ++i) y[i] += 3.0f * x[i];
  };
  register_op_impl("test.promote", OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, triple_acc, true});
  const Tensor x = Tensor::from_vector({1.0f, 1.0f / 3.0f, -2.5f}, {3});
  Tensor out = Tensor::from_vector({10.0f, 0.0f, 1.0f}, {3}).to(DType::bf16);
  OpCall half{{x.to(DType::bf16)}, {out}, {}};
  const std::uint64_t promoted_before = promotions_of("test.promote");
  dispatch("test.promote", half);
  EXPECT_EQ(last, "ref") << "the reference (no accepts()) ran on promoted copies";
  EXPECT_EQ(promotions_of("test.promote"), promoted_before + 1) << "the promotion is counted";
  EXPECT_EQ(seen, (std::vector<DType>{DType::f32, DType::f32})) << "the reference saw f32 tensors only";
  ASSERT_EQ(half.outputs[0].dtype(), DType::bf16);
  // bf16(1/3) = 0.333984375; 3 * that = 1.001953125 -> bf16 1.0 (the output is rounded once).
  const float want[3] = {13.0f, bf16_to_float(float_to_bf16(3.0f * bf16_to_float(float_to_bf16(1.0f / 3.0f)))), -6.5f};
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(static_cast<float>(out.item({i})), want[i]) << i;

  // An implementation whose accepts() takes bf16 runs it natively, without promotion.
  register_op_impl("test.promote", OpImpl{"cpu.bf16", DeviceType::cpu, 60,
                                          [](const OpCall& c) {
                                            return c.inputs[0].dtype() == DType::bf16 ? std::string() : std::string("needs bf16");
                                          },
                                          [](OpCall&) { last = "bf16"; }, false});
  dispatch("test.promote", half);
  EXPECT_EQ(last, "bf16");
  EXPECT_EQ(promotions_of("test.promote"), promoted_before + 1) << "a native call is not a promotion";
  OpCall f32call{{x}, {Tensor::zeros({3})}, {}};
  dispatch("test.promote", f32call);
  EXPECT_EQ(last, "ref") << "the bf16 implementation refused an f32 call";
}

TEST(OpRegistry, UnknownOpIsUnsupportedAndNamesTheRegisteredOps) {
  OpCall c;
  try {
    dispatch("no_such_op", c);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
}

TEST(OpRegistry, AttrsRoundTrip) {
  Attrs a;
  a.set("eps", 1e-5).set_ints("dims", {0, -1}).set("eps", 2e-5);
  EXPECT_DOUBLE_EQ(a.get("eps"), 2e-5);
  EXPECT_EQ(a.get_ints("dims"), (std::vector<std::int64_t>{0, -1}));
  EXPECT_DOUBLE_EQ(a.get("missing", 3.0), 3.0);
  EXPECT_THROW(a.get("missing"), InvalidArgument);
}

TEST(Threading, SetAndRestoreThreadCount) {
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(0);
  EXPECT_GE(get_num_threads(), 1);
  EXPECT_THROW(set_num_threads(-2), InvalidArgument);
}

}  // namespace
}  // namespace benchhost::nn
