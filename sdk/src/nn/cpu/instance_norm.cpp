// instance_norm3d_forward / instance_norm3d_backward: the op declarations, the oneTBB CPU kernels
// and the plain-loop references. The public functions of nn/segmentation.hpp are in
// nn/segmentation.cpp.
//
// Ops (attrs: eps, fuse_relu, layout = 0 NCDHW / 1 NDHWC):
//   forward  {x, gamma [C], beta [C]} -> {y, mean [N*C], rstd [N*C]}
//   backward {dy, x, gamma, mean, rstd, y? (fuse_relu)} -> {dx, dgamma +=, dbeta +=}
// Per plane (n, c), S = D*H*W voxels: mean, biased variance v, rstd = 1 / sqrt(v + eps),
// y = (x - mean) rstd gamma + beta (then max(y, 0)). Backward with g = dy (masked by y > 0 when
// fuse_relu) and xhat = (x - mean) rstd:
//   dbeta += sum g, dgamma += sum g xhat, dx = gamma rstd (g - mean(g) - xhat mean(g xhat)).
//
// Note [Instance norm chunks]
// A 3D U-Net plane holds up to 128^3 = 2M voxels and a batch has few planes (N*C = 32 in the
// first layer), so parallelising over planes alone would leave cores idle and summing 2M floats
// in one f32 accumulator loses digits. The fast kernels cut every sample's S voxels into fixed
// chunks of kChunk voxels and its channels into blocks of kChannelBlock (both independent of the
// thread count; the channel blocks keep the deep layers, 320 channels x 8^3 voxels, parallel),
// sum each chunk in f32 (vectorised for both layouts: NCDHW runs over the contiguous voxels of
// each channel, NDHWC over the contiguous channels of each voxel), then add the chunks'
// partials in f64 in chunk order. The statistics take two passes (mean, then squared
// deviations), so the variance cannot cancel to a negative number. Results are deterministic.
// The references loop in f64.
// Within a chunk the f32 sums run over kSubChunk voxels at a time and are added in f64: a chunk of
// 4096 values around 1000 summed in one f32 accumulator reaches 4e6, whose rounding (ulp 0.25 to
// 0.5) loses the mean's fourth decimal. Vectorising the loop hides that (many short partial sums),
// but the NDHWC loop vectorises over channels, not voxels, and an -O1 build (tools/sanitize.sh)
// does not vectorise at all; the sub-chunks bound the error the same way in every case.

#include <vector>

#include "nn/cpu/cpu_common.hpp"

