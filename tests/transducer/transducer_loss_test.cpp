// The transducer (RNN-T) loss (nn/transducer.hpp): hand-computed cases, an f64 path-sum
// reference with finite differences, the oneTBB implementation against the plain reference on
// larger cases, 'mean' against 'none', argument errors, torchaudio's rnnt_loss itself
// (tools/peers/rnnt_peer.py, skipped visibly without torchaudio) and CUDA against the CPU
// (skipped visibly without a GPU). The registry walks (tests/nn_ops: parity, half precision) cover
// the ops' example cases too.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "benchhost/nn/transducer.hpp"
#include "benchhost/random.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

namespace fs = std::filesystem;
using benchhost::testing::GradcheckOptions;
using benchhost::testing::random_tensor;
using benchhost::testing::tensors_close;

// A batch of utterances: logits [B, T, U+1, V], labels [B, U], lengths.
struct Batch {
  Tensor logits, labels, frames, label_counts;
  std::int64_t blank = 0;
};

// Random batch; max(frames) = T and max(label_counts) = U unless told otherwise (torchaudio needs
// both). Labels avoid the blank; padding is 0.
Batch random_batch(std::int64_t T, std::int64_t U, std::int64_t V, std::int64_t blank, std::vector<std::int32_t> frames,
                   std::vector<std::int32_t> label_counts, std::uint64_t seed, float range = 3.0f) {
  const auto B = static_cast<std::int64_t>(frames.size());
  Rng r(seed, 11);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(B * U), 0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t u = 0; u < label_counts[static_cast<std::size_t>(b)]; ++u) {
      auto y = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(V - 1)));
      labels[static_cast<std::size_t>(b * U + u)] = static_cast<std::int32_t>(y >= blank ? y + 1 : y);
    }
  return {random_tensor({B, T, U + 1, V}, seed + 1, -range, range), Tensor::from_vector_i32(labels, {B, U}),
          Tensor::from_vector_i32(frames, {B}), Tensor::from_vector_i32(label_counts, {B}), blank};
}

TransducerLossSpec spec_of(const Batch& x, TransducerReduction red) { return {x.blank, red}; }

Tensor losses(const Batch& x, TransducerLossSaved* saved = nullptr) {
  return transducer_loss_forward(x.logits, x.labels, x.frames, x.label_counts, spec_of(x, TransducerReduction::none),
                                 saved);
}

// ---------------------------------------------------------------------------------------------
// f64 reference: the probability of y as a sum over every alignment, by recursion over the
// lattice in probability space (not log space), independent of the SDK's code.
// ---------------------------------------------------------------------------------------------

double path_sum_loss(const std::vector<double>& z, std::int64_t T, std::int64_t U1, std::int64_t V,
                     const std::vector<std::int64_t>& y, std::int64_t Tb, std::int64_t blank) {
  if (Tb == 0) return 0.0;
  const auto Ub = static_cast<std::int64_t>(y.size());
  auto prob = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
    const double* row = z.data() + (t * U1 + u) * V;
    double s = 0.0;
    for (std::int64_t j = 0; j < V; ++j) s += std::exp(row[j]);
    return std::exp(row[k]) / s;
  };
  // P(reach (t, u) and then finish) summed over all paths, by plain recursion.
  std::function<double(std::int64_t, std::int64_t)> finish = [&](std::int64_t t, std::int64_t u) -> double {
    double p = 0.0;
    if (t == Tb - 1 && u == Ub) return prob(t, u, blank);
    if (t < Tb - 1) p += prob(t, u, blank) * finish(t + 1, u);
    if (u < Ub) p += prob(t, u, y[static_cast<std::size_t>(u)]) * finish(t, u + 1);
    return p;
  };
  return -std::log(finish(0, 0));
}

