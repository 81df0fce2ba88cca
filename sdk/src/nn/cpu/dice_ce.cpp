// dice_ce_loss_forward / dice_ce_loss_backward (the MLPerf 3D U-Net loss) and argmax_channels:
// the op declarations, the oneTBB CPU kernels and the plain-loop references. The public
// functions of nn/segmentation.hpp are in nn/segmentation.cpp.
//
// Ops (attr layout = 0 NCDHW / 1 NDHWC; labels [N, D, H, W] u8 or i32):
//   dice_ce_loss_forward  {logits, labels} -> {probs (f32, logits' shape), dice_terms [N, C, 3],
//                          out [3] = loss, dice_loss, ce}; attr smooth
//   dice_ce_loss_backward {probs, labels, dice_terms} -> {dlogits}; attrs smooth, dloss
//   argmax_channels       {logits} -> {labels u8 [N, D, H, W]} (first maximum wins)
// Per (n, c): I = sum_s p t, T = sum_s t, P = sum_s p (dice_terms, class 0 included);
// Dice = (2 I + smooth) / (T + P + smooth); dice_loss = mean over n and c >= 1 of 1 - Dice;
// ce = mean over the M = N*S voxels of -log p[label]; loss = (dice_loss + ce) / 2.
//
// Backward. With K = N (C - 1), den = T + P + smooth, num = 2 I + smooth, the loss's gradient
// w.r.t. the probability p_c of a voxel of sample n is, for c >= 1,
//   g_c = num / (2 K den^2) - [label == c] / (K den),   and g_0 = 0,
// and through the softmax, dz_c = p_c (g_c - sum_k p_k g_k) for the dice half; the CE half adds
// (p_c - [label == c]) / (2 M). Everything is scaled by dloss.
//
// Fast kernels: every sample's voxels are cut into fixed chunks of kChunk (independent of the
// thread count); a chunk's softmax runs over the channels with the voxels as the vector lanes
// (channel stride S in NCDHW, 1 in NDHWC), its per-class sums are f32 and the chunks are added in
// f64 in chunk order (Note [Instance norm chunks] in instance_norm.cpp): deterministic.
// Labels are checked before any arithmetic; one outside [0, C) throws DataError naming the value
// and its voxel.

#include <vector>

#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

constexpr std::int64_t kChunk = 2048;

struct SegGeo {
  std::int64_t n = 0, c = 0, s = 0;
  bool cl = false;
  // Element (ni, ci, si) = base(ni) + si * vs + ci * cs.
  std::int64_t vs() const { return cl ? c : 1; }
  std::int64_t cs() const { return cl ? 1 : s; }
  std::int64_t at(std::int64_t ni, std::int64_t ci, std::int64_t si) const {
    return ni * c * s + si * vs() + ci * cs();
  }
  std::int64_t chunks() const { return (s + kChunk - 1) / kChunk; }
};

SegGeo geo_of(const Tensor& logits, const Attrs& a) {
  BH_CHECK_AS(InvalidArgument, logits.dim() == 5, "segmentation op: expected 5-d logits, got {}",
              shape_str(logits.shape()));
  SegGeo g;
  g.cl = a.get_int("layout", 0) == 1;
  g.n = logits.size(0);
  g.c = g.cl ? logits.size(4) : logits.size(1);
  g.s = logits.numel() / std::max<std::int64_t>(1, g.n * g.c);
  return g;
}

std::int64_t label_at(const Tensor& t, std::int64_t i) {
  return t.dtype() == DType::u8 ? static_cast<std::int64_t>(t.data<std::uint8_t>()[i])
                                : static_cast<std::int64_t>(t.data<std::int32_t>()[i]);
}

