// COCO detection mAP (pycocotools COCOeval semantics), merged across ranks. See metrics/coco_map.hpp.
//
// Pipeline: prune (each image's detections ordered by category, then descending score, cut to
// 100 per category) -> gather across ranks -> merge (repeated images dropped) -> bucket by
// category -> per category, in parallel: per image IoU + greedy matching for 4 area ranges x 10
// IoU thresholds, then one sort of the category's detections and the precision/recall curves for
// 4 areas x 3 maxDets x 10 thresholds -> summarize. Every step is O(n log n) in the detections
// of a category, plus the D x G IoU matrix per (image, category), D <= 100.
//
// Note [Bit-exact thresholds]
// COCOeval compares IoUs and recalls against np.linspace values, which are i * step + start with
// the last one set to stop exactly; thresholds() computes the same doubles (the product is kept
// in a volatile so that no compiler fuses it into an FMA). The box IoU follows maskApi.c bbIou
// operation by operation in double precision from the float inputs, as pycocotools does from the
// JSON doubles; precision is tp / (tp + fp + eps) with numpy's spacing(1). On the x86-64
// baseline (no -march) GCC emits no FMA, so products are rounded as numpy rounds them.
//
// Note [Precision at the true positives]
// accumulate() builds rc and pr for every sorted detection, makes pr monotone from the right and
// reads it at searchsorted(rc, r). The same numbers come from the TPs alone: tp grows by one at
// each TP, so the first detection whose recall reaches r is the k-th TP, k the fewest TPs with
// k / npig >= r; precision only rises at a TP (an FP lowers it, an ignored detection keeps it),
// so the right-to-left maximum from there is the maximum over the TPs from the k-th on; for
// r = 0 (k = 0) it is the maximum over all TPs, 0 with none. That costs a division per TP instead
// of two per detection and threshold (24,781 images x 300 detections x 120 curves otherwise),
// and the numpy port in tests/metrics/coco_reference.py, which follows accumulate() literally,
// agrees to 1e-9 on random scenes.
#include "benchhost/metrics/coco_map.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::metrics {