namespace benchhost::nn::cpu {
namespace {

constexpr std::int64_t kChunk = 4096;
constexpr std::int64_t kChannelBlock = 16;
constexpr std::int64_t kSubChunk = 256;

struct InGeo {
  std::int64_t n = 0, c = 0, s = 0;
  bool cl = false;  // NDHWC
  std::int64_t at(std::int64_t ni, std::int64_t ci, std::int64_t si) const {
    return cl ? (ni * s + si) * c + ci : (ni * c + ci) * s + si;
  }
  std::int64_t chunks() const { return (s + kChunk - 1) / kChunk; }
};

InGeo geo_of(const OpCall& call) {
  const Tensor& x = call.inputs[call.inputs.size() == 3 ? 0 : 1];
  BH_CHECK_AS(InvalidArgument, x.dim() == 5, "instance_norm3d: expected a 5-d input, got {}",
              shape_str(x.shape()));
  InGeo g;
  g.cl = call.attrs.get_int("layout", 0) == 1;
  g.n = x.size(0);
  g.c = g.cl ? x.size(4) : x.size(1);
  g.s = x.numel() / std::max<std::int64_t>(1, g.n * g.c);
  return g;
}

// ---------------------------------------------------------------------------------------------
// Fast kernels (one sample's chunk [s0, s1); pointers at the sample's first element)
// ---------------------------------------------------------------------------------------------

// part[c] = sum over the chunk of (x - center[c])^k, k = 1 (center null: plain sum) or 2: f32 over
// each kSubChunk voxels, those added in f64.
BH_CPU_KERNEL void chunk_sums(const float* x, const float* center, std::int64_t C, std::int64_t S,
                              bool cl, std::int64_t c0, std::int64_t c1, std::int64_t s0, std::int64_t s1,
                              double* part) {
  if (!cl) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const float* xc = x + c * S;
      double total = 0.0;
      for (std::int64_t b0 = s0; b0 < s1; b0 += kSubChunk) {
        const std::int64_t b1 = std::min(s1, b0 + kSubChunk);
        float acc = 0.0f;
        if (center == nullptr) {
#pragma omp simd reduction(+ : acc)
          for (std::int64_t s = b0; s < b1; ++s) acc += xc[s];
        } else {
          const float m = center[c];
#pragma omp simd reduction(+ : acc)
          for (std::int64_t s = b0; s < b1; ++s) acc += (xc[s] - m) * (xc[s] - m);
        }
        total += acc;
      }
      part[c] = total;
    }
    return;
  }
  for (std::int64_t c = c0; c < c1; ++c) part[c] = 0.0;
  float acc[kChannelBlock];
  const std::int64_t w = c1 - c0;  // at most kChannelBlock (for_chunks)
  for (std::int64_t b0 = s0; b0 < s1; b0 += kSubChunk) {
    const std::int64_t b1 = std::min(s1, b0 + kSubChunk);
    for (std::int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
    for (std::int64_t s = b0; s < b1; ++s) {
      const float* xs = x + s * C + c0;
      if (center == nullptr) {
#pragma omp simd
        for (std::int64_t j = 0; j < w; ++j) acc[j] += xs[j];
      } else {
        const float* m = center + c0;
#pragma omp simd
        for (std::int64_t j = 0; j < w; ++j) acc[j] += (xs[j] - m[j]) * (xs[j] - m[j]);
      }
    }
    for (std::int64_t j = 0; j < w; ++j) part[c0 + j] += acc[j];
  }
}

// y = x * scale[c] + shift[c] (then ReLU).
BH_CPU_KERNEL void chunk_apply(const float* x, const float* scale, const float* shift, bool relu,
                               std::int64_t C, std::int64_t S, bool cl, std::int64_t c0, std::int64_t c1,
                               std::int64_t s0, std::int64_t s1, float* y) {
  if (!cl) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const float a = scale[c], b = shift[c];
      const float* xc = x + c * S;
      float* yc = y + c * S;
      if (relu) {
#pragma omp simd
        for (std::int64_t s = s0; s < s1; ++s) {
          const float v = xc[s] * a + b;
          yc[s] = v > 0.0f ? v : 0.0f;
        }
      } else {
#pragma omp simd
        for (std::int64_t s = s0; s < s1; ++s) yc[s] = xc[s] * a + b;
      }
    }
    return;
  }
  for (std::int64_t s = s0; s < s1; ++s) {
    const float* xs = x + s * C;
    float* ys = y + s * C;
    if (relu) {
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) {
        const float v = xs[c] * scale[c] + shift[c];
        ys[c] = v > 0.0f ? v : 0.0f;
      }
    } else {
#pragma omp simd
      for (std::int64_t c = c0; c < c1; ++c) ys[c] = xs[c] * scale[c] + shift[c];
    }
  }
}

// pg[c] = sum g, pgx[c] = sum g (x - mean[c]) over the chunk (times rstd later), g masked by y.
BH_CPU_KERNEL void chunk_grad_sums(const float* dy, const float* x, const float* y,
                                   const float* mean, std::int64_t C, std::int64_t S, bool cl,
                                   std::int64_t c0, std::int64_t c1, std::int64_t s0, std::int64_t s1,
                                   float* pg, float* pgx) {
  if (!cl) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const float m = mean[c];
      const float *dc = dy + c * S, *xc = x + c * S;
      float a = 0.0f, b = 0.0f;
      if (y != nullptr) {
        const float* yc = y + c * S;
#pragma omp simd reduction(+ : a, b)
        for (std::int64_t s = s0; s < s1; ++s) {
          const float g = yc[s] > 0.0f ? dc[s] : 0.0f;
          a += g;
          b += g * (xc[s] - m);
        }
      } else {
#pragma omp simd reduction(+ : a, b)
        for (std::int64_t s = s0; s < s1; ++s) {
          a += dc[s];
          b += dc[s] * (xc[s] - m);
        }
      }
      pg[c] = a;
      pgx[c] = b;
    }
    return;
  }
  for (std::int64_t c = c0; c < c1; ++c) pg[c] = pgx[c] = 0.0f;
  for (std::int64_t s = s0; s < s1; ++s) {
    const float *ds = dy + s * C, *xs = x + s * C;
    const float* ys = y != nullptr ? y + s * C : nullptr;
#pragma omp simd
    for (std::int64_t c = c0; c < c1; ++c) {
      const float g = (ys == nullptr || ys[c] > 0.0f) ? ds[c] : 0.0f;
      pg[c] += g;
      pgx[c] += g * (xs[c] - mean[c]);
    }
  }
}

