// Instance masks (nn/detection.hpp): maskrcnn_benchmark's mask paste, COCO's run-length
// encoding in pycocotools' conventions (Note [COCO RLE]) and polygon rasterisation. Host code:
// these run once per evaluated detection or per ground-truth object when targets are built.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "benchhost/error.hpp"
#include "benchhost/nn/detection.hpp"

namespace benchhost::nn {

namespace {

void check_rle(const Rle& r, const char* op) {
  BH_CHECK_AS(InvalidArgument, r.height >= 0 && r.width >= 0, "{}: RLE size {}x{} is negative", op, r.height, r.width);
  std::uint64_t total = 0;
  for (std::uint32_t c : r.counts) total += c;
  if (total != static_cast<std::uint64_t>(r.height * r.width)) [[unlikely]]
    BH_THROW(DataError, "{}: RLE counts add up to {} pixels, its size {}x{} has {}", op, total, r.height, r.width,
             r.height * r.width);
}

// Column-major 0/1 pixels of an RLE.
std::vector<std::uint8_t> column_major(const Rle& r) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(r.height * r.width), 0);
  std::size_t at = 0;
  std::uint8_t value = 0;
  for (std::uint32_t c : r.counts) {
    std::fill(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + c), value);
    at += c;
    value ^= 1;
  }
  return v;
}

Rle from_column_major(const std::vector<std::uint8_t>& v, std::int64_t h, std::int64_t w) {
  Rle r{h, w, {}};
  std::uint8_t value = 0;
  std::uint32_t run = 0;
  for (std::uint8_t p : v) {
    if ((p != 0) != (value != 0)) {
      r.counts.push_back(run);
      run = 0;
      value ^= 1;
    }
    ++run;
  }
  r.counts.push_back(run);
  return r;
}

// [start, end) intervals of 1s in column-major order.
std::vector<std::pair<std::uint64_t, std::uint64_t>> ones(const Rle& r) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < r.counts.size(); ++i) {
    if (i % 2 == 1 && r.counts[i] > 0) out.emplace_back(at, at + r.counts[i]);
    at += r.counts[i];
  }
  return out;
}

std::uint64_t intersection(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& a,
                           const std::vector<std::pair<std::uint64_t, std::uint64_t>>& b) {
  std::uint64_t s = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::uint64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) s += hi - lo;
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return s;
}

}  // namespace

Rle rle_encode(const Tensor& mask) {
  BH_CHECK_AS(InvalidArgument, mask.defined() && mask.dim() == 2 && mask.dtype() == DType::u8,
              "rle_encode: mask must be u8 [H, W], got {}", mask.defined() ? mask.describe() : std::string("undefined"));
  const Tensor m = mask.device().is_cpu() ? mask.contiguous() : mask.to(Device::cpu()).contiguous();
  const std::int64_t H = m.size(0), W = m.size(1);
  const std::uint8_t* p = m.data<std::uint8_t>();
  std::vector<std::uint8_t> v(static_cast<std::size_t>(H * W));
  for (std::int64_t x = 0; x < W; ++x)
    for (std::int64_t y = 0; y < H; ++y) v[static_cast<std::size_t>(x * H + y)] = p[y * W + x] != 0 ? 1 : 0;
  return from_column_major(v, H, W);
}

Tensor rle_decode(const Rle& rle) {
  check_rle(rle, "rle_decode");
  const std::vector<std::uint8_t> v = column_major(rle);
  Tensor out = Tensor::empty({rle.height, rle.width}, DType::u8);
  std::uint8_t* p = out.data<std::uint8_t>();
  for (std::int64_t x = 0; x < rle.width; ++x)
    for (std::int64_t y = 0; y < rle.height; ++y) p[y * rle.width + x] = v[static_cast<std::size_t>(x * rle.height + y)];
  return out;
}

std::uint64_t rle_area(const Rle& rle) {
  std::uint64_t a = 0;
  for (std::size_t i = 1; i < rle.counts.size(); i += 2) a += rle.counts[i];
  return a;
}

Rle rle_merge(const std::vector<Rle>& rles, bool intersect) {
  BH_CHECK_AS(InvalidArgument, !rles.empty(), "rle_merge: no RLEs to merge");
  const std::int64_t H = rles[0].height, W = rles[0].width;
  std::vector<std::uint8_t> acc;
  for (std::size_t i = 0; i < rles.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, rles[i].height == H && rles[i].width == W, "rle_merge: RLE {} is {}x{}, RLE 0 {}x{}", i,
                rles[i].height, rles[i].width, H, W);
    check_rle(rles[i], "rle_merge");
    const std::vector<std::uint8_t> v = column_major(rles[i]);
    if (i == 0) acc = v;
    else
      for (std::size_t k = 0; k < v.size(); ++k) acc[k] = intersect ? (acc[k] & v[k]) : (acc[k] | v[k]);
  }
  return from_column_major(acc, H, W);
}

