// Data parallelism: a two-layer MLP with a hand-written backward trained on P ranks, each on its
// shard of the global batch, must end with the same weights as one process trained on the whole
// global batch (P x the per-rank batch). Every rank also trains that one-process reference
// locally, so one mpirun checks both. The model is written here with nn::Parameter only, so the
// test depends on nothing but the comm area.

#include <gtest/gtest.h>

#include <cmath>

#include "benchhost/comm/data_parallel.hpp"
#include "comm/comm_world.hpp"

using namespace benchhost;
using comm_test::world;

namespace {

constexpr int kIn = 4, kHidden = 8, kOut = 3;

// y = W2 tanh(W1 x + b1) + b2, loss = mean over samples of 0.5 |y - target|^2.
class TinyMlp : public nn::Module {
 public:
  explicit TinyMlp(int seed) : nn::Module("mlp") {
    auto init = [&](Shape s, int salt) {
      Tensor t = Tensor::zeros(s);
      for (std::int64_t i = 0; i < t.numel(); ++i)
        t.data<float>()[i] = 0.5f * static_cast<float>(std::sin(1.7 * i + 0.3 * salt + 11.0 * seed));
      return t;
    };
    w1 = &register_parameter("w1", init({kHidden, kIn}, 1));
    b1 = &register_parameter("b1", init({kHidden}, 2), false);
    w2 = &register_parameter("w2", init({kOut, kHidden}, 3));
    b2 = &register_parameter("b2", init({kOut}, 4), false);
  }

  // One forward + backward over rows [begin, end) of (x, target); gradients accumulate.
  // mark_b1: whether layer 1 marks its bias ready (false exercises finish()'s catch-up).
  void forward_backward(const std::vector<float>& x, const std::vector<float>& target,
                        int begin, int end, bool mark_b1) {
    const int n = end - begin;
    const float* W1 = w1->value.data<float>();
    const float* B1 = b1->value.data<float>();
    const float* W2 = w2->value.data<float>();
    const float* B2 = b2->value.data<float>();
    std::vector<float> h(n * kHidden), dy(n * kOut);
    for (int s = 0; s < n; ++s) {
      const float* xs = &x[(begin + s) * kIn];
      for (int j = 0; j < kHidden; ++j) {
        float z = B1[j];
        for (int k = 0; k < kIn; ++k) z += W1[j * kIn + k] * xs[k];
        h[s * kHidden + j] = std::tanh(z);
      }
      for (int o = 0; o < kOut; ++o) {
        float y = B2[o];
        for (int j = 0; j < kHidden; ++j) y += W2[o * kHidden + j] * h[s * kHidden + j];
        dy[s * kOut + o] = (y - target[(begin + s) * kOut + o]) / static_cast<float>(n);
      }
    }
    // Layer 2 backward, then its parameters are final: mark them (this is when buckets go).
    float* dW2 = w2->grad.data<float>();
    float* dB2 = b2->grad.data<float>();
    std::vector<float> dz(n * kHidden, 0.f);
    for (int s = 0; s < n; ++s) {
      for (int o = 0; o < kOut; ++o) {
        float g = dy[s * kOut + o];
        dB2[o] += g;
        for (int j = 0; j < kHidden; ++j) {
          dW2[o * kHidden + j] += g * h[s * kHidden + j];
          dz[s * kHidden + j] += g * W2[o * kHidden + j];
        }
      }
    }
    w2->mark_grad_ready();
    b2->mark_grad_ready();
    // Layer 1 backward.
    float* dW1 = w1->grad.data<float>();
    float* dB1 = b1->grad.data<float>();
    for (int s = 0; s < n; ++s) {
      const float* xs = &x[(begin + s) * kIn];
      for (int j = 0; j < kHidden; ++j) {
        float g = dz[s * kHidden + j] * (1 - h[s * kHidden + j] * h[s * kHidden + j]);
        dB1[j] += g;
        for (int k = 0; k < kIn; ++k) dW1[j * kIn + k] += g * xs[k];
      }
    }
    w1->mark_grad_ready();
    if (mark_b1) b1->mark_grad_ready();
  }

  void sgd(float lr) {
    for (nn::Parameter* p : parameters()) {
      float* w = p->value.data<float>();
      const float* g = p->grad.data<float>();
      for (std::int64_t i = 0; i < p->value.numel(); ++i) w[i] -= lr * g[i];
    }
  }