void check_labels(const Tensor& labels, const SegGeo& g, const char* op) {
  BH_CHECK_AS(InvalidArgument,
              (labels.dtype() == DType::u8 || labels.dtype() == DType::i32) && labels.is_contiguous() &&
                  labels.numel() == g.n * g.s,
              "{}: labels must be contiguous u8/i32 with {} voxels, got {}", op, g.n * g.s, labels.describe());
  for (std::int64_t i = 0; i < labels.numel(); ++i) {
    const std::int64_t v = label_at(labels, i);
    if (v < 0 || v >= g.c) [[unlikely]]
      BH_THROW(DataError, "{}: label {} at voxel {} (sample {}, position {}) is outside [0, {})", op, v, i, i / g.s,
               i % g.s, g.c);
  }
}

// Labels of voxels [s0, s1) of sample n as i32.
void chunk_labels(const Tensor& labels, const SegGeo& g, std::int64_t n, std::int64_t s0, std::int64_t s1,
                  std::int32_t* out) {
  const std::int64_t base = n * g.s;
  if (labels.dtype() == DType::u8) {
    const std::uint8_t* l = labels.data<std::uint8_t>() + base;
    for (std::int64_t s = s0; s < s1; ++s) out[s - s0] = l[s];
  } else {
    const std::int32_t* l = labels.data<std::int32_t>() + base;
    for (std::int64_t s = s0; s < s1; ++s) out[s - s0] = l[s];
  }
}

