// Sparse Adagrad (only the touched rows, Parameter::sparse_rows) equals dense Adagrad on the same
// real embedding-bag gradients: touched rows identical, untouched rows never move.
#include <gtest/gtest.h>

#include "benchhost/nn/embedding_bag.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/random.hpp"
#include "common/gradcheck.hpp"

using namespace benchhost;
using namespace benchhost::nn;

TEST(SparseAdagrad, MatchesDenseAdagradOnTouchedRowsOfRealBagGradients) {
  const std::int64_t rows = 500, dim = 8, bags = 32, hot = 4;
  EmbeddingBag sparse(rows, dim, BagPooling::sum, /*sparse_grad=*/true);
  EmbeddingBag dense(rows, dim, BagPooling::sum, /*sparse_grad=*/false);
  Tensor init = benchhost::testing::random_tensor({rows, dim}, 11);
  sparse.weight().value.copy_(init);
  dense.weight().value.copy_(init);
  optim::AdagradOptions ao;
  ao.epsilon = 1e-10f;
  optim::Adagrad opt_s({&sparse.weight()}, ao), opt_d({&dense.weight()}, ao);
  std::vector<char> touched(rows, 0);
  Rng rng(3);
  for (int step = 0; step < 6; ++step) {
    std::vector<std::int64_t> ids(bags * hot);
    // Ids from the first 200 rows only: rows 200..499 are never touched.
    for (auto& x : ids) x = static_cast<std::int64_t>(rng.below(200)), touched[x] = 1;
    Tensor idx = Tensor::from_vector_i64(ids, {bags, hot});
    Tensor dout = benchhost::testing::random_tensor({bags, dim}, 100 + step);
    sparse.forward(idx);
    dense.forward(idx);
    sparse.backward(dout);
    dense.backward(dout);
    ASSERT_TRUE(sparse.weight().sparse_rows.defined());
    ASSERT_LT(sparse.weight().sparse_rows.numel(), rows);
    opt_s.step(0.1f);
    opt_d.step(0.1f);
    sparse.zero_grad_fast();
    dense.zero_grad_fast();
  }
  const auto ws = sparse.weight().value.to_float_vector(), wd = dense.weight().value.to_float_vector();
  const auto w0 = init.to_float_vector();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t d = 0; d < dim; ++d) {
      const auto i = r * dim + d;
      ASSERT_NEAR(ws[i], wd[i], 1e-6f) << "row " << r;
      if (!touched[r]) ASSERT_EQ(ws[i], w0[i]) << "untouched row " << r << " moved";
      else if (d == 0) EXPECT_NE(ws[i], w0[i]) << "touched row " << r << " did not move";
    }
}