namespace {

constexpr int kT = 10;   // IoU thresholds
constexpr int kR = 101;  // recall thresholds
constexpr int kA = 4;    // area ranges: all, small, medium, large
constexpr int kM = 3;    // maxDets
constexpr std::array<int, kM> kMaxDets = {1, 10, 100};
constexpr std::size_t kMaxDet = 100;  // maxDets[-1]: the cut of evaluateImg
constexpr std::array<std::array<double, 2>, kA> kAreaRanges = {
    {{0.0, 1e10}, {0.0, 32.0 * 32.0}, {32.0 * 32.0, 96.0 * 96.0}, {96.0 * 96.0, 1e10}}};

struct Thresholds {
  std::array<double, kT> iou;
  std::array<double, kR> recall;
};

// np.linspace(.5, .95, 10) and np.linspace(0, 1, 101) (Note [Bit-exact thresholds]).
const Thresholds& thresholds() {
  static const Thresholds t = [] {
    Thresholds r{};
    const double iou_step = (0.95 - 0.5) / (kT - 1);
    for (int i = 0; i < kT - 1; ++i) {
      volatile double product = i * iou_step;
      r.iou[i] = product + 0.5;
    }
    r.iou[kT - 1] = 0.95;
    const double rec_step = 1.0 / (kR - 1);
    for (int i = 0; i < kR - 1; ++i) {
      volatile double product = i * rec_step;
      r.recall[i] = product + 0.0;
    }
    r.recall[kR - 1] = 1.0;
    return r;
  }();
  return t;
}

bool finite_box(const std::array<float, 4>& b) {
  return std::isfinite(b[0]) && std::isfinite(b[1]) && std::isfinite(b[2]) && std::isfinite(b[3]);
}

// ---- Note [IoU per image and category]: the geometry of one IoU type ----

struct Geometry {
  /// out[d * G + g] = IoU of detection d and ground truth g (crowd: over the detection's area).
  void (*ious)(std::span<const CocoDetection* const> dts, std::span<const CocoGroundTruth* const> gts,
               double* out);
  /// The detection's own area, for the rule on unmatched detections outside the area range.
  double (*detection_area)(const CocoDetection& d);
};

// maskApi.c bbIou, operation by operation in double precision.
void box_ious(std::span<const CocoDetection* const> dts, std::span<const CocoGroundTruth* const> gts,
              double* out) {
  const std::size_t G = gts.size();
  for (std::size_t g = 0; g < G; ++g) {
    const auto& gb = gts[g]->box;
    const double gx = gb[0], gy = gb[1], gw = gb[2], gh = gb[3];
    const double ga = gw * gh;
    const bool crowd = gts[g]->iscrowd;
    for (std::size_t d = 0; d < dts.size(); ++d) {
      const auto& db = dts[d]->box;
      const double dx = db[0], dy = db[1], dw = db[2], dh = db[3];
      const double da = dw * dh;
      double& o = out[d * G + g];
      o = 0;
      const double w = std::fmin(dw + dx, gw + gx) - std::fmax(dx, gx);
      if (w <= 0) continue;
      const double h = std::fmin(dh + dy, gh + gy) - std::fmax(dy, gy);
      if (h <= 0) continue;
      const double inter = w * h;
      const double uni = crowd ? da : da + ga - inter;
      o = inter / uni;
    }
  }
}

double box_area(const CocoDetection& d) {
  return static_cast<double>(d.box[2]) * static_cast<double>(d.box[3]);
}

// COCOeval's segm IoU: pycocotools iou() on the RLEs (nn::rle_iou), crowd over the detection.
void mask_ious(std::span<const CocoDetection* const> dts, std::span<const CocoGroundTruth* const> gts,
               double* out) {
  std::vector<nn::Rle> d_rles, g_rles;
  std::vector<bool> crowd;
  d_rles.reserve(dts.size());
  g_rles.reserve(gts.size());
  for (const CocoDetection* d : dts) d_rles.push_back(d->mask);
  for (const CocoGroundTruth* g : gts) {
    g_rles.push_back(g->mask);
    crowd.push_back(g->iscrowd);
  }
  const Tensor iou = nn::rle_iou(d_rles, g_rles, crowd);
  std::memcpy(out, iou.data<double>(), dts.size() * gts.size() * sizeof(double));
}

double mask_area(const CocoDetection& d) { return static_cast<double>(nn::rle_area(d.mask)); }

// A mask an evaluator of type segm can read: a size, and counts covering it exactly.
std::uint64_t mask_total(const nn::Rle& m) {
  std::uint64_t total = 0;
  for (const std::uint32_t c : m.counts) total += c;
  return total;
}

bool valid_mask(const nn::Rle& m) {
  return m.height > 0 && m.width > 0 &&
         mask_total(m) == static_cast<std::uint64_t>(m.height) * static_cast<std::uint64_t>(m.width);
}

Geometry geometry(CocoIouType type) {
  switch (type) {
    case CocoIouType::bbox: return {&box_ious, &box_area};
    case CocoIouType::segm: return {&mask_ious, &mask_area};
  }
  BH_THROW(InvalidArgument, "coco: unknown IoU type {}", static_cast<int>(type));
}

// ---- pruning and the wire format (Note [COCO map across ranks]) ----

// Detections ordered by (category, descending score, call order), each category cut to kMaxDet:
// per (image, category) exactly COCOeval's mergesort of -score followed by [:maxDets[-1]].
std::vector<CocoDetection> best_detections(const std::vector<CocoDetection>& dts) {
  std::vector<CocoDetection> sorted(dts);
  std::stable_sort(sorted.begin(), sorted.end(), [](const CocoDetection& a, const CocoDetection& b) {
    if (a.category_id != b.category_id) return a.category_id < b.category_id;
    return a.score > b.score;
  });
  std::vector<CocoDetection> out;
  out.reserve(sorted.size());
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j < sorted.size() && sorted[j].category_id == sorted[i].category_id) ++j;
    out.insert(out.end(), sorted.begin() + static_cast<std::ptrdiff_t>(i),
               sorted.begin() + static_cast<std::ptrdiff_t>(std::min(j, i + kMaxDet)));
    i = j;
  }
  return out;
}

using Image = CocoEvaluator::Image;

class Writer {
 public:
  template <class T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  std::vector<std::uint8_t> bytes;
};