template <class F>
void for_chunks(const SegGeo& g, F&& f) {
  const std::int64_t chunks = g.chunks();
  parallel_range(g.n * chunks, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t n = t / chunks, k = t % chunks;
      f(n, k, k * kChunk, std::min(g.s, (k + 1) * kChunk));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Fast kernels (z, p at the chunk's first voxel of its sample; L = s1 - s0 voxels)
// ---------------------------------------------------------------------------------------------

// Softmax of the chunk into p; part = [I_c, T_c, P_c for each c..., ce sum] (3C + 1 values).
BH_CPU_KERNEL void dice_fwd_chunk(const float* z, const std::int32_t* lab, std::int64_t L, std::int64_t C,
                                  std::int64_t vs, std::int64_t cs, float* p, float* mx, float* sum,
                                  double* part) {
  for (std::int64_t v = 0; v < L; ++v) mx[v] = z[v * vs];
  for (std::int64_t c = 1; c < C; ++c) {
    const float* zc = z + c * cs;
#pragma omp simd
    for (std::int64_t v = 0; v < L; ++v) mx[v] = zc[v * vs] > mx[v] ? zc[v * vs] : mx[v];
  }
  for (std::int64_t v = 0; v < L; ++v) sum[v] = 0.0f;
  for (std::int64_t c = 0; c < C; ++c) {
    const float* zc = z + c * cs;
    float* pc = p + c * cs;
#pragma omp simd
    for (std::int64_t v = 0; v < L; ++v) {
      const float e = vexp(zc[v * vs] - mx[v]);
      pc[v * vs] = e;
      sum[v] += e;
    }
  }
  float ce = 0.0f;
  for (std::int64_t v = 0; v < L; ++v) {
    const std::int64_t t = lab[v];
    ce += std::log(sum[v]) + mx[v] - z[v * vs + t * cs];
    sum[v] = 1.0f / sum[v];
  }
  for (std::int64_t c = 0; c < C; ++c) {
    float* pc = p + c * cs;
    float I = 0.0f, T = 0.0f, P = 0.0f;
    const auto cc = static_cast<std::int32_t>(c);
#pragma omp simd reduction(+ : I, T, P)
    for (std::int64_t v = 0; v < L; ++v) {
      const float q = pc[v * vs] * sum[v];
      pc[v * vs] = q;
      const float t = lab[v] == cc ? 1.0f : 0.0f;
      I += q * t;
      T += t;
      P += q;
    }
    part[3 * c] = I;
    part[3 * c + 1] = T;
    part[3 * c + 2] = P;
  }
  part[3 * C] = ce;
}

// dz for the chunk; a, b: [C] per-class constants of the sample (a_0 = b_0 = 0), cef = 1 / (2M).
BH_CPU_KERNEL void dice_bwd_chunk(const float* p, const std::int32_t* lab, std::int64_t L, std::int64_t C,
                                  std::int64_t vs, std::int64_t cs, const float* a, const float* b, float cef,
                                  float dloss, float* dot, float* dz) {
  for (std::int64_t v = 0; v < L; ++v) dot[v] = 0.0f;
  for (std::int64_t c = 1; c < C; ++c) {
    const float* pc = p + c * cs;
    const float ac = a[c], bc = b[c];
    const auto cc = static_cast<std::int32_t>(c);
#pragma omp simd
    for (std::int64_t v = 0; v < L; ++v) dot[v] += pc[v * vs] * (ac - (lab[v] == cc ? bc : 0.0f));
  }
  for (std::int64_t c = 0; c < C; ++c) {
    const float* pc = p + c * cs;
    float* dc = dz + c * cs;
    const float ac = a[c], bc = b[c];
    const auto cc = static_cast<std::int32_t>(c);
#pragma omp simd
    for (std::int64_t v = 0; v < L; ++v) {
      const bool hit = lab[v] == cc;
      const float q = pc[v * vs];
      const float g = ac - (hit ? bc : 0.0f);
      dc[v * vs] = dloss * (cef * (q - (hit ? 1.0f : 0.0f)) + q * (g - dot[v]));
    }
  }
}

BH_CPU_KERNEL void argmax_chunk(const float* z, std::int64_t L, std::int64_t C, std::int64_t vs, std::int64_t cs,
                                float* best, std::uint8_t* out) {
  for (std::int64_t v = 0; v < L; ++v) {
    best[v] = z[v * vs];
    out[v] = 0;
  }
  for (std::int64_t c = 1; c < C; ++c) {
    const float* zc = z + c * cs;
    const auto cc = static_cast<std::uint8_t>(c);
#pragma omp simd
    for (std::int64_t v = 0; v < L; ++v) {
      const bool more = zc[v * vs] > best[v];
      best[v] = more ? zc[v * vs] : best[v];
      out[v] = more ? cc : out[v];
    }
  }
}

// The loss from the per-(n, c) sums (f64) and the CE sum; writes dice_terms and out.
void finish_forward(const SegGeo& g, const std::vector<double>& terms, double ce_sum, double smooth, OpCall& call) {
  float* dt = call.outputs[1].data<float>();
  double dice = 0.0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c) {
      const double* t = terms.data() + 3 * (n * g.c + c);
      for (int k = 0; k < 3; ++k) dt[3 * (n * g.c + c) + k] = static_cast<float>(t[k]);
      if (c > 0) dice += 1.0 - (2.0 * t[0] + smooth) / (t[1] + t[2] + smooth);
    }
  const double dice_loss = dice / static_cast<double>(g.n * (g.c - 1));
  const double ce = ce_sum / static_cast<double>(g.n * g.s);
  float* out = call.outputs[2].data<float>();
  out[0] = static_cast<float>((dice_loss + ce) / 2.0);
  out[1] = static_cast<float>(dice_loss);
  out[2] = static_cast<float>(ce);
}

// Per (n, c) constants of the backward: a = num / (2 K den^2), b = 1 / (K den), zero for c = 0.
void backward_constants(const SegGeo& g, const float* dt, double smooth, std::vector<float>& a,
                        std::vector<float>& b) {
  const double K = static_cast<double>(g.n * (g.c - 1));
  a.assign(static_cast<std::size_t>(g.n * g.c), 0.0f);
  b.assign(a.size(), 0.0f);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 1; c < g.c; ++c) {
      const float* t = dt + 3 * (n * g.c + c);
      const double num = 2.0 * t[0] + smooth, den = static_cast<double>(t[1]) + t[2] + smooth;
      a[static_cast<std::size_t>(n * g.c + c)] = static_cast<float>(num / (2.0 * K * den * den));
      b[static_cast<std::size_t>(n * g.c + c)] = static_cast<float>(1.0 / (K * den));
    }
}

void check_classes(const SegGeo& g, const char* op) {
  BH_CHECK_AS(InvalidArgument, g.c >= 2 && g.n * g.s > 0,
              "{}: needs at least 2 classes (background and one more) and one voxel, got {} classes, {} voxels", op,
              g.c, g.n * g.s);
}

void fwd_tbb(OpCall& call) {
  const SegGeo g = geo_of(call.inputs[0], call.attrs);
  check_classes(g, "dice_ce_loss_forward");
  check_labels(call.inputs[1], g, "dice_ce_loss_forward");
  const float* z = call.inputs[0].data<float>();
  float* p = call.outputs[0].data<float>();
  const std::int64_t width = 3 * g.c + 1, chunks = g.chunks();
  std::vector<double> part(static_cast<std::size_t>(g.n * chunks * width));
  for_chunks(g, [&](std::int64_t n, std::int64_t k, std::int64_t s0, std::int64_t s1) {
    std::int32_t lab[kChunk];
    float mx[kChunk], sum[kChunk];
    chunk_labels(call.inputs[1], g, n, s0, s1, lab);
    const std::int64_t off = g.at(n, 0, s0);
    dice_fwd_chunk(z + off, lab, s1 - s0, g.c, g.vs(), g.cs(), p + off, mx, sum,
                   part.data() + (n * chunks + k) * width);
  });
  std::vector<double> terms(static_cast<std::size_t>(3 * g.n * g.c), 0.0);
  double ce = 0.0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t k = 0; k < chunks; ++k) {
      const double* pk = part.data() + (n * chunks + k) * width;
      for (std::int64_t j = 0; j < 3 * g.c; ++j) terms[static_cast<std::size_t>(3 * n * g.c + j)] += pk[j];
      ce += pk[3 * g.c];
    }
  finish_forward(g, terms, ce, call.attrs.get("smooth", 1e-6), call);
}