Tensor rle_iou(const std::vector<Rle>& dt, const std::vector<Rle>& gt, const std::vector<bool>& iscrowd) {
  BH_CHECK_AS(InvalidArgument, iscrowd.size() == gt.size(), "rle_iou: {} crowd flags for {} ground-truth RLEs",
              iscrowd.size(), gt.size());
  const auto D = static_cast<std::int64_t>(dt.size()), G = static_cast<std::int64_t>(gt.size());
  Tensor out = Tensor::empty({D, G}, DType::f64);
  double* o = out.data<double>();
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> gt_ones;
  for (const Rle& g : gt) gt_ones.push_back(ones(g));
  for (std::int64_t d = 0; d < D; ++d) {
    const auto d_ones = ones(dt[static_cast<std::size_t>(d)]);
    const double area_d = static_cast<double>(rle_area(dt[static_cast<std::size_t>(d)]));
    for (std::int64_t g = 0; g < G; ++g) {
      const Rle& gr = gt[static_cast<std::size_t>(g)];
      BH_CHECK_AS(InvalidArgument, gr.height == dt[static_cast<std::size_t>(d)].height && gr.width == dt[static_cast<std::size_t>(d)].width,
                  "rle_iou: detection {} is {}x{}, ground truth {} {}x{}", d, dt[static_cast<std::size_t>(d)].height,
                  dt[static_cast<std::size_t>(d)].width, g, gr.height, gr.width);
      const double inter = static_cast<double>(intersection(d_ones, gt_ones[static_cast<std::size_t>(g)]));
      const double uni = iscrowd[static_cast<std::size_t>(g)] ? area_d : area_d + static_cast<double>(rle_area(gr)) - inter;
      o[d * G + g] = uni > 0 ? inter / uni : 0.0;
    }
  }
  return out;
}

std::string rle_to_string(const Rle& rle) {
  std::string s;
  for (std::size_t i = 0; i < rle.counts.size(); ++i) {
    long long x = rle.counts[i];
    if (i > 2) x -= static_cast<long long>(rle.counts[i - 2]);
    for (bool more = true; more;) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;  // arithmetic shift: negative values end in a group with the sign bit set
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s.push_back(static_cast<char>(c + 48));
    }
  }
  return s;
}

Rle rle_from_string(const std::string& counts, std::int64_t height, std::int64_t width) {
  Rle r{height, width, {}};
  std::size_t p = 0;
  while (p < counts.size()) {
    long long x = 0;
    int k = 0;
    for (bool more = true; more; ++k, ++p) {
      if (p >= counts.size() || k > 12) [[unlikely]]
        BH_THROW(DataError, "rle_from_string: count {} of '{}' is truncated or too long", r.counts.size(), counts);
      const int c = counts[p] - 48;
      if (c < 0 || c > 63) [[unlikely]]
        BH_THROW(DataError, "rle_from_string: character '{}' at {} is outside '0'..'o'", counts[p], p);
      x |= static_cast<long long>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      if (!more && (c & 0x10)) x |= -1LL << (5 * (k + 1));
    }
    if (r.counts.size() > 2) x += static_cast<long long>(r.counts[r.counts.size() - 2]);
    if (x < 0 || x > 0xffffffffLL) [[unlikely]]
      BH_THROW(DataError, "rle_from_string: count {} of '{}' decodes to {}", r.counts.size(), counts, x);
    r.counts.push_back(static_cast<std::uint32_t>(x));
  }
  check_rle(r, "rle_from_string");
  return r;
}