class Reader {
 public:
  Reader(const std::uint8_t* p, std::size_t n) : p_(p), end_(p + n) {}
  template <class T>
  T get() {
    BH_CHECK_AS(DataError, static_cast<std::size_t>(end_ - p_) >= sizeof(T),
                "coco: gathered evaluation data is truncated");
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  bool done() const { return p_ == end_; }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

// A mask: height, width, number of counts, the counts (empty for bbox-only objects).
void put_mask(Writer& w, const nn::Rle& m) {
  w.put(m.height);
  w.put(m.width);
  w.put<std::uint64_t>(m.counts.size());
  const auto* p = reinterpret_cast<const std::uint8_t*>(m.counts.data());
  w.bytes.insert(w.bytes.end(), p, p + m.counts.size() * sizeof(std::uint32_t));
}

nn::Rle get_mask(Reader& r) {
  nn::Rle m;
  m.height = r.get<std::int64_t>();
  m.width = r.get<std::int64_t>();
  m.counts.resize(r.get<std::uint64_t>());
  for (std::uint32_t& c : m.counts) c = r.get<std::uint32_t>();
  return m;
}

// Per image: id, has-GT flag, counts, then the objects field by field.
std::vector<std::uint8_t> serialise(const std::vector<Image>& images) {
  Writer w;
  w.put<std::uint64_t>(images.size());
  for (const Image& im : images) {
    w.put(im.id);
    w.put<std::uint8_t>(im.has_ground_truth ? 1 : 0);
    w.put<std::uint64_t>(im.gts.size());
    w.put<std::uint64_t>(im.dts.size());
    for (const CocoGroundTruth& g : im.gts) {
      w.put(g.category_id);
      w.put(g.box);
      w.put(g.area);
      w.put<std::uint8_t>(g.iscrowd ? 1 : 0);
      put_mask(w, g.mask);
    }
    for (const CocoDetection& d : im.dts) {
      w.put(d.category_id);
      w.put(d.box);
      w.put(d.score);
      put_mask(w, d.mask);
    }
  }
  return std::move(w.bytes);
}

std::vector<Image> deserialise(const std::uint8_t* p, std::size_t n) {
  Reader r(p, n);
  std::vector<Image> images(r.get<std::uint64_t>());
  for (Image& im : images) {
    im.id = r.get<std::int64_t>();
    im.has_ground_truth = r.get<std::uint8_t>() != 0;
    im.gts.resize(r.get<std::uint64_t>());
    im.dts.resize(r.get<std::uint64_t>());
    for (CocoGroundTruth& g : im.gts) {
      g.category_id = r.get<std::int64_t>();
      g.box = r.get<std::array<float, 4>>();
      g.area = r.get<float>();
      g.iscrowd = r.get<std::uint8_t>() != 0;
      g.mask = get_mask(r);
    }
    for (CocoDetection& d : im.dts) {
      d.category_id = r.get<std::int64_t>();
      d.box = r.get<std::array<float, 4>>();
      d.score = r.get<float>();
      d.mask = get_mask(r);
    }
  }
  BH_CHECK_AS(DataError, r.done(), "coco: gathered evaluation data has trailing bytes");
  return images;
}

// Every rank's pruned images, in rank order.
std::vector<std::vector<Image>> gather(std::vector<Image> local, Communicator* comm) {
  std::vector<std::vector<Image>> per_rank;
  if (comm == nullptr || comm->size() == 1) {
    per_rank.push_back(std::move(local));
    return per_rank;
  }
  const std::vector<std::uint8_t> bytes = serialise(local);
  local.clear();
  const std::vector<double> sizes = allgather_values(*comm, static_cast<double>(bytes.size()));
  const auto widest = static_cast<std::int64_t>(*std::max_element(sizes.begin(), sizes.end()));
  const int P = comm->size();
  Tensor in = Tensor::zeros({widest}, DType::u8);
  std::memcpy(in.raw_data(), bytes.data(), bytes.size());
  Tensor mine = in.to(comm->device());
  Tensor all = Tensor::zeros({widest * P}, DType::u8, comm->device());
  comm->allgather(mine, all).wait();
  const Tensor host = all.to(Device::cpu());
  const auto* base = static_cast<const std::uint8_t*>(host.raw_data());
  for (int r = 0; r < P; ++r)
    per_rank.push_back(deserialise(base + static_cast<std::size_t>(r) * static_cast<std::size_t>(widest),
                                   static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)])));
  return per_rank;
}

