// EmbeddingBag: forward against a hand-written reference, backward against finite differences,
// the sparse-row bookkeeping, and the two gradient-grouping paths (counting sort, key sort).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/nn/registry.hpp"
#include "common/gradcheck.hpp"

using namespace benchhost;
using namespace benchhost::nn;
using benchhost::testing::random_tensor;

namespace {

// out[b] = pool of weight rows of bag b, by plain loops over an explicit list of bags.
std::vector<float> reference_pool(const Tensor& w, const std::vector<std::vector<std::int64_t>>& bags,
                                  BagPooling pooling) {
  const std::int64_t dim = w.size(1);
  std::vector<float> out(bags.size() * dim, 0.0f);
  for (std::size_t b = 0; b < bags.size(); ++b) {
    for (std::int64_t row : bags[b])
      for (std::int64_t d = 0; d < dim; ++d) out[b * dim + d] += static_cast<float>(w.item({row, d}));
    if (pooling == BagPooling::mean && !bags[b].empty())
      for (std::int64_t d = 0; d < dim; ++d) out[b * dim + d] /= static_cast<float>(bags[b].size());
  }
  return out;
}

}  // namespace

TEST(EmbeddingBag, FixedHotnessSumMatchesReference) {
  Tensor w = random_tensor({50, 8}, 1);
  std::vector<std::int32_t> ids = {1, 4, 4, 49, 0, 7, 3, 3, 3, 10, 20, 30};
  Tensor idx = Tensor::from_vector_i32(ids, {4, 3});
  Tensor out = Tensor::empty({4, 8});
  embedding_bag_forward(out, w, idx, Tensor(), BagPooling::sum);
  auto want = reference_pool(w, {{1, 4, 4}, {49, 0, 7}, {3, 3, 3}, {10, 20, 30}}, BagPooling::sum);
  auto got = out.to_float_vector();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(EmbeddingBag, RaggedMeanWithEmptyBagMatchesReference) {
  Tensor w = random_tensor({20, 5}, 2);
  Tensor idx = Tensor::from_vector_i64({2, 19, 5, 5, 5, 0}, {6});
  Tensor off = Tensor::from_vector_i64({0, 2, 2, 5, 6}, {5});
  EmbeddingBag bag(20, 5, BagPooling::mean);
  bag.weight().value.copy_(w);
  Tensor out = bag.forward(idx, off);
  auto want = reference_pool(w, {{2, 19}, {}, {5, 5, 5}, {0}}, BagPooling::mean);
  auto got = out.to_float_vector();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(EmbeddingBag, RejectsOutOfRangeIdsAndBadOffsets) {
  EmbeddingBag bag(10, 4);
  EXPECT_THROW(bag.forward(Tensor::from_vector_i32({1, 10}, {1, 2})), InvalidArgument);
  EXPECT_THROW(bag.forward(Tensor::from_vector_i32({-1, 2}, {2, 1})), InvalidArgument);
  EXPECT_THROW(bag.forward(Tensor::from_vector_i64({1, 2, 3}, {3}),
                           Tensor::from_vector_i64({0, 2, 1, 3}, {4})),
               InvalidArgument);  // decreasing offsets
  EXPECT_THROW(bag.forward(Tensor::from_vector_i64({1, 2, 3}, {3}),
                           Tensor::from_vector_i64({0, 2}, {2})),
               InvalidArgument);  // does not end at N
  EXPECT_THROW(bag.forward(Tensor::from_vector({1, 2}, {1, 2})), InvalidArgument);  // f32 ids
}

TEST(EmbeddingBag, BackwardMatchesFiniteDifferences) {
  for (BagPooling pooling : {BagPooling::sum, BagPooling::mean}) {
    Tensor idx = Tensor::from_vector_i64({0, 3, 3, 7, 1, 2, 9, 9, 0, 4}, {10});
    Tensor off = Tensor::from_vector_i64({0, 3, 4, 4, 10}, {5});
    auto fwd = [&](const std::vector<Tensor>& in) {
      Tensor out = Tensor::empty({4, 6});
      embedding_bag_forward(out, in[0], idx, off, pooling);
      return std::vector<Tensor>{out};
    };
    auto bwd = [&](const std::vector<Tensor>& in, const std::vector<Tensor>& dout) {
      Tensor gw = Tensor::zeros(in[0].shape());
      embedding_bag_backward(dout[0], idx, off, pooling, gw);
      return std::vector<Tensor>{gw};
    };
    EXPECT_GRADCHECK(fwd, bwd, {random_tensor({12, 6}, 3)});
  }
}

TEST(EmbeddingBag, SparseRowsAreTheTouchedRowsAndAccumulate) {
  EmbeddingBag bag(100, 4);
  bag.weight().value.copy_(random_tensor({100, 4}, 4));
  Tensor idx1 = Tensor::from_vector_i32({5, 9, 9, 77}, {2, 2});
  bag.forward(idx1);
  bag.backward(Tensor::full({2, 4}, 1.0));
  ASSERT_TRUE(bag.weight().sparse_rows.defined());
  EXPECT_EQ(bag.weight().sparse_rows.to_float_vector(), (std::vector<float>{5, 9, 77}));
  EXPECT_FLOAT_EQ(static_cast<float>(bag.weight().grad.item({9, 0})), 2.0f);  // twice in bag 0

  Tensor idx2 = Tensor::from_vector_i32({9, 3}, {1, 2});
  bag.forward(idx2);
  bag.backward(Tensor::full({1, 4}, 0.5));
  EXPECT_EQ(bag.weight().sparse_rows.to_float_vector(), (std::vector<float>{3, 5, 9, 77}));
  EXPECT_FLOAT_EQ(static_cast<float>(bag.weight().grad.item({9, 2})), 2.5f);

  bag.zero_grad_fast();
  EXPECT_FALSE(bag.weight().sparse_rows.defined());
  for (float g : bag.weight().grad.to_float_vector()) ASSERT_EQ(g, 0.0f);  // invariant kept
}

TEST(EmbeddingBag, DenseModeLeavesSparseRowsUndefined) {
  EmbeddingBag bag(10, 3, BagPooling::sum, /*sparse_grad=*/false);
  bag.forward(Tensor::from_vector_i32({1, 2}, {1, 2}));
  bag.backward(Tensor::full({1, 3}, 1.0));
  EXPECT_FALSE(bag.weight().sparse_rows.defined());
  EXPECT_FLOAT_EQ(static_cast<float>(bag.weight().grad.item({2, 1})), 1.0f);
}

// A table much larger than the batch takes the key-sort path, a small one the counting sort; both
// must agree with the plain reference implementation, rows and values.
TEST(EmbeddingBag, BothGroupingPathsMatchReferenceImplementation) {
  const OpDef& def = OpRegistry::instance().get("embedding_bag_backward");
  const OpImpl* ref = nullptr;
  const OpImpl* fast = nullptr;
  // The CPU implementations only: once an earlier test has loaded the CUDA library, its
  // implementation is registered too.
  for (const auto& impl : def.impls)
    if (impl.device == DeviceType::cpu) (impl.is_reference ? ref : fast) = &impl;
  ASSERT_NE(ref, nullptr);
  ASSERT_NE(fast, nullptr);
  for (std::int64_t rows : {64, 200000}) {
    Rng rng(rows, 1);
    std::vector<std::int32_t> ids(64 * 5);
    for (auto& x : ids) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(rows)));
    Tensor idx = Tensor::from_vector_i32(ids, {64, 5});
    Tensor dout = random_tensor({64, 16}, 5);
    auto run = [&](const OpImpl* impl) {
      OpCall c;
      c.inputs = {dout, idx, Tensor()};
      c.outputs = {Tensor::zeros({rows, 16}), Tensor::empty({320}, DType::i64),
                   Tensor::empty({1}, DType::i64)};
      c.attrs.set("pooling", 0);
      impl->run(c);
      return c.outputs;
    };
    auto a = run(fast), b = run(ref);
    EXPECT_EQ(a[2].item({0}), b[2].item({0})) << rows;
    EXPECT_EQ(a[1].to_float_vector(), b[1].to_float_vector()) << rows;
    EXPECT_TRUE(benchhost::testing::tensors_close(a[0], b[0], 1e-5, 1e-5)) << rows;
    std::set<std::int32_t> uniq(ids.begin(), ids.end());
    EXPECT_EQ(static_cast<std::size_t>(a[2].item({0})), uniq.size());
  }
}