void bwd_tbb(OpCall& call) {
  const SegGeo g = geo_of(call.inputs[0], call.attrs);
  check_classes(g, "dice_ce_loss_backward");
  check_labels(call.inputs[1], g, "dice_ce_loss_backward");
  std::vector<float> a, b;
  backward_constants(g, call.inputs[2].data<float>(), call.attrs.get("smooth", 1e-6), a, b);
  const float cef = static_cast<float>(0.5 / static_cast<double>(g.n * g.s));
  const float dloss = static_cast<float>(call.attrs.get("dloss", 1.0));
  const float* p = call.inputs[0].data<float>();
  float* dz = call.outputs[0].data<float>();
  for_chunks(g, [&](std::int64_t n, std::int64_t, std::int64_t s0, std::int64_t s1) {
    std::int32_t lab[kChunk];
    float dot[kChunk];
    chunk_labels(call.inputs[1], g, n, s0, s1, lab);
    const std::int64_t off = g.at(n, 0, s0);
    dice_bwd_chunk(p + off, lab, s1 - s0, g.c, g.vs(), g.cs(), a.data() + n * g.c, b.data() + n * g.c, cef, dloss,
                   dot, dz + off);
  });
}

void argmax_tbb(OpCall& call) {
  const SegGeo g = geo_of(call.inputs[0], call.attrs);
  const float* z = call.inputs[0].data<float>();
  std::uint8_t* out = call.outputs[0].data<std::uint8_t>();
  for_chunks(g, [&](std::int64_t n, std::int64_t, std::int64_t s0, std::int64_t s1) {
    float best[kChunk];
    argmax_chunk(z + g.at(n, 0, s0), s1 - s0, g.c, g.vs(), g.cs(), best, out + n * g.s + s0);
  });
}

// ---------------------------------------------------------------------------------------------
// References: plain loops in f64
// ---------------------------------------------------------------------------------------------