// Utterance b of a batch as f64 logits, its labels and frame count.
struct Utterance {
  std::vector<double> z;
  std::vector<std::int64_t> y;
  std::int64_t tb;
};
Utterance utterance(const Batch& x, std::int64_t b) {
  const std::int64_t T = x.logits.size(1), U1 = x.logits.size(2), V = x.logits.size(3);
  Utterance u;
  const float* p = x.logits.data<float>() + b * T * U1 * V;
  u.z.assign(p, p + T * U1 * V);
  for (std::int64_t k = 0; k < x.label_counts.data<std::int32_t>()[b]; ++k)
    u.y.push_back(x.labels.data<std::int32_t>()[b * (U1 - 1) + k]);
  u.tb = x.frames.data<std::int32_t>()[b];
  return u;
}

// ---------------------------------------------------------------------------------------------
// Hand cases
// ---------------------------------------------------------------------------------------------

TEST(TransducerLoss, OneFrameNoLabelIsMinusLogSoftmaxOfBlank) {
  const std::vector<float> z = {0.5f, -1.0f, 2.0f};
  Batch x{Tensor::from_vector(z, {1, 1, 1, 3}), Tensor::empty({1, 0}, DType::i32), Tensor::from_vector_i32({1}, {1}),
          Tensor::from_vector_i32({0}, {1}), 2};
  const double lse = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0));
  TransducerLossSaved saved;
  const Tensor l = losses(x, &saved);
  EXPECT_NEAR(l.item({0}), lse - 2.0, 1e-6);
  // The gradient is softmax - onehot(blank).
  const Tensor g = transducer_loss_backward(saved, 1.0f);
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(g.item({0, 0, 0, k}), std::exp(z[static_cast<std::size_t>(k)] - lse) - (k == 2 ? 1.0 : 0.0), 1e-6);
  // blank = -1 means V - 1, and 'mean' of one utterance is the loss.
  EXPECT_NEAR(transducer_loss_forward(x.logits, x.labels, x.frames, x.label_counts).item({0}), lse - 2.0, 1e-6);
}