// Note [Hostile polygons]
// Polygons come from files (COCO annotations, result files). The rasteriser walks every edge on a
// 5x grid in int coordinates, one point per grid step, and stores runs as uint32: a non-finite or
// huge coordinate would overflow the int cast, a long edge would allocate without bound, and an
// image of 2^32 pixels or more would overflow a run. So coordinates must be finite and within
// kMaxPolygonCoord pixels of the origin (a real polygon lies in its image, at most a few pixels
// over its edge), the whole boundary may take at most kMaxPolygonWalk grid points (128 MB), and
// the image fewer than 2^32 pixels; anything else is InvalidArgument naming the value.
namespace {
constexpr double kMaxPolygonCoord = 1 << 20;
constexpr std::uint64_t kMaxPolygonWalk = std::uint64_t{1} << 24;

void check_rle_image(std::int64_t height, std::int64_t width, const char* op) {
  BH_CHECK_AS(InvalidArgument,
              height >= 0 && width >= 0 && height < (std::int64_t{1} << 32) && width < (std::int64_t{1} << 32) &&
                  static_cast<std::uint64_t>(height) * static_cast<std::uint64_t>(width) < (std::uint64_t{1} << 32),
              "{}: a {}x{} image does not fit an RLE's 32-bit runs (fewer than 2^32 pixels)", op, height, width);
}
}  // namespace

Rle rle_from_polygon(const std::vector<double>& xy, std::int64_t height, std::int64_t width) {
  BH_CHECK_AS(InvalidArgument, xy.size() % 2 == 0 && xy.size() >= 4 && height >= 0 && width >= 0,
              "rle_from_polygon: {} coordinates (needs pairs, at least 2 points) for a {}x{} image", xy.size(), height,
              width);
  check_rle_image(height, width, "rle_from_polygon");
  for (std::size_t j = 0; j < xy.size(); ++j)
    BH_CHECK_AS(InvalidArgument, std::isfinite(xy[j]) && std::fabs(xy[j]) <= kMaxPolygonCoord,
                "rle_from_polygon: coordinate {} is {}, not a finite number within {} pixels (Note [Hostile polygons])",
                j, xy[j], kMaxPolygonCoord);
  const double kScale = 5.0;
  const std::size_t k = xy.size() / 2;
  // Vertices on the 5x grid (rounded half up, truncated toward zero as a C cast), closed.
  std::vector<int> vx(k + 1), vy(k + 1);
  for (std::size_t j = 0; j < k; ++j) {
    vx[j] = static_cast<int>(kScale * xy[2 * j] + 0.5);
    vy[j] = static_cast<int>(kScale * xy[2 * j + 1] + 0.5);
  }
  vx[k] = vx[0];
  vy[k] = vy[0];
  std::uint64_t walk = 0;
  for (std::size_t j = 0; j < k; ++j)
    walk += static_cast<std::uint64_t>(std::max(std::abs(vx[j + 1] - vx[j]), std::abs(vy[j + 1] - vy[j]))) + 1;
  BH_CHECK_AS(InvalidArgument, walk <= kMaxPolygonWalk,
              "rle_from_polygon: the boundary of {} points is {} grid steps long, more than {} (Note [Hostile polygons])",
              k, walk, kMaxPolygonWalk);
  // Every grid point along the boundary: each edge walked along its longer axis, always from its
  // lower end (then reversed back), the other coordinate rounded.
  std::vector<int> u, v;
  for (std::size_t j = 0; j < k; ++j) {
    int xs = vx[j], xe = vx[j + 1], ys = vy[j], ye = vy[j + 1];
    const int dx = std::abs(xe - xs), dy = std::abs(ye - ys);
    const bool flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      std::swap(xs, xe);
      std::swap(ys, ye);
    }
    if (dx >= dy) {
      const double slope = dx == 0 ? 0.0 : static_cast<double>(ye - ys) / dx;
      for (int d = 0; d <= dx; ++d) {
        const int t = flip ? dx - d : d;
        u.push_back(t + xs);
        v.push_back(static_cast<int>(ys + slope * t + 0.5));
      }
    } else {
      const double slope = static_cast<double>(xe - xs) / dy;
      for (int d = 0; d <= dy; ++d) {
        const int t = flip ? dy - d : d;
        v.push_back(t + ys);
        u.push_back(static_cast<int>(xs + slope * t + 0.5));
      }
    }
  }
  // Where the boundary crosses a pixel-column centre: the first row of a run toggles there.
  std::vector<std::uint64_t> at;
  for (std::size_t j = 1; j < u.size(); ++j) {
    if (u[j] == u[j - 1]) continue;
    double xd = u[j] < u[j - 1] ? u[j] : u[j] - 1;
    xd = (xd + 0.5) / kScale - 0.5;
    if (std::floor(xd) != xd || xd < 0 || xd > static_cast<double>(width - 1)) continue;
    double yd = v[j] < v[j - 1] ? v[j] : v[j - 1];
    yd = (yd + 0.5) / kScale - 0.5;
    yd = std::ceil(std::min(std::max(yd, 0.0), static_cast<double>(height)));
    at.push_back(static_cast<std::uint64_t>(xd) * static_cast<std::uint64_t>(height) + static_cast<std::uint64_t>(yd));
  }
  at.push_back(static_cast<std::uint64_t>(height * width));
  std::sort(at.begin(), at.end());
  // Toggle positions to run lengths; two toggles at one position cancel.
  Rle r{height, width, {}};
  std::uint64_t prev = 0;
  std::vector<std::uint64_t> runs;
  for (std::uint64_t a : at) {
    runs.push_back(a - prev);
    prev = a;
  }
  r.counts.push_back(static_cast<std::uint32_t>(runs[0]));
  for (std::size_t j = 1; j < runs.size();) {
    if (runs[j] > 0) {
      r.counts.push_back(static_cast<std::uint32_t>(runs[j++]));
    } else if (++j < runs.size()) {
      r.counts.back() += static_cast<std::uint32_t>(runs[j++]);
    }
  }
  return r;
}

