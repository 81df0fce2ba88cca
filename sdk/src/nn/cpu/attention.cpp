// sdpa_forward / sdpa_backward: scaled dot-product attention with padding, causal and
// arbitrary (packed-sequence) masks and attention-probability dropout.
//
// Layout: q [B, H, T, D], k [B, H, S, D], v [B, H, S, Dv], out [B, H, T, Dv], probs [B, H, T, S]
// (all contiguous f32). Masks (AttentionMask in ops.hpp): causal (key j visible from query i iff
// j <= i + S - T), key padding (lengths [B] or keep-flags [B, S]), boolean keep [B, T, S] or
// additive f32 [B, T, S] / [B, H, T, S]. Masked scores get probability exactly 0; a row with no
// visible key gets all-zero probabilities (so padded queries produce 0, never NaN).
//
// cpu.tbb: the two GEMMs per direction are oneDNN batched matmuls over B*H (through
// nn::matmul_into), the masked softmax and the dropout are oneTBB row loops. The dropout keep
// decision for probs element e (flat index in [B, H, T, S]) is dropout's (Note [Dropout
// randomness]), so the fused path equals dropout_forward applied to probs.
// Backward: P' = dropout(P); dV = P'^T dO; dP' = dO V^T; dP = dropout_backward(dP');
// dS = P (dP - rowsum(dP P)); dQ = scale dS K; dK = scale dS^T Q.
// cpu.ref: one (b, h, i) at a time in double.

#include <limits>

#include "benchhost/nn/ops.hpp"
#include "nn/cpu/cpu_common.hpp"
#include "nn/cpu/vec_math.hpp"

namespace benchhost::nn::cpu {
namespace {

struct MaskView {
  std::int64_t B = 0, H = 0, T = 0, S = 0;
  bool causal = false;
  std::vector<std::int64_t> lengths;   // per batch, or empty
  Tensor keep_bs;                      // u8 [B, S] or undefined
  Tensor keep_bts;                     // u8 [B, T, S] or undefined
  Tensor add_mask;                     // f32 [B, (H,) T, S] or undefined
  bool add_per_head = false;