TEST(TransducerLoss, TwoFramesOneLabelIsTheSumOfItsTwoAlignments) {
  const std::int64_t V = 4, blank = 0, y = 2;
  Batch x = random_batch(2, 1, V, blank, {2}, {1}, 5);
  x.labels.data<std::int32_t>()[0] = static_cast<std::int32_t>(y);
  auto lp = [&](std::int64_t t, std::int64_t u, std::int64_t k) {
    const float* row = x.logits.data<float>() + (t * 2 + u) * V;
    double s = 0.0;
    for (std::int64_t j = 0; j < V; ++j) s += std::exp(static_cast<double>(row[j]));
    return row[k] - std::log(s);
  };
  // y at t=0, then blank, blank; or blank at t=0, then y at t=1, then blank.
  const double p1 = lp(0, 0, y) + lp(0, 1, blank) + lp(1, 1, blank);
  const double p2 = lp(0, 0, blank) + lp(1, 0, y) + lp(1, 1, blank);
  EXPECT_NEAR(losses(x).item({0}), -std::log(std::exp(p1) + std::exp(p2)), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Against the f64 path sum: loss, and the gradient against its central finite differences
// ---------------------------------------------------------------------------------------------

TEST(TransducerLoss, LossAndGradientMatchF64PathSumFiniteDifferences) {
  // Unequal lengths, U_b = 0, T_b < T, an empty utterance, blank first and last.
  const Batch cases[] = {random_batch(4, 3, 5, 4, {4, 2, 3}, {3, 0, 2}, 21),
                         random_batch(3, 2, 6, 0, {3, 0, 1}, {1, 0, 2}, 22),
                         random_batch(5, 2, 3, 1, {5, 4}, {2, 1}, 23)};
  for (const Batch& x : cases) {
    const std::int64_t B = x.logits.size(0), T = x.logits.size(1), U1 = x.logits.size(2), V = x.logits.size(3);
    TransducerLossSaved saved;
    const Tensor l = losses(x, &saved);
    const std::vector<float> dloss = {0.7f, 1.3f, -0.4f};
    const Tensor g = transducer_loss_backward(Tensor::from_vector({dloss.begin(), dloss.begin() + B}, {B}), saved);
    double worst = 0.0;
    for (std::int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE(fmt::format("utterance {} of case T={} U={} V={}", b, T, U1 - 1, V));
      Utterance u = utterance(x, b);
      const double ref = path_sum_loss(u.z, T, U1, V, u.y, u.tb, x.blank);
      EXPECT_NEAR(l.item({b}), ref, 2e-6 * std::max(1.0, std::fabs(ref)));
      const double eps = 1e-5;
      for (std::size_t i = 0; i < u.z.size(); ++i) {
        const double keep = u.z[i];
        u.z[i] = keep + eps;
        const double up = path_sum_loss(u.z, T, U1, V, u.y, u.tb, x.blank);
        u.z[i] = keep - eps;
        const double down = path_sum_loss(u.z, T, U1, V, u.y, u.tb, x.blank);
        u.z[i] = keep;
        const double fd = dloss[static_cast<std::size_t>(b)] * (up - down) / (2 * eps);
        const double got = g.data<float>()[b * T * U1 * V + static_cast<std::int64_t>(i)];
        worst = std::max(worst, std::fabs(got - fd));
        ASSERT_NEAR(got, fd, 2e-6) << "logit " << i << " (t " << i / (U1 * V) << ", u " << i / V % U1 << ", k " << i % V
                                   << ")";
      }
    }
    RecordProperty(fmt::format("max_abs_err_T{}_U{}_V{}", T, U1 - 1, V), fmt::format("{:.2e}", worst));
  }
}

// The SDK's own fp32 finite-difference check (tests/common/gradcheck.hpp), per-utterance upstream
// gradients.
TEST(TransducerLoss, GradcheckF32) {
  const Batch x = random_batch(4, 3, 6, 5, {4, 3}, {3, 1}, 31, 2.0f);
  using V = std::vector<Tensor>;
  EXPECT_GRADCHECK(
      [&](const V& in) {
        return V{
            transducer_loss_forward(in[0], x.labels, x.frames, x.label_counts, spec_of(x, TransducerReduction::none))};
      },
      [&](const V& in, const V& d) {
        TransducerLossSaved s;
        transducer_loss_forward(in[0], x.labels, x.frames, x.label_counts, spec_of(x, TransducerReduction::none), &s);
        return V{transducer_loss_backward(d[0], s)};
      },
      {x.logits}, GradcheckOptions{.eps = 1e-2, .atol = 1e-3});
}

// ---------------------------------------------------------------------------------------------
// oneTBB against the reference; mean against none
// ---------------------------------------------------------------------------------------------

OpCall forward_call(const Batch& x) {
  const std::int64_t B = x.logits.size(0), T = x.logits.size(1), U1 = x.logits.size(2);
  OpCall c;
  c.inputs = {x.logits, x.labels, x.frames, x.label_counts};
  c.outputs = {Tensor::empty({B}), Tensor::empty({B, T, U1}, DType::f64), Tensor::empty({B, T, U1}, DType::f64)};
  c.attrs.set("blank", static_cast<double>(x.blank));
  return c;
}

const OpImpl& impl_named(const char* op, const char* name) {
  for (const OpImpl& i : OpRegistry::instance().get(op).impls)
    if (i.name == name) return i;
  throw std::runtime_error(fmt::format("{} has no implementation {}", op, name));
}

TEST(TransducerLoss, OneTbbMatchesReferenceOnLargerCases) {
  const Batch cases[] = {random_batch(20, 8, 50, 49, {20, 13, 7, 1}, {8, 5, 0, 1}, 41),
                         random_batch(12, 6, 300, 0, {9, 12}, {6, 2}, 42, 6.0f)};
  for (const Batch& x : cases) {
    OpCall ref = forward_call(x), tbb = forward_call(x);
    impl_named("transducer_loss_forward", "cpu.ref").run(ref);
    impl_named("transducer_loss_forward", "cpu.tbb").run(tbb);
    for (int o = 0; o < 3; ++o)
      EXPECT_TRUE(tensors_close(tbb.outputs[o], ref.outputs[o], 1e-5, 1e-5)) << "output " << o;
    OpCall bref;
    bref.inputs = {x.logits,
                   x.labels,
                   x.frames,
                   x.label_counts,
                   ref.outputs[1],
                   ref.outputs[2],
                   random_tensor({x.logits.size(0)}, 43, 0.5f, 2.0f)};
    bref.outputs = {Tensor::empty(x.logits.shape())};
    bref.attrs = ref.attrs;
    OpCall btbb = bref;
    btbb.outputs = {Tensor::empty(x.logits.shape())};
    impl_named("transducer_loss_backward", "cpu.ref").run(bref);
    impl_named("transducer_loss_backward", "cpu.tbb").run(btbb);
    EXPECT_TRUE(tensors_close(btbb.outputs[0], bref.outputs[0], 1e-6, 1e-4));
  }
}

TEST(TransducerLoss, MeanIsSumOfNoneOverBatchAndScalesTheGradient) {
  const Batch x = random_batch(6, 4, 9, 8, {6, 3, 5}, {4, 4, 0}, 51);
  TransducerLossSaved none_saved, mean_saved;
  const Tensor none = losses(x, &none_saved);
  const Tensor mean = transducer_loss_forward(x.logits, x.labels, x.frames, x.label_counts,
                                              spec_of(x, TransducerReduction::mean), &mean_saved);
  ASSERT_EQ(mean.shape(), Shape({1}));
  const double sum = none.item({0}) + none.item({1}) + none.item({2});
  EXPECT_NEAR(mean.item({0}), sum / 3.0, 1e-6 * sum);
  // 'mean' with dloss 1.5 is 'none' with dloss 0.5 for every utterance.
  const Tensor gm = transducer_loss_backward(mean_saved, 1.5f);
  const Tensor gn = transducer_loss_backward(none_saved, 0.5f);
  EXPECT_TRUE(tensors_close(gm, gn, 1e-7, 1e-6));
  // Outside each utterance's lattice the gradient is exactly zero.
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t t = 0; t < 6; ++t)
      for (std::int64_t u = 0; u < 5; ++u) {
        if (t < x.frames.data<std::int32_t>()[b] && u <= x.label_counts.data<std::int32_t>()[b]) continue;
        for (std::int64_t k = 0; k < 9; ++k) ASSERT_EQ(gn.item({b, t, u, k}), 0.0) << b << " " << t << " " << u;
      }
}

TEST(TransducerLoss, HalfPrecisionLogitsArePromoted) {
  const Batch x = random_batch(4, 2, 5, 4, {4, 3}, {2, 1}, 61);
  for (DType h : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(h));
    const Tensor zh = x.logits.to(h);
    TransducerLossSaved saved;
    const Tensor l =
        transducer_loss_forward(zh, x.labels, x.frames, x.label_counts, spec_of(x, TransducerReduction::none), &saved);
    const Tensor ref = transducer_loss_forward(zh.to(DType::f32), x.labels, x.frames, x.label_counts,
                                               spec_of(x, TransducerReduction::none));
    EXPECT_EQ(l.dtype(), DType::f32);
    EXPECT_TRUE(tensors_close(l, ref, 1e-5, 1e-5));
    const Tensor g = transducer_loss_backward(saved, 1.0f);
    EXPECT_EQ(g.dtype(), h) << "the gradient comes back in the logits' dtype";
  }
}