// dx = k1[c] * g + k2[c] * (x - mean[c]) + k3[c], with k1 = gamma rstd,
// k2 = -gamma rstd^3 mean(g (x - mean)), k3 = -gamma rstd mean(g).
BH_CPU_KERNEL void chunk_grad_apply(const float* dy, const float* x, const float* y,
                                    const float* mean, const float* k1, const float* k2,
                                    const float* k3, std::int64_t C, std::int64_t S, bool cl,
                                    std::int64_t c0, std::int64_t c1, std::int64_t s0, std::int64_t s1,
                                    float* dx) {
  if (!cl) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const float m = mean[c], a = k1[c], b = k2[c], d = k3[c];
      const float *dc = dy + c * S, *xc = x + c * S;
      const float* yc = y != nullptr ? y + c * S : nullptr;
      float* o = dx + c * S;
      if (yc != nullptr) {
#pragma omp simd
        for (std::int64_t s = s0; s < s1; ++s) {
          const float g = yc[s] > 0.0f ? dc[s] : 0.0f;
          o[s] = a * g + b * (xc[s] - m) + d;
        }
      } else {
#pragma omp simd
        for (std::int64_t s = s0; s < s1; ++s) o[s] = a * dc[s] + b * (xc[s] - m) + d;
      }
    }
    return;
  }
  for (std::int64_t s = s0; s < s1; ++s) {
    const float *ds = dy + s * C, *xs = x + s * C;
    const float* ys = y != nullptr ? y + s * C : nullptr;
    float* o = dx + s * C;
#pragma omp simd
    for (std::int64_t c = c0; c < c1; ++c) {
      const float g = (ys == nullptr || ys[c] > 0.0f) ? ds[c] : 0.0f;
      o[c] = k1[c] * g + k2[c] * (xs[c] - mean[c]) + k3[c];
    }
  }
}

// Runs f(n, chunk, c0, c1, s0, s1) over every (sample, chunk, block of kChannelBlock channels) in
// parallel: the deep layers of a U-Net have many channels over few voxels (320 x 8^3).
template <class F>
void for_chunks(const InGeo& g, F&& f) {
  const std::int64_t chunks = g.chunks(), cblocks = (g.c + kChannelBlock - 1) / kChannelBlock;
  parallel_range(g.n * chunks * cblocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t cb = t % cblocks, k = (t / cblocks) % chunks, n = t / (cblocks * chunks);
      f(n, k, cb * kChannelBlock, std::min(g.c, (cb + 1) * kChannelBlock), k * kChunk,
        std::min(g.s, (k + 1) * kChunk));
    }
  });
}

// out[n * C + c] = sum over chunks, in order, of part[(n * chunks + k) * C + c], in f64.
template <class T>
void combine(const InGeo& g, const std::vector<T>& part, std::vector<double>& out) {
  const std::int64_t chunks = g.chunks();
  out.assign(static_cast<std::size_t>(g.n * g.c), 0.0);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t k = 0; k < chunks; ++k)
      for (std::int64_t c = 0; c < g.c; ++c)
        out[static_cast<std::size_t>(n * g.c + c)] +=
            part[static_cast<std::size_t>((n * chunks + k) * g.c + c)];
}