  nn::Parameter *w1, *b1, *w2, *b2;
};

void make_batch(int step, int global, std::vector<float>& x, std::vector<float>& t) {
  x.resize(global * kIn);
  t.resize(global * kOut);
  for (int s = 0; s < global; ++s) {
    for (int k = 0; k < kIn; ++k) x[s * kIn + k] = static_cast<float>(std::sin(0.37 * s + 1.3 * k + step));
    for (int o = 0; o < kOut; ++o)
      t[s * kOut + o] = static_cast<float>(std::cos(0.5 * s - o + 0.1 * step));
  }
}

float max_abs_diff(TinyMlp& a, TinyMlp& b) {
  float d = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    for (std::int64_t k = 0; k < pa[i]->value.numel(); ++k)
      d = std::max(d, std::abs(pa[i]->value.data<float>()[k] - pb[i]->value.data<float>()[k]));
  return d;
}

void train_and_compare(bool mark_b1) {
  Communicator& c = world();
  const int p = c.size(), r = c.rank();
  const int per_rank = 5, global = per_rank * p, steps = 8;
  const float lr = 0.2f;

  TinyMlp model(/*seed=*/r);  // different on every rank: DataParallel must broadcast rank 0's
  TinyMlp reference(/*seed=*/0);
  // Tiny buckets (40 bytes) so the four parameters land in four buckets: b2 | w2 | b1 | w1.
  DataParallel dp(model.parameters(), c, 40);
  ASSERT_EQ(dp.num_buckets(), 4u);
  EXPECT_EQ(dp.bucket_parameters(0), std::vector<std::size_t>{3});  // b2: last registered first
  EXPECT_EQ(dp.bucket_parameters(3), std::vector<std::size_t>{0});
  EXPECT_EQ(max_abs_diff(model, reference), 0.f) << "parameters were not broadcast from rank 0";

  std::vector<float> x, t;
  for (int step = 0; step < steps; ++step) {
    make_batch(step, global, x, t);
    model.zero_grad();
    model.forward_backward(x, t, r * per_rank, (r + 1) * per_rank, mark_b1);
    dp.finish();
    model.sgd(lr);

    reference.zero_grad();
    reference.forward_backward(x, t, 0, global, true);
    reference.sgd(lr);

    if (mark_b1) {
      // All four buckets were issued from hooks during backward (overlap), none by finish().
      EXPECT_EQ(dp.last_overlapped_buckets(), 4u);
      EXPECT_EQ(dp.last_unmarked_parameters(), 0u);
    } else {
      // b1's bucket waits for finish(), and w1's bucket, though complete, must wait behind it.
      EXPECT_EQ(dp.last_overlapped_buckets(), 2u);
      EXPECT_EQ(dp.last_unmarked_parameters(), 1u);
    }
  }
  EXPECT_LT(max_abs_diff(model, reference), 2e-5f)
      << "data-parallel training on " << p << " ranks diverged from one process on the global batch";
  // Something was learned (the comparison is not between two untouched models).
  TinyMlp untouched(0);
  EXPECT_GT(max_abs_diff(reference, untouched), 1e-2f);
}

}  // namespace

TEST(DataParallel, SameWeightsAsOneProcessOnTheGlobalBatch) { train_and_compare(true); }

TEST(DataParallel, ParametersNeverMarkedAreReducedAtFinish) { train_and_compare(false); }

TEST(DataParallel, HooksAreInstalledAndRemoved) {
  TinyMlp model(0);
  {
    DataParallel dp(model.parameters(), world(), 1 << 20);
    EXPECT_EQ(dp.num_buckets(), 1u);
    EXPECT_TRUE(static_cast<bool>(model.w1->grad_ready_hook));
    EXPECT_THROW(DataParallel(model.parameters(), world(), 1 << 20), InvalidArgument);
  }
  EXPECT_FALSE(static_cast<bool>(model.w1->grad_ready_hook));
  EXPECT_THROW(DataParallel(model.parameters(), world(), 0), InvalidArgument);
  auto ps = model.parameters();
  ps.push_back(ps[0]);
  EXPECT_THROW(DataParallel(ps, world(), 64), InvalidArgument);
}