// ---------------------------------------------------------------------------------------------
// Errors name the utterance and the value
// ---------------------------------------------------------------------------------------------

void expect_invalid(const Batch& x, const std::string& needle) {
  try {
    losses(x);
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TransducerLoss, BadLabelsLengthsAndShapesThrowNamingTheUtterance) {
  const Batch good = random_batch(4, 3, 5, 4, {4, 3}, {3, 2}, 71);
  ASSERT_NO_THROW(losses(good));
  {
    Batch x = good;
    x.labels = good.labels.clone();
    x.labels.data<std::int32_t>()[3 + 1] = 5;  // utterance 1, position 1: >= V
    expect_invalid(x, "utterance 1 label 5");
    x.labels.data<std::int32_t>()[3 + 1] = 4;  // the blank
    expect_invalid(x, "is the blank");
    x.labels.data<std::int32_t>()[3 + 1] = -2;
    expect_invalid(x, "utterance 1 label -2");
    x.labels.data<std::int32_t>()[3 + 2] = 9;  // padding past U_1 = 2: ignored
    x.labels.data<std::int32_t>()[3 + 1] = 1;
    EXPECT_NO_THROW(losses(x));
  }
  {
    Batch x = good;
    x.frames = Tensor::from_vector_i32({4, 5}, {2});
    expect_invalid(x, "utterance 1 has logit (frame) length 5");
    x.frames = Tensor::from_vector_i32({-1, 3}, {2});
    expect_invalid(x, "utterance 0 has logit (frame) length -1");
    x.frames = Tensor::from_vector_i32({4, 0}, {2});
    expect_invalid(x, "utterance 1 has 2 labels but no frames");
  }
  {
    Batch x = good;
    x.label_counts = Tensor::from_vector_i32({4, 2}, {2});
    expect_invalid(x, "utterance 0 has label length 4");
  }
  {
    Batch x = good;
    x.labels = Tensor::zeros({2, 2}, DType::i32);
    expect_invalid(x, "labels must be i32 [B, U] = [2, 3]");
    x = good;
    x.frames = Tensor::from_vector_i32({4, 3, 3}, {3});
    expect_invalid(x, "lengths must be i32 [2]");
    x = good;
    x.label_counts = Tensor::from_vector_i64({3, 2}, {2});
    expect_invalid(x, "label lengths must be i32");
    x = good;
    x.blank = 5;
    expect_invalid(x, "blank 5 is outside");
  }
}

// ---------------------------------------------------------------------------------------------
// torchaudio (tools/peers/rnnt_peer.py)
// ---------------------------------------------------------------------------------------------

bool have_torchaudio() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import torch, torchaudio' > /dev/null 2>&1") == 0;
  return ok;
}