void fwd_tbb(OpCall& call) {
  const InGeo g = geo_of(call);
  const bool relu = call.attrs.get_bool("fuse_relu");
  const double eps = call.attrs.get("eps");
  const float* x = call.inputs[0].data<float>();
  const float* gamma = call.inputs[1].data<float>();
  const float* beta = call.inputs[2].data<float>();
  float* y = call.outputs[0].data<float>();
  float* mean = call.outputs[1].data<float>();
  float* rstd = call.outputs[2].data<float>();
  const std::int64_t plane = g.c * g.s;
  std::vector<double> part(static_cast<std::size_t>(g.n * g.chunks() * g.c));
  std::vector<double> sums;
  for_chunks(g, [&](std::int64_t n, std::int64_t k, std::int64_t c0, std::int64_t c1, std::int64_t s0,
                    std::int64_t s1) {
    chunk_sums(x + n * plane, nullptr, g.c, g.s, g.cl, c0, c1, s0, s1, part.data() + (n * g.chunks() + k) * g.c);
  });
  combine(g, part, sums);
  for (std::int64_t i = 0; i < g.n * g.c; ++i)
    mean[i] = static_cast<float>(sums[static_cast<std::size_t>(i)] / static_cast<double>(g.s));
  for_chunks(g, [&](std::int64_t n, std::int64_t k, std::int64_t c0, std::int64_t c1, std::int64_t s0,
                    std::int64_t s1) {
    chunk_sums(x + n * plane, mean + n * g.c, g.c, g.s, g.cl, c0, c1, s0, s1,
               part.data() + (n * g.chunks() + k) * g.c);
  });
  combine(g, part, sums);
  std::vector<float> scale(static_cast<std::size_t>(g.n * g.c)), shift(scale.size());
  for (std::int64_t i = 0; i < g.n * g.c; ++i) {
    const double rs = 1.0 / std::sqrt(sums[static_cast<std::size_t>(i)] / static_cast<double>(g.s) + eps);
    rstd[i] = static_cast<float>(rs);
    const std::int64_t c = i % g.c;
    const double a = rs * gamma[c];
    scale[static_cast<std::size_t>(i)] = static_cast<float>(a);
    shift[static_cast<std::size_t>(i)] = static_cast<float>(beta[c] - mean[i] * a);
  }
  for_chunks(g, [&](std::int64_t n, std::int64_t, std::int64_t c0, std::int64_t c1, std::int64_t s0,
                    std::int64_t s1) {
    chunk_apply(x + n * plane, scale.data() + n * g.c, shift.data() + n * g.c, relu, g.c, g.s, g.cl, c0, c1,
                s0, s1, y + n * plane);
  });
}

void bwd_tbb(OpCall& call) {
  const InGeo g = geo_of(call);
  const bool relu = call.attrs.get_bool("fuse_relu");
  const float* dy = call.inputs[0].data<float>();
  const float* x = call.inputs[1].data<float>();
  const float* gamma = call.inputs[2].data<float>();
  const float* mean = call.inputs[3].data<float>();
  const float* rstd = call.inputs[4].data<float>();
  const float* y = relu ? call.inputs[5].data<float>() : nullptr;
  float* dx = call.outputs[0].data<float>();
  const std::int64_t plane = g.c * g.s;
  const std::size_t np = static_cast<std::size_t>(g.n * g.chunks() * g.c);
  std::vector<float> pg(np), pgx(np);
  for_chunks(g, [&](std::int64_t n, std::int64_t k, std::int64_t c0, std::int64_t c1, std::int64_t s0,
                    std::int64_t s1) {
    const std::int64_t off = n * plane;
    chunk_grad_sums(dy + off, x + off, y ? y + off : nullptr, mean + n * g.c, g.c, g.s, g.cl, c0, c1, s0, s1,
                    pg.data() + (n * g.chunks() + k) * g.c, pgx.data() + (n * g.chunks() + k) * g.c);
  });
  std::vector<double> sg, sgx;
  combine(g, pg, sg);
  combine(g, pgx, sgx);
  const std::size_t nc = static_cast<std::size_t>(g.n * g.c);
  std::vector<float> k1(nc), k2(nc), k3(nc);
  std::vector<double> dgamma(static_cast<std::size_t>(g.c), 0.0), dbeta(dgamma.size(), 0.0);
  const double S = static_cast<double>(g.s);
  for (std::size_t i = 0; i < nc; ++i) {
    const std::size_t c = i % static_cast<std::size_t>(g.c);
    const double rs = rstd[i];
    dbeta[c] += sg[i];
    dgamma[c] += sgx[i] * rs;
    k1[i] = static_cast<float>(gamma[c] * rs);
    k2[i] = static_cast<float>(-gamma[c] * rs * rs * rs * sgx[i] / S);
    k3[i] = static_cast<float>(-gamma[c] * rs * sg[i] / S);
  }
  for_chunks(g, [&](std::int64_t n, std::int64_t, std::int64_t c0, std::int64_t c1, std::int64_t s0,
                    std::int64_t s1) {
    const std::int64_t off = n * plane;
    chunk_grad_apply(dy + off, x + off, y ? y + off : nullptr, mean + n * g.c, k1.data() + n * g.c,
                     k2.data() + n * g.c, k3.data() + n * g.c, g.c, g.s, g.cl, c0, c1, s0, s1, dx + off);
  });
  float* dg = call.outputs[1].data<float>();
  float* db = call.outputs[2].data<float>();
  for (std::int64_t c = 0; c < g.c; ++c) {
    dg[c] += static_cast<float>(dgamma[static_cast<std::size_t>(c)]);
    db[c] += static_cast<float>(dbeta[static_cast<std::size_t>(c)]);
  }
}