Rle rle_from_polygons(const std::vector<std::vector<double>>& polygons, std::int64_t height, std::int64_t width) {
  check_rle_image(height, width, "rle_from_polygons");
  if (polygons.empty()) return Rle{height, width, {static_cast<std::uint32_t>(height * width)}};
  std::vector<Rle> parts;
  for (const auto& p : polygons) parts.push_back(rle_from_polygon(p, height, width));
  return parts.size() == 1 ? parts[0] : rle_merge(parts);
}

Tensor polygon_mask_targets(const std::vector<Polygons>& objects, const Tensor& proposals, const Tensor& matched,
                            std::int64_t M) {
  const char* op = "polygon_mask_targets";
  BH_CHECK_AS(InvalidArgument, proposals.defined() && proposals.dim() == 2 && proposals.size(1) == 4 && M > 0,
              "{}: proposals must be [P, 4] and M > 0, got {} and M = {}", op,
              proposals.defined() ? proposals.describe() : std::string("undefined"), M);
  const std::int64_t P = proposals.size(0);
  BH_CHECK_AS(InvalidArgument, matched.defined() && matched.dtype() == DType::i64 && matched.numel() == P,
              "{}: matched must be i64 [{}], got {}", op, P, matched.defined() ? matched.describe() : std::string("undefined"));
  Tensor b = proposals.device().is_cpu() ? proposals.contiguous() : proposals.to(Device::cpu()).contiguous();
  if (b.dtype() != DType::f32) b = b.to(DType::f32);
  const Tensor m = matched.device().is_cpu() ? matched.contiguous() : matched.to(Device::cpu()).contiguous();
  Tensor out = Tensor::empty({P, M, M});
  for (std::int64_t p = 0; p < P; ++p) {
    const std::int64_t g = m.data<std::int64_t>()[p];
    if (g < 0 || g >= static_cast<std::int64_t>(objects.size())) [[unlikely]]
      BH_THROW(DataError, "{}: proposal {} is matched to object {}, outside [0, {})", op, p, g, objects.size());
    const float* box = b.data<float>() + 4 * p;
    const float w = std::max(box[2] - box[0], 1.0f), h = std::max(box[3] - box[1], 1.0f);
    // Polygons.resize: ratio = float(M) / float(size) in double, applied to the f32 coordinates.
    const auto ratio_w = static_cast<float>(static_cast<double>(M) / static_cast<double>(w));
    const auto ratio_h = static_cast<float>(static_cast<double>(M) / static_cast<double>(h));
    Polygons scaled;
    for (const auto& poly : objects[static_cast<std::size_t>(g)]) {
      std::vector<double> q(poly.size());
      for (std::size_t i = 0; i < poly.size(); ++i) {
        const float v = static_cast<float>(poly[i]) - (i % 2 == 0 ? box[0] : box[1]);
        q[i] = static_cast<double>(v * (i % 2 == 0 ? ratio_w : ratio_h));
      }
      scaled.push_back(std::move(q));
    }
    const Tensor mask = rle_decode(rle_from_polygons(scaled, M, M));
    for (std::int64_t i = 0; i < M * M; ++i) out.data<float>()[p * M * M + i] = mask.data<std::uint8_t>()[i];
  }
  return out;
}