void fwd_ref(OpCall& call) {
  const SegGeo g = geo_of(call.inputs[0], call.attrs);
  check_classes(g, "dice_ce_loss_forward");
  check_labels(call.inputs[1], g, "dice_ce_loss_forward");
  const float* z = call.inputs[0].data<float>();
  float* p = call.outputs[0].data<float>();
  std::vector<double> terms(static_cast<std::size_t>(3 * g.n * g.c), 0.0);
  double ce = 0.0;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.s; ++s) {
      const std::int64_t t = label_at(call.inputs[1], n * g.s + s);
      double m = z[g.at(n, 0, s)], sum = 0.0;
      for (std::int64_t c = 1; c < g.c; ++c) m = std::max(m, static_cast<double>(z[g.at(n, c, s)]));
      for (std::int64_t c = 0; c < g.c; ++c) sum += std::exp(z[g.at(n, c, s)] - m);
      ce -= z[g.at(n, t, s)] - m - std::log(sum);
      for (std::int64_t c = 0; c < g.c; ++c) {
        const double q = std::exp(z[g.at(n, c, s)] - m) / sum;
        p[g.at(n, c, s)] = static_cast<float>(q);
        double* tc = terms.data() + 3 * (n * g.c + c);
        tc[0] += c == t ? q : 0.0;
        tc[1] += c == t ? 1.0 : 0.0;
        tc[2] += q;
      }
    }
  finish_forward(g, terms, ce, call.attrs.get("smooth", 1e-6), call);
}

void bwd_ref(OpCall& call) {
  const SegGeo g = geo_of(call.inputs[0], call.attrs);
  check_classes(g, "dice_ce_loss_backward");
  check_labels(call.inputs[1], g, "dice_ce_loss_backward");
  const double smooth = call.attrs.get("smooth", 1e-6), dloss = call.attrs.get("dloss", 1.0);
  const double K = static_cast<double>(g.n * (g.c - 1)), M = static_cast<double>(g.n * g.s);
  const float* p = call.inputs[0].data<float>();
  const float* dt = call.inputs[2].data<float>();
  float* dz = call.outputs[0].data<float>();
  std::vector<double> grad(static_cast<std::size_t>(g.c));
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.s; ++s) {
      const std::int64_t t = label_at(call.inputs[1], n * g.s + s);
      // d loss / d p_c: the dice half (c >= 1: -(1/K) dDice/dp / 2) only.
      double dot = 0.0;
      for (std::int64_t c = 0; c < g.c; ++c) {
        const float* tc = dt + 3 * (n * g.c + c);
        const double num = 2.0 * tc[0] + smooth, den = static_cast<double>(tc[1]) + tc[2] + smooth;
        const double one_hot = c == t ? 1.0 : 0.0;
        grad[static_cast<std::size_t>(c)] = c == 0 ? 0.0 : -(2.0 * one_hot * den - num) / (den * den) / (2.0 * K);
        dot += p[g.at(n, c, s)] * grad[static_cast<std::size_t>(c)];
      }
      for (std::int64_t c = 0; c < g.c; ++c) {
        const double q = p[g.at(n, c, s)], one_hot = c == t ? 1.0 : 0.0;
        dz[g.at(n, c, s)] =
            static_cast<float>(dloss * ((q - one_hot) / (2.0 * M) + q * (grad[static_cast<std::size_t>(c)] - dot)));
      }
    }
}

void argmax_ref(OpCall& call) {
  const SegGeo g = geo_of(call.inputs[0], call.attrs);
  const float* z = call.inputs[0].data<float>();
  std::uint8_t* out = call.outputs[0].data<std::uint8_t>();
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t s = 0; s < g.s; ++s) {
      std::int64_t best = 0;
      for (std::int64_t c = 1; c < g.c; ++c)
        if (z[g.at(n, c, s)] > z[g.at(n, best, s)]) best = c;
      out[n * g.s + s] = static_cast<std::uint8_t>(best);
    }
}

std::string accepts(const OpCall& c) {
  std::string why = require_f32_contiguous({c.inputs[0]});
  if (why.empty() && c.inputs.size() > 2) why = require_f32_contiguous({c.inputs[2]});
  if (why.empty()) why = require_floating_f32(c);
  if (why.empty())
    for (const Tensor& t : c.outputs)
      if (!t.device().is_cpu() || !t.is_contiguous()) why = "outputs must be contiguous cpu tensors";
  return why;
}