struct PeerDir {
  fs::path dir;
  std::vector<std::string> shapes;
  std::string extra;
  explicit PeerDir(const std::string& tag) {
    dir = fs::temp_directory_path() / fmt::format("bh_rnnt_{}_{}", tag, ::getpid());
    fs::create_directories(dir);
  }
  ~PeerDir() { fs::remove_all(dir); }
  void put(const std::string& name, const Tensor& t) {
    const Tensor c = t.contiguous();
    std::ofstream f(dir / (name + ".bin"), std::ios::binary);
    f.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
    shapes.push_back(fmt::format("\"{}\": [{}]", name, fmt::join(c.shape(), ", ")));
  }
  void write_meta() const {
    std::ofstream(dir / "meta.json") << "{" << extra << "\"shapes\": {" << fmt::format("{}", fmt::join(shapes, ", "))
                                     << "}}";
  }
  // Run the peer in `mode` on every folder at once (one Python start-up); false (with a test
  // failure) if it fails.
  static bool run(const char* mode, const std::vector<const PeerDir*>& dirs) {
    std::string args;
    for (const PeerDir* d : dirs) {
      d->write_meta();
      args += fmt::format(" '{}'", d->dir.string());
    }
    const fs::path peer = fs::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / "rnnt_peer.py";
    const std::string cmd = fmt::format("/usr/bin/python3 '{}' {}{} 2>&1", peer.string(), mode, args);
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    return rc == 0;
  }
  Tensor floats(const std::string& name, const Shape& shape) const {
    std::ifstream f(dir / (name + ".bin"), std::ios::binary | std::ios::ate);
    std::vector<float> v(static_cast<std::size_t>(f.tellg()) / 4);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return Tensor::from_vector(v, shape);
  }
};