  // Fills vis[j] (1 visible) and add[j] (additive term) for query row (b, h, i).
  void row(std::int64_t b, std::int64_t h, std::int64_t i, std::uint8_t* vis, float* add) const {
    const std::int64_t limit_causal = causal ? std::min(S, i + (S - T) + 1) : S;
    const std::int64_t limit_len = lengths.empty() ? S : std::min(S, lengths[b]);
    const std::int64_t limit = std::min(limit_causal, limit_len);
    for (std::int64_t j = 0; j < S; ++j) vis[j] = j < limit;
    if (keep_bs.defined()) {
      const std::uint8_t* k = keep_bs.data<std::uint8_t>() + b * S;
      for (std::int64_t j = 0; j < S; ++j) vis[j] &= k[j] != 0;
    }
    if (keep_bts.defined()) {
      const std::uint8_t* k = keep_bts.data<std::uint8_t>() + (b * T + i) * S;
      for (std::int64_t j = 0; j < S; ++j) vis[j] &= k[j] != 0;
    }
    if (add_mask.defined()) {
      const float* a = add_mask.data<float>() + ((add_per_head ? b * H + h : b) * T + i) * S;
      for (std::int64_t j = 0; j < S; ++j) {
        add[j] = a[j];
        if (a[j] == -std::numeric_limits<float>::infinity()) vis[j] = 0;
      }
    } else {
      for (std::int64_t j = 0; j < S; ++j) add[j] = 0.0f;
    }
  }
};

Tensor as_u8(const Tensor& t) {
  Tensor c = t.contiguous();
  if (c.dtype() == DType::u8) return c;
  if (c.dtype() == DType::boolean) {
    Tensor u(c.storage(), c.storage_offset(), c.shape(), c.strides(), DType::u8);
    return u;
  }
  return c.to(DType::u8);
}

MaskView mask_of(const OpCall& c) {
  const Tensor& q = c.inputs[0];
  const Tensor& k = c.inputs[1];
  MaskView m;
  m.B = q.size(0);
  m.H = q.size(1);
  m.T = q.size(2);
  m.S = k.size(2);
  m.causal = c.attrs.get_bool("causal");
  if (c.inputs.size() > 3 && c.inputs[3].defined()) {
    const Tensor& kp = c.inputs[3];
    if (kp.dtype() == DType::i32 || kp.dtype() == DType::i64) {
      BH_CHECK_AS(InvalidArgument, kp.numel() == m.B, "attention key_padding lengths must be [B={}], got {}", m.B, shape_str(kp.shape()));
      for (std::int64_t b = 0; b < m.B; ++b) m.lengths.push_back(static_cast<std::int64_t>(kp.contiguous().item({b})));
    } else {
      BH_CHECK_AS(InvalidArgument, kp.shape() == Shape({m.B, m.S}),
                  "attention key_padding keep-flags must be [B={}, S={}], got {}", m.B, m.S, shape_str(kp.shape()));
      m.keep_bs = as_u8(kp);
    }
  }
  if (c.inputs.size() > 4 && c.inputs[4].defined()) {
    const Tensor& mk = c.inputs[4];
    if (mk.dtype() == DType::f32) {
      const bool per_head = mk.shape() == Shape({m.B, m.H, m.T, m.S});
      BH_CHECK_AS(InvalidArgument, per_head || mk.shape() == Shape({m.B, m.T, m.S}),
                  "additive attention mask must be [B, T, S] or [B, H, T, S] = [{}, {}, {}, {}], got {}",
                  m.B, m.H, m.T, m.S, shape_str(mk.shape()));
      m.add_mask = mk.contiguous();
      m.add_per_head = per_head;
    } else {
      BH_CHECK_AS(InvalidArgument, mk.shape() == Shape({m.B, m.T, m.S}),
                  "boolean attention mask must be [B, T, S] = [{}, {}, {}], got {}", m.B, m.T, m.S, shape_str(mk.shape()));
      m.keep_bts = as_u8(mk);
    }
  }
  return m;
}

struct DropSpec {
  double p = 0;
  std::uint64_t key = 0, stream = 0;
  std::uint32_t thr = 0;
};
DropSpec drop_of(const OpCall& c) {
  DropSpec d;
  d.p = c.attrs.get("p", 0.0);
  if (d.p > 0) {
    d.key = mix64(attr_u64(c.attrs, "rng", 0));
    d.stream = mix64(attr_u64(c.attrs, "rng", 1)) ^ attr_u64(c.attrs, "rng", 2);
    d.thr = static_cast<std::uint32_t>(std::ceil(d.p * 16777216.0));
  }
  return d;
}

// Masked softmax of one score row in place; returns nothing, writes probs.
BH_CPU_KERNEL void masked_softmax_row(float* s, const std::uint8_t* vis, const float* add,
                                      std::int64_t S) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < S; ++j) {
    const float v = s[j] + add[j];
    s[j] = v;
    if (vis[j] && v > m) m = v;
  }
  if (m == -std::numeric_limits<float>::infinity()) {
    for (std::int64_t j = 0; j < S; ++j) s[j] = 0.0f;
    return;
  }
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < S; ++j) {
    const float e = vis[j] ? vexp(s[j] - m) : 0.0f;
    s[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (std::int64_t j = 0; j < S; ++j) s[j] = flush_tiny(s[j] * inv);  // Note [No denormal outputs]
}

BH_CPU_KERNEL void softmax_bwd_row(const float* p, float* dp, std::int64_t S) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t j = 0; j < S; ++j) s += dp[j] * p[j];
  for (std::int64_t j = 0; j < S; ++j) dp[j] = p[j] * (dp[j] - s);
}

// Apply dropout to rows [r0, r1) of P (flat row index over B*H*T): dst = keep ? P / (1-p) : 0,
// element e's decision being lane e % 4 of Philox block e / 4 (blocks generated 64 at a time).
BH_CPU_KERNEL void drop_rows(std::uint64_t key, std::uint64_t stream, std::uint32_t thr, float scale,
                             const float* P, float* dst, std::uint8_t* mask, std::int64_t r0,
                             std::int64_t r1, std::int64_t S) {
  const std::int64_t e0 = r0 * S, e1 = r1 * S;
  std::uint32_t bits[4][64];
  for (std::int64_t g = e0 >> 2; g * 4 < e1; g += 64) {
    const int nb = static_cast<int>(std::min<std::int64_t>(64, (e1 + 3) / 4 - g));
    philox4x32_blocks(key, stream, static_cast<std::uint64_t>(g), nb, bits);
    for (int i = 0; i < nb; ++i)
      for (int l = 0; l < 4; ++l) {
        const std::int64_t e = (g + i) * 4 + l;
        if (e < e0 || e >= e1) continue;
        const bool keep = (bits[l][i] >> 8) >= thr;
        if (mask) mask[e] = keep;
        dst[e] = keep ? P[e] * scale : 0.0f;
      }
  }
}