// ---------------------------------------------------------------------------------------------
// References: plain loops in f64
// ---------------------------------------------------------------------------------------------

void fwd_ref(OpCall& call) {
  const InGeo g = geo_of(call);
  const bool relu = call.attrs.get_bool("fuse_relu");
  const double eps = call.attrs.get("eps");
  const float* x = call.inputs[0].data<float>();
  const float* gamma = call.inputs[1].data<float>();
  const float* beta = call.inputs[2].data<float>();
  float* y = call.outputs[0].data<float>();
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c) {
      double m = 0, v = 0;
      for (std::int64_t s = 0; s < g.s; ++s) m += x[g.at(n, c, s)];
      m /= static_cast<double>(g.s);
      for (std::int64_t s = 0; s < g.s; ++s) v += (x[g.at(n, c, s)] - m) * (x[g.at(n, c, s)] - m);
      const double rs = 1.0 / std::sqrt(v / static_cast<double>(g.s) + eps);
      for (std::int64_t s = 0; s < g.s; ++s) {
        const double o = (x[g.at(n, c, s)] - m) * rs * gamma[c] + beta[c];
        y[g.at(n, c, s)] = static_cast<float>(relu && o < 0.0 ? 0.0 : o);
      }
      call.outputs[1].data<float>()[n * g.c + c] = static_cast<float>(m);
      call.outputs[2].data<float>()[n * g.c + c] = static_cast<float>(rs);
    }
}

void bwd_ref(OpCall& call) {
  const InGeo g = geo_of(call);
  const bool relu = call.attrs.get_bool("fuse_relu");
  const float* dy = call.inputs[0].data<float>();
  const float* x = call.inputs[1].data<float>();
  const float* gamma = call.inputs[2].data<float>();
  const float* mean = call.inputs[3].data<float>();
  const float* rstd = call.inputs[4].data<float>();
  const float* y = relu ? call.inputs[5].data<float>() : nullptr;
  float* dx = call.outputs[0].data<float>();
  std::vector<double> dg(static_cast<std::size_t>(g.c), 0.0), db(dg.size(), 0.0);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c) {
      const double m = mean[n * g.c + c], rs = rstd[n * g.c + c];
      auto grad = [&](std::int64_t i) { return y != nullptr && !(y[i] > 0.0f) ? 0.0 : static_cast<double>(dy[i]); };
      double sg = 0, sgx = 0;
      for (std::int64_t s = 0; s < g.s; ++s) {
        const std::int64_t i = g.at(n, c, s);
        sg += grad(i);
        sgx += grad(i) * (x[i] - m) * rs;
      }
      dg[static_cast<std::size_t>(c)] += sgx;
      db[static_cast<std::size_t>(c)] += sg;
      const double S = static_cast<double>(g.s);
      for (std::int64_t s = 0; s < g.s; ++s) {
        const std::int64_t i = g.at(n, c, s);
        const double xh = (x[i] - m) * rs;
        dx[i] = static_cast<float>(gamma[c] * rs * (grad(i) - sg / S - xh * sgx / S));
      }
    }
  for (std::int64_t c = 0; c < g.c; ++c) {
    call.outputs[1].data<float>()[c] += static_cast<float>(dg[static_cast<std::size_t>(c)]);
    call.outputs[2].data<float>()[c] += static_cast<float>(db[static_cast<std::size_t>(c)]);
  }
}