// ---------------------------------------------------------------------------------------------
// Example cases: both layouts, u8 and i32 labels, C = 3 (and 4), one sample over two chunks
// ---------------------------------------------------------------------------------------------

struct SegCase {
  bool cl, u8;
  std::int64_t n, c, d, h, w;
};
const SegCase kCases[] = {{false, true, 2, 3, 2, 3, 4},
                          {true, false, 2, 3, 2, 3, 4},
                          {false, false, 1, 4, 3, 3, 5},
                          {true, true, 1, 3, 3, 5, 4},
                          {false, true, 2, 3, 5, 20, 30},   // 3000 voxels: two chunks
                          {true, false, 1, 3, 5, 20, 30}};

Tensor case_labels(const SegCase& k, std::uint64_t seed) {
  Rng r(seed, 5);
  const std::int64_t count = k.n * k.d * k.h * k.w;
  Tensor t = Tensor::empty({k.n, k.d, k.h, k.w}, k.u8 ? DType::u8 : DType::i32);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto v = static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(k.c)));
    if (k.u8) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v);
    else t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
  }
  return t;
}

Shape case_shape(const SegCase& k) { return k.cl ? Shape{k.n, k.d, k.h, k.w, k.c} : Shape{k.n, k.c, k.d, k.h, k.w}; }

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t i = 0;
  for (const SegCase& k : kCases) {
    OpCall c;
    c.inputs = {case_tensor(case_shape(k), seed + 10 * i, -4.0f, 4.0f), case_labels(k, seed + 10 * i + 1)};
    c.outputs = {Tensor::empty(case_shape(k)), Tensor::empty({k.n, k.c, 3}), Tensor::empty({3})};
    c.attrs.set("smooth", 1e-6).set("layout", k.cl ? 1.0 : 0.0);
    out.push_back(std::move(c));
    ++i;
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> fwd = fwd_cases(seed), out;
  double dloss = 1.0;
  for (OpCall& f : fwd) {
    fwd_ref(f);
    OpCall c;
    c.inputs = {f.outputs[0], f.inputs[1], f.outputs[1]};
    c.outputs = {Tensor::empty(f.inputs[0].shape())};
    c.attrs = f.attrs;
    c.attrs.set("dloss", dloss);
    dloss *= 0.5;
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCall> argmax_cases(std::uint64_t seed) {
  std::vector<OpCall> out = fwd_cases(seed);
  for (std::size_t i = 0; i < out.size(); ++i) {
    OpCall& c = out[i];
    // Quantised logits so that ties happen (the first maximum must win everywhere).
    float* z = c.inputs[0].data<float>();
    for (std::int64_t j = 0; j < c.inputs[0].numel(); ++j) z[j] = std::round(z[j] * 0.5f);
    const Shape& xs = c.inputs[0].shape();
    const bool cl = c.attrs.get_int("layout", 0) == 1;
    c.inputs.resize(1);
    c.outputs = {Tensor::empty(cl ? Shape{xs[0], xs[1], xs[2], xs[3]} : Shape{xs[0], xs[2], xs[3], xs[4]}, DType::u8)};
  }
  return out;
}

const bool registered =
    register_op(OpDef{"dice_ce_loss_forward",
                      "inputs {logits [N, C, D, H, W] or [N, D, H, W, C], labels [N, D, H, W] u8/i32}, outputs "
                      "{probs (f32), dice_terms [N, C, 3] (sum p*t, sum t, sum p), [loss, dice_loss, ce]}; attrs "
                      "smooth, layout (0 ncdhw, 1 ndhwc)",
                      fwd_cases, 1e-5, 1e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"dice_ce_loss_backward",
                      "inputs {probs, labels, dice_terms}, outputs {dlogits}; attrs smooth, dloss, layout",
                      bwd_cases, 1e-6, 1e-4,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}}) &&
    register_op(OpDef{"argmax_channels",
                      "inputs {logits (5-d, C <= 256)}, outputs {labels u8 [N, D, H, W]} (first maximum wins); "
                      "attr layout",
                      argmax_cases, 0.0, 0.0,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, argmax_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, argmax_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