Tensor paste_masks_in_image(const Tensor& masks, const Tensor& boxes, std::int64_t image_h, std::int64_t image_w,
                            float thresh, std::int64_t padding) {
  const char* op = "paste_masks_in_image";
  BH_CHECK_AS(InvalidArgument, masks.defined() && masks.dim() == 3 && masks.size(1) == masks.size(2) && masks.size(1) > 0,
              "{}: masks must be [D, M, M], got {}", op, masks.defined() ? masks.describe() : std::string("undefined"));
  BH_CHECK_AS(InvalidArgument,
              boxes.defined() && boxes.dim() == 2 && boxes.size(1) == 4 && boxes.size(0) == masks.size(0),
              "{}: boxes must be [{}, 4], got {}", op, masks.size(0),
              boxes.defined() ? boxes.describe() : std::string("undefined"));
  BH_CHECK_AS(InvalidArgument, image_h > 0 && image_w > 0 && padding >= 0, "{}: image {}x{} and padding {}", op,
              image_h, image_w, padding);
  auto host = [](const Tensor& t) {
    Tensor h = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu()).contiguous();
    return h.dtype() == DType::f32 ? h : h.to(DType::f32);
  };
  const Tensor m = host(masks), b = host(boxes);
  const std::int64_t D = m.size(0), M = m.size(1), P = M + 2 * padding;
  const float scale = static_cast<float>(static_cast<double>(P) / static_cast<double>(M));
  Tensor out = Tensor::zeros({D, image_h, image_w}, DType::u8);
  std::vector<float> padded(static_cast<std::size_t>(P * P));
  for (std::int64_t d = 0; d < D; ++d) {
    std::fill(padded.begin(), padded.end(), 0.0f);
    for (std::int64_t y = 0; y < M; ++y)
      for (std::int64_t x = 0; x < M; ++x)
        padded[static_cast<std::size_t>((y + padding) * P + x + padding)] = m.data<float>()[(d * M + y) * M + x];
    // expand_boxes, then the cast to integers (truncation toward zero).
    const float* bx = b.data<float>() + 4 * d;
    const float w_half = (bx[2] - bx[0]) * 0.5f * scale, h_half = (bx[3] - bx[1]) * 0.5f * scale;
    const float x_c = (bx[2] + bx[0]) * 0.5f, y_c = (bx[3] + bx[1]) * 0.5f;
    const auto x0 = static_cast<std::int64_t>(x_c - w_half), x1 = static_cast<std::int64_t>(x_c + w_half);
    const auto y0 = static_cast<std::int64_t>(y_c - h_half), y1 = static_cast<std::int64_t>(y_c + h_half);
    const std::int64_t w = std::max<std::int64_t>(x1 - x0 + 1, 1), h = std::max<std::int64_t>(y1 - y0 + 1, 1);
    // Bilinear resize P x P -> h x w, align_corners = false (torch's source index rule).
    const float ry = static_cast<float>(P) / static_cast<float>(h), rx = static_cast<float>(P) / static_cast<float>(w);
    std::uint8_t* o = out.data<std::uint8_t>() + d * image_h * image_w;
    const std::int64_t ys = std::max<std::int64_t>(y0, 0), ye = std::min<std::int64_t>(y1 + 1, image_h);
    const std::int64_t xs = std::max<std::int64_t>(x0, 0), xe = std::min<std::int64_t>(x1 + 1, image_w);
    for (std::int64_t iy = ys; iy < ye; ++iy) {
      const float sy = std::max(ry * (static_cast<float>(iy - y0) + 0.5f) - 0.5f, 0.0f);
      const auto y_lo = static_cast<std::int64_t>(sy);
      const std::int64_t y_hi = y_lo + (y_lo < P - 1 ? 1 : 0);
      const float ly = std::min(std::max(sy - static_cast<float>(y_lo), 0.0f), 1.0f), hy = 1.0f - ly;
      for (std::int64_t ix = xs; ix < xe; ++ix) {
        const float sx = std::max(rx * (static_cast<float>(ix - x0) + 0.5f) - 0.5f, 0.0f);
        const auto x_lo = static_cast<std::int64_t>(sx);
        const std::int64_t x_hi = x_lo + (x_lo < P - 1 ? 1 : 0);
        const float lx = std::min(std::max(sx - static_cast<float>(x_lo), 0.0f), 1.0f), hx = 1.0f - lx;
        const float top = hx * padded[static_cast<std::size_t>(y_lo * P + x_lo)] + lx * padded[static_cast<std::size_t>(y_lo * P + x_hi)];
        const float bottom = hx * padded[static_cast<std::size_t>(y_hi * P + x_lo)] + lx * padded[static_cast<std::size_t>(y_hi * P + x_hi)];
        o[iy * image_w + ix] = hy * top + ly * bottom > thresh ? 1 : 0;
      }
    }
  }
  return out;
}

}  // namespace benchhost::nn