// max |a - b| / max |b|: the gradient's error relative to its scale.
double scaled_max_error(const Tensor& a, const Tensor& b) {
  const auto va = a.to_float_vector(), vb = b.to_float_vector();
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(va[i]) - vb[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(vb[i])));
  }
  return err / scale;
}

TEST(TransducerLossTorchaudio, LossAndGradientMatchRnntLoss) {
  if (!have_torchaudio())
    GTEST_SKIP() << "/usr/bin/python3 has no torch/torchaudio: the torchaudio cross-check did not run";
  struct Case {
    const char* name;
    Batch x;
  };
  // max(frames) = T and max(label_counts) = U: torchaudio requires it.
  const Case cases[] = {
      {"small", random_batch(5, 3, 6, 5, {5, 2, 4}, {1, 3, 0}, 81)},
      {"blank0", random_batch(7, 4, 9, 0, {3, 7}, {4, 2}, 82)},
      {"reference_vocab", random_batch(40, 10, 1024, 1023, {40, 31, 17, 36}, {7, 10, 4, 9}, 83, 4.0f)}};
  std::vector<std::unique_ptr<PeerDir>> dirs;
  std::vector<const PeerDir*> all;
  for (const Case& c : cases) {
    PeerDir& p = *dirs.emplace_back(std::make_unique<PeerDir>(c.name));
    const Batch& x = c.x;
    p.put("logits", x.logits);
    p.put("labels", x.labels);
    p.put("logit_lengths", x.frames);
    p.put("label_lengths", x.label_counts);
    p.put("dloss", random_tensor({x.logits.size(0)}, 84, 0.5f, 1.5f));
    p.extra = fmt::format("\"blank\": {}, ", x.blank);
    all.push_back(&p);
  }
  ASSERT_TRUE(PeerDir::run("transducer_loss", all));
  for (std::size_t ci = 0; ci < std::size(cases); ++ci) {
    const Case& c = cases[ci];
    const PeerDir& p = *dirs[ci];
    SCOPED_TRACE(c.name);
    const Batch& x = c.x;
    const std::int64_t B = x.logits.size(0);
    const Tensor dloss = random_tensor({B}, 84, 0.5f, 1.5f);
    TransducerLossSaved none_saved, mean_saved;
    const Tensor none = losses(x, &none_saved);
    const Tensor mean = transducer_loss_forward(x.logits, x.labels, x.frames, x.label_counts,
                                                spec_of(x, TransducerReduction::mean), &mean_saved);
    const Tensor gn = transducer_loss_backward(dloss, none_saved);
    const Tensor gm = transducer_loss_backward(mean_saved, 1.0f);
    const Tensor ta_none = p.floats("loss_none", {B}), ta_mean = p.floats("loss_mean", {1});
    EXPECT_TRUE(tensors_close(none, ta_none, 0.0, 1e-5));
    EXPECT_TRUE(tensors_close(mean, ta_mean, 0.0, 1e-5));
    // The f64 reference (cpu.ref: every lattice value and exp in f64) is the truth both are
    // measured against: torchaudio keeps f32 lattices, whose rounding shows at V = 1024 (Note
    // [Transducer lattice precision] in nn/transducer.hpp).
    auto reference_grad = [&](const Tensor& upstream, double scale) {
      OpCall f = forward_call(x);
      impl_named("transducer_loss_forward", "cpu.ref").run(f);
      OpCall g;
      g.inputs = {x.logits, x.labels, x.frames, x.label_counts, f.outputs[1], f.outputs[2], upstream};
      g.outputs = {Tensor::empty(x.logits.shape())};
      g.attrs = f.attrs;
      g.attrs.set("scale", scale);
      impl_named("transducer_loss_backward", "cpu.ref").run(g);
      return g.outputs[0];
    };
    const Tensor ref_none = reference_grad(dloss, 1.0);
    const Tensor ref_mean = reference_grad(Tensor::from_vector({1.0f}, {1}), 1.0 / static_cast<double>(B));
    const Tensor ta_gn = p.floats("grad_none", x.logits.shape()), ta_gm = p.floats("grad_mean", x.logits.shape());
    const double ours_none = scaled_max_error(gn, ref_none), ours_mean = scaled_max_error(gm, ref_mean);
    const double ta_none_err = scaled_max_error(ta_gn, ref_none), ta_mean_err = scaled_max_error(ta_gm, ref_mean);
    const double vs_none = scaled_max_error(gn, ta_gn), vs_mean = scaled_max_error(gm, ta_gm);
    EXPECT_LE(ours_none, 1e-5);
    EXPECT_LE(ours_mean, 1e-5);
    // Ours and torchaudio's agree to 1e-5 beyond torchaudio's own distance from the f64 truth.
    EXPECT_LE(vs_none, 1e-5 + 1.1 * ta_none_err);
    EXPECT_LE(vs_mean, 1e-5 + 1.1 * ta_mean_err);
    RecordProperty(fmt::format("{}_grad_error_vs_torchaudio", c.name), fmt::format("{:.2e}", vs_none));
    std::printf(
        "[ torchaudio ] %s: loss rel diff %.2e; gradient max|diff|/max|ref|: ours-torchaudio %.2e (mean %.2e), "
        "ours-f64 %.2e (mean %.2e), torchaudio-f64 %.2e (mean %.2e)\n",
        c.name, std::fabs(mean.item({0}) - ta_mean.item({0})) / std::fabs(ta_mean.item({0})), vs_none, vs_mean,
        ours_none, ours_mean, ta_none_err, ta_mean_err);
  }
}

