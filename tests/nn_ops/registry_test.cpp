// The registry's dispatch rules: priority order, first acceptor wins, refusals reported.

#include <gtest/gtest.h>

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