// ---------------------------------------------------------------------------------------------
// Example cases: both layouts, fuse_relu on and off, a sample larger than one chunk
// ---------------------------------------------------------------------------------------------

struct InCase {
  bool cl, relu;
  std::int64_t n, c, d, h, w;
};
// The last two cases have 17 * 9 * 30 = 4590 voxels per plane (more than one kChunk), the two
// before them 20 channels (more than one kChannelBlock).
const InCase kCases[] = {{false, false, 2, 3, 3, 4, 5},
                         {true, true, 2, 3, 3, 4, 5},
                         {false, true, 1, 3, 2, 5, 7},
                         {true, false, 1, 5, 2, 3, 4},
                         {false, false, 2, 20, 2, 3, 4},
                         {true, true, 1, 20, 3, 2, 4},
                         {false, true, 2, 3, 17, 9, 30},
                         {true, false, 1, 3, 17, 9, 30}};

Shape case_shape(const InCase& k) {
  return k.cl ? Shape{k.n, k.d, k.h, k.w, k.c} : Shape{k.n, k.c, k.d, k.h, k.w};
}

Attrs case_attrs(const InCase& k) {
  Attrs a;
  a.set("eps", 1e-5).set("fuse_relu", k.relu ? 1.0 : 0.0).set("layout", k.cl ? 1.0 : 0.0);
  return a;
}

std::vector<OpCall> fwd_cases(std::uint64_t seed) {
  std::vector<OpCall> out;
  std::uint64_t k = 0;
  for (const InCase& ic : kCases) {
    const Shape xs = case_shape(ic);
    OpCall c;
    // An offset mean: the statistics must not lose it (one-pass E[x^2] - E[x]^2 would).
    c.inputs = {case_tensor(xs, seed + 10 * k, 2.0f, 4.0f), case_tensor({ic.c}, seed + 10 * k + 1, 0.5f, 1.5f),
                case_tensor({ic.c}, seed + 10 * k + 2)};
    c.outputs = {Tensor::empty(xs), Tensor::empty({ic.n * ic.c}), Tensor::empty({ic.n * ic.c})};
    c.attrs = case_attrs(ic);
    out.push_back(std::move(c));
    ++k;
  }
  return out;
}

std::vector<OpCall> bwd_cases(std::uint64_t seed) {
  std::vector<OpCall> fwd = fwd_cases(seed), out;
  for (std::size_t k = 0; k < fwd.size(); ++k) {
    OpCall& f = fwd[k];
    fwd_ref(f);
    const Shape xs = f.inputs[0].shape();
    const std::int64_t C = f.inputs[1].numel();
    OpCall c;
    c.inputs = {case_tensor(xs, seed + 100 + k), f.inputs[0], f.inputs[1], f.outputs[1], f.outputs[2],
                f.attrs.get_bool("fuse_relu") ? f.outputs[0] : Tensor()};
    c.outputs = {Tensor::empty(xs), case_tensor({C}, seed + 200 + k), case_tensor({C}, seed + 300 + k)};
    c.attrs = f.attrs;
    out.push_back(std::move(c));
  }
  return out;
}

const bool registered =
    register_op(OpDef{"instance_norm3d_forward",
                      "inputs {x [N, C, D, H, W] or [N, D, H, W, C], gamma [C], beta [C]}, outputs {y, mean "
                      "[N*C], rstd [N*C]}; attrs eps, fuse_relu, layout (0 ncdhw, 1 ndhwc)",
                      fwd_cases, 2e-5, 2e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, fwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, fwd_ref, true}}}) &&
    register_op(OpDef{"instance_norm3d_backward",
                      "inputs {dy, x, gamma, mean, rstd, y (fuse_relu) or -}, outputs {dx, dgamma +=, dbeta "
                      "+=}; attrs eps, fuse_relu, layout (0 ncdhw, 1 ndhwc)",
                      bwd_cases, 5e-5, 5e-5,
                      {OpImpl{"cpu.tbb", DeviceType::cpu, 50, accept_f32, bwd_tbb, false},
                       OpImpl{"cpu.ref", DeviceType::cpu, 0, nullptr, bwd_ref, true}}});

}  // namespace
}  // namespace benchhost::nn::cpu