// The union: the lowest rank's copy of each image, ascending image id (COCOeval's imgIds).
std::vector<Image> merge(std::vector<std::vector<Image>> per_rank) {
  std::vector<Image> all;
  std::unordered_map<std::int64_t, std::size_t> seen;
  for (std::size_t r = 0; r < per_rank.size(); ++r)
    for (Image& im : per_rank[r]) {
      BH_CHECK_AS(InvalidArgument, im.has_ground_truth,
                  "coco: rank {} has {} detections of image {} but no ground truth for it (add an "
                  "image's ground truth and detections on the rank that evaluated it; an image "
                  "without objects still needs add_ground_truth with none)",
                  r, im.dts.size(), im.id);
      if (seen.emplace(im.id, all.size()).second) all.push_back(std::move(im));
    }
  std::sort(all.begin(), all.end(), [](const Image& a, const Image& b) { return a.id < b.id; });
  return all;
}

// ---- evaluation of one category ----

// One detection's matching results over the area ranges: bit t = matched at IoU threshold t,
// bit 16 + t = ignored at threshold t.
struct DetEval {
  float score;
  std::int32_t image;  // position in the merged, id-sorted image list
  std::int32_t rank;   // position among its image's detections of this category (score order)
  std::array<std::uint32_t, kA> flags;
};

struct CategoryItems {
  std::vector<std::pair<std::int32_t, const CocoGroundTruth*>> gts;  // image order, call order
  std::vector<std::pair<std::int32_t, const CocoDetection*>> dts;    // image order, score order
};

struct CategoryResult {
  std::array<std::int64_t, kA> npig{};  // non-ignored GT per area range
  // [a][m][t][r] and [a][m][t]; -1 where npig[a] == 0 (COCOeval's "absent category").
  std::vector<double> precision = std::vector<double>(static_cast<std::size_t>(kA * kM * kT * kR), -1.0);
  std::vector<double> recall = std::vector<double>(static_cast<std::size_t>(kA * kM * kT), -1.0);
  double& p(int a, int m, int t, int r) { return precision[static_cast<std::size_t>(((a * kM + m) * kT + t) * kR + r)]; }
  double& rc(int a, int m, int t) { return recall[static_cast<std::size_t>((a * kM + m) * kT + t)]; }
};

// Buffers reused across the images of a category.
struct Scratch {
  std::vector<double> ious, dt_area;
  std::vector<std::uint8_t> ignore, used;
  std::vector<std::size_t> order;
};

// COCOeval.evaluateImg for one (image, category) at every area range and IoU threshold.
void evaluate_image(const Geometry& geo, std::int32_t image, std::span<const CocoGroundTruth* const> gts,
                    std::span<const CocoDetection* const> dts, std::vector<DetEval>& out,
                    std::array<std::int64_t, kA>& npig, Scratch& sc) {
  const Thresholds& th = thresholds();
  const std::size_t G = gts.size(), D = dts.size();
  std::vector<double>& ious = sc.ious;
  ious.resize(D * G);
  if (D > 0 && G > 0) geo.ious(dts, gts, ious.data());
  const std::size_t first = out.size();
  sc.dt_area.resize(D);
  for (std::size_t d = 0; d < D; ++d) {
    out.push_back({dts[d]->score, image, static_cast<std::int32_t>(d), {}});
    sc.dt_area[d] = geo.detection_area(*dts[d]);
  }

  std::vector<std::uint8_t>& ignore = sc.ignore;
  std::vector<std::uint8_t>& used = sc.used;
  std::vector<std::size_t>& order = sc.order;
  ignore.resize(G);
  used.resize(G);
  order.resize(G);
  for (int a = 0; a < kA; ++a) {
    const double lo = kAreaRanges[a][0], hi = kAreaRanges[a][1];
    for (std::size_t g = 0; g < G; ++g) {
      const double area = gts[g]->area;
      ignore[g] = gts[g]->iscrowd || area < lo || area > hi;
      npig[a] += ignore[g] ? 0 : 1;
    }
    // GT non-ignored first, each group in call order (mergesort of the ignore flags).
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_partition(order.begin(), order.end(), [&](std::size_t g) { return ignore[g] == 0; });
    for (int t = 0; t < kT; ++t) {
      std::fill(used.begin(), used.end(), std::uint8_t{0});
      for (std::size_t d = 0; d < D; ++d) {
        double best = std::min(th.iou[t], 1 - 1e-10);
        std::ptrdiff_t m = -1;  // position in `order` of the best GT so far
        for (std::size_t o = 0; o < G; ++o) {
          const std::size_t g = order[o];
          if (used[o] && !gts[g]->iscrowd) continue;  // taken, and not a crowd
          // already on a regular GT, and only ignored GT remain
          if (m > -1 && !ignore[order[static_cast<std::size_t>(m)]] && ignore[g]) break;
          const double iou = ious[d * G + g];
          if (iou < best) continue;
          best = iou;
          m = static_cast<std::ptrdiff_t>(o);
        }
        std::uint32_t& f = out[first + d].flags[a];
        if (m == -1) {
          if (sc.dt_area[d] < lo || sc.dt_area[d] > hi) f |= 1u << (16 + t);
          continue;
        }
        used[static_cast<std::size_t>(m)] = 1;
        f |= 1u << t;
        if (ignore[order[static_cast<std::size_t>(m)]]) f |= 1u << (16 + t);
      }
    }
  }
}