std::string accepts(const OpCall& c) {
  std::vector<Tensor> ts(c.inputs.begin(), c.inputs.begin() + 3);
  std::string why = require_f32_contiguous(ts);
  if (!why.empty()) return why;
  return require_f32_contiguous({c.outputs[0], c.outputs[1]});
}

void check_shapes(const OpCall& c) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  BH_CHECK_AS(InvalidArgument,
              q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.size(0) == q.size(0) &&
                  v.size(0) == q.size(0) && k.size(1) == q.size(1) && v.size(1) == q.size(1) &&
                  k.size(3) == q.size(3) && v.size(2) == k.size(2),
              "attention shapes must be q [B,H,T,D], k [B,H,S,D], v [B,H,S,Dv]; got q {}, k {}, v {}",
              shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
}

float scale_of(const OpCall& c) {
  const double s = c.attrs.get("scale", 0.0);
  return s > 0 ? static_cast<float>(s) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.inputs[0].size(3))));
}

void fwd_tbb(OpCall& c) {
  check_shapes(c);
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  Tensor& out = c.outputs[0];
  Tensor& probs = c.outputs[1];
  const MaskView mv = mask_of(c);
  const DropSpec d = drop_of(c);
  const float scale = scale_of(c);
  const std::int64_t S = mv.S, T = mv.T, H = mv.H;
  matmul_into(probs, q, k, false, true, scale, false);
  float* P = probs.data<float>();
  parallel_range(mv.B * H * T, row_grain(S, 8192), [&](std::int64_t r0, std::int64_t r1) {
    std::vector<std::uint8_t> vis(S);
    std::vector<float> add(S);
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t i = r % T, h = (r / T) % H, b = r / (T * H);
      mv.row(b, h, i, vis.data(), add.data());
      masked_softmax_row(P + r * S, vis.data(), add.data(), S);
    }
  });
  if (d.p > 0) {
    Tensor dropped = Tensor::empty(probs.shape());
    std::uint8_t* mask = c.outputs.size() > 2 && c.outputs[2].defined() ? c.outputs[2].data<std::uint8_t>() : nullptr;
    parallel_range(mv.B * H * T, row_grain(S, 8192), [&](std::int64_t r0, std::int64_t r1) {
      drop_rows(d.key, d.stream, d.thr, static_cast<float>(1.0 / (1.0 - d.p)), P, dropped.data<float>(), mask, r0, r1, S);
    });
    matmul_into(out, dropped, v, false, false, 1.0f, false);
  } else {
    matmul_into(out, probs, v, false, false, 1.0f, false);
  }
}

// inputs {dout, q, k, v, probs, dropmask?}; outputs {dq, dk, dv}; attrs scale, p.
void bwd_tbb(OpCall& c) {
  const Tensor &dout = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3], &probs = c.inputs[4];
  const double p = c.attrs.get("p", 0.0);
  const double sc = c.attrs.get("scale", 0.0);
  const float scale = sc > 0 ? static_cast<float>(sc) : static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  const std::int64_t S = probs.size(3), R = probs.numel() / S;
  const float dscale = static_cast<float>(1.0 / (1.0 - p));
  const bool has_drop = p > 0;
  const std::uint8_t* mask = has_drop ? c.inputs.at(5).data<std::uint8_t>() : nullptr;
  Tensor pd = probs;
  if (has_drop) {
    pd = Tensor::empty(probs.shape());
    const float* P = probs.data<float>();
    float* Q = pd.data<float>();
    parallel_range(probs.numel(), 16384, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) Q[i] = mask[i] ? P[i] * dscale : 0.0f;
    });
  }
  matmul_into(c.outputs[2], pd, dout, true, false, 1.0f, false);   // dv = P'^T dO
  Tensor dp = matmul(dout, v, false, true);                       // dP' = dO V^T
  float* dpp = dp.data<float>();
  const float* P = probs.data<float>();
  parallel_range(R, row_grain(S, 8192), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* row = dpp + r * S;
      if (has_drop)
        for (std::int64_t j = 0; j < S; ++j) row[j] = mask[r * S + j] ? row[j] * dscale : 0.0f;
      softmax_bwd_row(P + r * S, row, S);
    }
  });
  matmul_into(c.outputs[0], dp, k, false, false, scale, false);  // dq = scale dS K
  matmul_into(c.outputs[1], dp, q, true, false, scale, false);   // dk = scale dS^T Q
}

// ---- reference ----