// ---------------------------------------------------------------------------------------------
// CUDA against the CPU
// ---------------------------------------------------------------------------------------------

TEST(TransducerLossCuda, MatchesTheCpu) {
  std::string why;
  if (!device_available(Device::cuda(0), &why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Device gpu = Device::cuda(0);
  const Batch cases[] = {random_batch(6, 4, 7, 6, {6, 5, 0}, {4, 2, 0}, 91),
                         random_batch(40, 10, 1024, 1023, {40, 31, 17, 36}, {7, 10, 0, 9}, 92, 4.0f),
                         random_batch(9, 300, 12, 0, {9, 4}, {300, 120}, 93)};  // U+1 > the block's threads
  for (const Batch& x : cases) {
    for (TransducerReduction red : {TransducerReduction::none, TransducerReduction::mean}) {
      TransducerLossSaved cs, gs;
      const Tensor lc = transducer_loss_forward(x.logits, x.labels, x.frames, x.label_counts, spec_of(x, red), &cs);
      const Tensor lg = transducer_loss_forward(x.logits.to(gpu), x.labels.to(gpu), x.frames.to(gpu),
                                                x.label_counts.to(gpu), spec_of(x, red), &gs);
      EXPECT_TRUE(tensors_close(lg.to(Device::cpu()), lc, 1e-5, 1e-5));
      EXPECT_TRUE(tensors_close(gs.alpha.to(Device::cpu()), cs.alpha, 1e-4, 1e-5));
      const Tensor gc = transducer_loss_backward(cs, 0.8f), gg = transducer_loss_backward(gs, 0.8f);
      EXPECT_LE(scaled_max_error(gg.to(Device::cpu()), gc), 1e-5);
    }
  }
}

}  // namespace
}  // namespace benchhost::nn