// COCOeval.evaluate + accumulate for one category.
CategoryResult evaluate_category(const Geometry& geo, const CategoryItems& items) {
  CategoryResult res;
  std::vector<DetEval> evals;
  evals.reserve(items.dts.size());
  std::vector<const CocoGroundTruth*> gts;
  std::vector<const CocoDetection*> dts;
  Scratch scratch;
  std::size_t gi = 0, di = 0;
  while (gi < items.gts.size() || di < items.dts.size()) {
    const std::int32_t image = std::min(gi < items.gts.size() ? items.gts[gi].first : INT32_MAX,
                                        di < items.dts.size() ? items.dts[di].first : INT32_MAX);
    gts.clear();
    dts.clear();
    for (; gi < items.gts.size() && items.gts[gi].first == image; ++gi) gts.push_back(items.gts[gi].second);
    for (; di < items.dts.size() && items.dts[di].first == image; ++di) dts.push_back(items.dts[di].second);
    evaluate_image(geo, image, gts, dts, evals, res.npig, scratch);
  }

  // np.argsort(-scores, kind='mergesort') over the images' lists concatenated in image order.
  std::vector<std::uint32_t> sorted(evals.size());
  std::iota(sorted.begin(), sorted.end(), 0u);
  std::sort(sorted.begin(), sorted.end(), [&](std::uint32_t i, std::uint32_t j) {
    const DetEval &a = evals[i], &b = evals[j];
    if (a.score != b.score) return a.score > b.score;
    if (a.image != b.image) return a.image < b.image;
    return a.rank < b.rank;
  });

  const Thresholds& th = thresholds();
  // Note [Precision at the true positives]: per (area, maxDet) one pass over the sorted
  // detections counts tp / fp for the 10 thresholds and records the precision at each TP.
  std::array<std::vector<double>, kT> at_tp;  // at_tp[t][k - 1]: precision at the k-th TP
  for (int a = 0; a < kA; ++a) {
    if (res.npig[a] == 0) continue;
    const auto npig = static_cast<double>(res.npig[a]);
    // first_count[r]: the fewest TPs whose recall k / npig reaches recall threshold r (division
    // as numpy divides, so a recall equal to a threshold finds it as searchsorted does).
    std::array<std::int64_t, kR> first_count{};
    for (int r = 0; r < kR; ++r) {
      auto k = std::max<std::int64_t>(0, static_cast<std::int64_t>(std::ceil(th.recall[r] * npig)) - 1);
      while (static_cast<double>(k) / npig < th.recall[r]) ++k;
      while (k > 0 && static_cast<double>(k - 1) / npig >= th.recall[r]) --k;
      first_count[r] = k;
    }
    for (int m = 0; m < kM; ++m) {
      std::array<double, kT> tp{}, fp{};
      for (auto& v : at_tp) v.clear();
      std::size_t nd = 0;
      for (std::uint32_t i : sorted) {
        if (evals[i].rank >= kMaxDets[m]) continue;
        ++nd;
        const std::uint32_t f = evals[i].flags[a];
        for (int t = 0; t < kT; ++t) {
          if ((f >> (16 + t)) & 1u) continue;  // ignored
          if ((f >> t) & 1u) {
            tp[t] += 1;
            at_tp[t].push_back(tp[t] / (fp[t] + tp[t] + DBL_EPSILON));
          } else {
            fp[t] += 1;
          }
        }
      }
      for (int t = 0; t < kT; ++t) {
        std::vector<double>& pr = at_tp[t];
        res.rc(a, m, t) = nd > 0 ? tp[t] / npig : 0.0;
        for (std::size_t j = pr.size(); j-- > 1;) pr[j - 1] = std::max(pr[j - 1], pr[j]);
        for (int r = 0; r < kR; ++r) {
          const std::int64_t k = first_count[r];
          const auto n_tp = static_cast<std::int64_t>(pr.size());
          // k == 0: searchsorted finds index 0, whose suffix maximum is the best precision at
          // any TP (0 without one); k > n_tp: the recall is never reached.
          res.p(a, m, t, r) = k > n_tp ? 0.0 : n_tp == 0 ? 0.0 : pr[static_cast<std::size_t>(k == 0 ? 0 : k - 1)];
        }
      }
    }
  }
  return res;
}

}  // namespace