void fwd_ref(OpCall& c) {
  check_shapes(c);
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const MaskView mv = mask_of(c);
  const double p = c.attrs.get("p", 0.0);
  const float scale = scale_of(c);
  const std::int64_t B = mv.B, H = mv.H, T = mv.T, S = mv.S, D = q.size(3), Dv = v.size(3);
  Rng rng(p > 0 ? attr_u64(c.attrs, "rng", 0) : 0,
          p > 0 ? mix64(attr_u64(c.attrs, "rng", 1)) ^ attr_u64(c.attrs, "rng", 2) : 0);
  std::vector<std::uint8_t> vis(S);
  std::vector<float> add(S);
  std::vector<double> sc(S);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        mv.row(b, h, i, vis.data(), add.data());
        const float* qi = q.data<float>() + ((b * H + h) * T + i) * D;
        double m = -INFINITY;
        for (std::int64_t j = 0; j < S; ++j) {
          const float* kj = k.data<float>() + ((b * H + h) * S + j) * D;
          double s = 0;
          for (std::int64_t e = 0; e < D; ++e) s += static_cast<double>(qi[e]) * kj[e];
          sc[j] = s * scale + add[j];
          if (vis[j]) m = std::max(m, sc[j]);
        }
        double z = 0;
        for (std::int64_t j = 0; j < S; ++j) {
          sc[j] = (vis[j] && m > -INFINITY) ? std::exp(sc[j] - m) : 0.0;
          z += sc[j];
        }
        const std::int64_t row = (b * H + h) * T + i;
        for (std::int64_t j = 0; j < S; ++j) {
          const double pr = z > 0 ? sc[j] / z : 0.0;
          c.outputs[1].data<float>()[row * S + j] = static_cast<float>(pr);
          double kept = pr;
          if (p > 0) {
            const bool keep = rng.uniform_at(static_cast<std::uint64_t>(row * S + j)) >= p;
            if (c.outputs.size() > 2 && c.outputs[2].defined()) c.outputs[2].data<std::uint8_t>()[row * S + j] = keep;
            kept = keep ? pr / (1.0 - p) : 0.0;
          }
          sc[j] = kept;
        }
        for (std::int64_t e = 0; e < Dv; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j < S; ++j) o += sc[j] * v.data<float>()[((b * H + h) * S + j) * Dv + e];
          c.outputs[0].data<float>()[row * Dv + e] = static_cast<float>(o);
        }
      }
}

void bwd_ref(OpCall& c) {
  const Tensor &dout = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3], &probs = c.inputs[4];
  const double p = c.attrs.get("p", 0.0);
  const double sc0 = c.attrs.get("scale", 0.0);
  const double scale = sc0 > 0 ? sc0 : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const std::int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), S = k.size(2), Dv = v.size(3);
  for (Tensor& t : c.outputs) t.zero_();
  std::vector<double> dp(S), pk(S);
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t i = 0; i < T; ++i) {
      const std::int64_t row = bh * T + i;
      const float* P = probs.data<float>() + row * S;
      for (std::int64_t j = 0; j < S; ++j) {
        const bool keep = p > 0 ? c.inputs[5].data<std::uint8_t>()[row * S + j] != 0 : true;
        const double f = p > 0 ? (keep ? 1.0 / (1.0 - p) : 0.0) : 1.0;
        pk[j] = P[j] * f;
        double g = 0;
        for (std::int64_t e = 0; e < Dv; ++e)
          g += static_cast<double>(dout.data<float>()[row * Dv + e]) * v.data<float>()[(bh * S + j) * Dv + e];
        dp[j] = g * f;
        for (std::int64_t e = 0; e < Dv; ++e)
          c.outputs[2].data<float>()[(bh * S + j) * Dv + e] += static_cast<float>(pk[j] * dout.data<float>()[row * Dv + e]);
      }
      double s = 0;
      for (std::int64_t j = 0; j < S; ++j) s += dp[j] * P[j];
      for (std::int64_t j = 0; j < S; ++j) {
        const double ds = P[j] * (dp[j] - s) * scale;
        for (std::int64_t e = 0; e < D; ++e) {
          c.outputs[0].data<float>()[row * D + e] += static_cast<float>(ds * k.data<float>()[(bh * S + j) * D + e]);
          c.outputs[1].data<float>()[(bh * S + j) * D + e] += static_cast<float>(ds * q.data<float>()[row * D + e]);
        }
      }
    }
}

// ---- cases ----

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  const std::int64_t B = 2, H = 3, T = 5, S = 5, D = 8;
  auto base = [&](std::uint64_t s) {
    OpCall c;
    c.inputs = {case_tensor({B, H, T, D}, s), case_tensor({B, H, S, D}, s + 1), case_tensor({B, H, S, D}, s + 2), Tensor{}, Tensor{}};
    c.outputs = {Tensor::empty({B, H, T, D}), Tensor::empty({B, H, T, S}), Tensor::empty({B, H, T, S}, DType::u8)};
    return c;
  };
  std::vector<OpCall> out;
  out.push_back(base(seed));                                   // unmasked
  OpCall causal = base(seed + 10);
  causal.attrs.set("causal", 1);
  out.push_back(causal);
  OpCall pad = base(seed + 20);
  pad.inputs[3] = Tensor::from_vector_i64({3, 5}, {2});
  pad.attrs.set("scale", 0.25);
  out.push_back(pad);
  OpCall packed = base(seed + 30);                             // block diagonal [0,2) [2,5)
  Tensor keep = Tensor::zeros({B, T, S}, DType::u8);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < S; ++j) keep.data<std::uint8_t>()[(b * T + i) * S + j] = (i < 2) == (j < 2);
  packed.inputs[4] = keep;
  packed.attrs.set("causal", 1);
  out.push_back(packed);
  OpCall additive = base(seed + 40);
  additive.inputs[4] = case_tensor({B, H, T, S}, seed + 41, -2.0f, 0.0f);
  out.push_back(additive);
  OpCall drop = base(seed + 50);
  drop.attrs.set("p", 0.2).set_ints("rng", {static_cast<std::int64_t>(seed), 3, 11});
  drop.inputs[3] = Tensor::from_vector_i32({4, 0}, {2});   // second batch fully padded
  out.push_back(drop);
  // Cases appended after index 5 (bwd_cases picks cases 1 and 5): u8 keep-flags [B, S] with
  // T != S and a causal offset; additive [B, T, S] with -inf entries and one row fully masked.
  OpCall flags;
  flags.inputs = {case_tensor({B, H, 3, D}, seed + 60), case_tensor({B, H, S, D}, seed + 61),
                  case_tensor({B, H, S, D}, seed + 62), Tensor::zeros({B, S}, DType::u8), Tensor{}};
  flags.outputs = {Tensor::empty({B, H, 3, D}), Tensor::empty({B, H, 3, S}), Tensor::empty({B, H, 3, S}, DType::u8)};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < S; ++j) flags.inputs[3].data<std::uint8_t>()[b * S + j] = (j + b) % 3 != 1;
  flags.attrs.set("causal", 1);
  out.push_back(flags);
  OpCall additive3 = base(seed + 70);
  Tensor add3 = case_tensor({B, T, S}, seed + 71, -3.0f, 1.0f);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < S; ++j)
        if ((i + 2 * j + b) % 4 == 0 || (b == 1 && i == 2))
          add3.data<float>()[(b * T + i) * S + j] = -std::numeric_limits<float>::infinity();
  additive3.inputs[4] = add3;
  additive3.attrs.set("p", 0.3).set_ints("rng", {static_cast<std::int64_t>(seed), 9, 2});
  out.push_back(additive3);
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  // (forward case, dropout p): causal; padding with a fully padded batch; additive -inf mask.
  const std::pair<std::size_t, double> picks[] = {{1, 0.0}, {5, 0.25}, {7, 0.3}};
  for (const auto& [which, p] : picks) {
    OpCall f = fwd_cases(seed)[which];
    if (p > 0) f.attrs.set("p", p);
    fwd_ref(f);
    OpCall c;
    c.inputs = {case_tensor(f.outputs[0].shape(), seed + 7), f.inputs[0], f.inputs[1], f.inputs[2], f.outputs[1],
                p > 0 ? f.outputs[2] : Tensor{}};
    c.outputs = {Tensor::empty(f.inputs[0].shape()), Tensor::empty(f.inputs[1].shape()), Tensor::empty(f.inputs[2].shape())};
    c.attrs.set("p", p);
    out.push_back(std::move(c));
  }
  return out;
}

const bool registered =
    register_op(OpDef{"sdpa_forward",
                      "inputs {q, k, v, key_padding or -, mask or -}, outputs {out, probs, dropmask u8 or -}; "
                      "attrs causal, scale (<=0: 1/sqrt(D)), p, rng=[seed, step, stream]",
                      fwd_cases, 2e-5, 1e-4,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"sdpa_backward",
                      "inputs {dout, q, k, v, probs, dropmask or -}, outputs {dq, dk, dv}; attrs scale, p",
                      bwd_cases, 2e-5, 1e-4,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accepts, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