// ---- CocoBoxMaskAccuracy ----

std::string CocoBoxMaskAccuracy::to_json() const {
  BH_CHECK_AS(InvalidArgument, std::isfinite(bbox) && std::isfinite(segm),
              "coco: BBOX {} and SEGM {} must be finite to be logged", bbox, segm);
  return fmt::format("{{\"BBOX\": {}, \"SEGM\": {}}}", bbox, segm);
}

// ---- CocoEvaluator ----

CocoEvaluator::CocoEvaluator(CocoIouType iou_type) : iou_type_(iou_type) { (void)geometry(iou_type); }

void CocoEvaluator::reset() {
  images_.clear();
  index_.clear();
  gt_images_ = gt_count_ = dt_count_ = 0;
}

CocoEvaluator::Image& CocoEvaluator::image(std::int64_t image_id) {
  const auto [it, added] = index_.emplace(image_id, images_.size());
  if (added) {
    images_.emplace_back();
    images_.back().id = image_id;
  }
  return images_[it->second];
}

void CocoEvaluator::add_ground_truth(std::int64_t image_id, std::span<const CocoGroundTruth> objects) {
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const CocoGroundTruth& g = objects[i];
    BH_CHECK_AS(InvalidArgument,
                finite_box(g.box) && std::isfinite(g.area) && g.box[2] >= 0 && g.box[3] >= 0 && g.area >= 0,
                "coco: ground truth {} of image {} has box [{}, {}, {}, {}] and area {}: needs finite "
                "values and a non-negative width, height and area",
                i, image_id, g.box[0], g.box[1], g.box[2], g.box[3], g.area);
  }
  if (iou_type_ == CocoIouType::segm)
    for (std::size_t i = 0; i < objects.size(); ++i)
      BH_CHECK_AS(InvalidArgument, valid_mask(objects[i].mask),
                  "coco segm: ground truth {} of image {} has a {}x{} mask whose counts add up to {}: "
                  "give every object its RLE at the image's size (rle_from_polygons for polygons, the "
                  "annotation's RLE for crowds)",
                  i, image_id, objects[i].mask.height, objects[i].mask.width, mask_total(objects[i].mask));
  Image& im = image(image_id);
  BH_CHECK_AS(InvalidArgument, !im.has_ground_truth, "coco: image {} already has ground truth on this rank",
              image_id);
  im.has_ground_truth = true;
  im.gts.assign(objects.begin(), objects.end());
  ++gt_images_;
  gt_count_ += static_cast<std::int64_t>(objects.size());
}

void CocoEvaluator::add_detections(std::int64_t image_id, std::span<const CocoDetection> detections) {
  for (std::size_t i = 0; i < detections.size(); ++i) {
    const CocoDetection& d = detections[i];
    BH_CHECK_AS(InvalidArgument, finite_box(d.box) && std::isfinite(d.score) && d.box[2] >= 0 && d.box[3] >= 0,
                "coco: detection {} of image {} has box [{}, {}, {}, {}] and score {}: needs finite "
                "values and a non-negative width and height",
                i, image_id, d.box[0], d.box[1], d.box[2], d.box[3], d.score);
  }
  if (iou_type_ == CocoIouType::segm)
    for (std::size_t i = 0; i < detections.size(); ++i)
      BH_CHECK_AS(InvalidArgument, valid_mask(detections[i].mask),
                  "coco segm: detection {} of image {} has a {}x{} mask whose counts add up to {}: "
                  "give every detection its pasted mask's RLE at the image's size (paste_masks, rle_encode)",
                  i, image_id, detections[i].mask.height, detections[i].mask.width, mask_total(detections[i].mask));
  Image& im = image(image_id);
  im.dts.insert(im.dts.end(), detections.begin(), detections.end());
  dt_count_ += static_cast<std::int64_t>(detections.size());
}

CocoResult CocoEvaluator::compute(Communicator* comm) const {
  const Geometry geo = geometry(iou_type_);
  std::vector<Image> local;
  local.reserve(images_.size());
  for (const Image& im : images_) {
    if (!im.has_ground_truth && im.dts.empty()) continue;
    local.push_back({im.id, im.has_ground_truth, im.gts, best_detections(im.dts)});
  }
  const std::vector<Image> images = merge(gather(std::move(local), comm));
  BH_CHECK_AS(InvalidArgument, images.size() <= static_cast<std::size_t>(INT32_MAX), "coco: {} images is too many",
              images.size());

  CocoResult result;
  result.images = static_cast<std::int64_t>(images.size());
  // Categories: those with ground truth (Note in the header: the others score -1 in COCOeval).
  std::vector<std::int64_t> cats;
  for (const Image& im : images)
    for (const CocoGroundTruth& g : im.gts) cats.push_back(g.category_id);
  std::sort(cats.begin(), cats.end());
  cats.erase(std::unique(cats.begin(), cats.end()), cats.end());
  auto category_index = [&](std::int64_t id) -> std::ptrdiff_t {
    const auto it = std::lower_bound(cats.begin(), cats.end(), id);
    return it != cats.end() && *it == id ? it - cats.begin() : -1;
  };
  std::vector<CategoryItems> items(cats.size());
  for (std::size_t i = 0; i < images.size(); ++i) {
    const auto image = static_cast<std::int32_t>(i);
    for (const CocoGroundTruth& g : images[i].gts) items[static_cast<std::size_t>(category_index(g.category_id))].gts.emplace_back(image, &g);
    for (const CocoDetection& d : images[i].dts) {
      const std::ptrdiff_t k = category_index(d.category_id);
      if (k < 0) continue;
      items[static_cast<std::size_t>(k)].dts.emplace_back(image, &d);
      ++result.detections;
    }
    result.ground_truths += static_cast<std::int64_t>(images[i].gts.size());
  }

  std::vector<CategoryResult> per_category(cats.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, cats.size(), 1), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t k = r.begin(); k != r.end(); ++k) per_category[k] = evaluate_category(geo, items[k]);
  });

  // COCOeval.summarize: the mean of the entries > -1 of the selected slice, -1 when none.
  auto summarize = [&](bool ap, int t_only, int a, int m) {
    double sum = 0;
    std::int64_t count = 0;
    for (CategoryResult& c : per_category)
      for (int t = 0; t < kT; ++t) {
        if (t_only >= 0 && t != t_only) continue;
        if (ap) {
          for (int r = 0; r < kR; ++r)
            if (const double v = c.p(a, m, t, r); v > -1) sum += v, ++count;
        } else if (const double v = c.rc(a, m, t); v > -1) {
          sum += v;
          ++count;
        }
      }
    return count > 0 ? sum / static_cast<double>(count) : -1.0;
  };
  constexpr int kAll = -1, t50 = 0, t75 = 5, m100 = 2;
  result.stats = {summarize(true, kAll, 0, m100), summarize(true, t50, 0, m100), summarize(true, t75, 0, m100),
                  summarize(true, kAll, 1, m100), summarize(true, kAll, 2, m100), summarize(true, kAll, 3, m100),
                  summarize(false, kAll, 0, 0),   summarize(false, kAll, 0, 1),   summarize(false, kAll, 0, m100),
                  summarize(false, kAll, 1, m100), summarize(false, kAll, 2, m100), summarize(false, kAll, 3, m100)};
  for (std::size_t k = 0; k < cats.size(); ++k) {
    CategoryResult& c = per_category[k];
    if (c.npig[0] == 0) continue;
    double sum = 0;
    for (int t = 0; t < kT; ++t)
      for (int r = 0; r < kR; ++r) sum += c.p(0, m100, t, r);
    result.category_ids.push_back(cats[k]);
    result.category_ap.push_back(sum / (kT * kR));
  }
  return result;
}

}  // namespace benchhost::metrics
