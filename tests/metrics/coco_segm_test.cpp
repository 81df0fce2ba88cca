// COCO segm mAP (metrics/coco_map.hpp, CocoIouType::segm): hand-built cases whose AP is worked
// out in the comments (the IoU is the masks', not the boxes'), crowd regions, segm equal to
// bbox when every mask is its full box, all 12 stats against the numpy COCOeval port of
// tests/metrics/coco_reference.py (and pycocotools' COCOeval 'segm' where installed) on random
// elliptic masks, two ranks equal to one, refused masks, and MLPerf's {"BBOX": b, "SEGM": s}. How to read the hand computations: see coco_map_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include <unistd.h>

#include "benchhost/error.hpp"
#include "benchhost/metrics/coco_map.hpp"
#include "benchhost/nn/detection.hpp"
#include "benchhost/tensor.hpp"
#include "common/lm_peer.hpp"
#include "common/thread_comm.hpp"

using namespace benchhost;
using metrics::CocoDetection;
using metrics::CocoEvaluator;
using metrics::CocoGroundTruth;
using metrics::CocoIouType;
using metrics::CocoResult;
using metrics::kCocoAPLarge;
using metrics::kCocoAPSmall;

namespace {

constexpr double kTol = 1e-12;
constexpr double kAbsent = -1.0;
constexpr std::int64_t kH = 96, kW = 128;  // the image size of every hand case

// The RLE of an H x W mask whose pixel (y, x) is set where inside(y, x).
template <class F>
nn::Rle mask_of(F inside, std::int64_t h = kH, std::int64_t w = kW) {
  Tensor m = Tensor::zeros({h, w}, DType::u8);
  auto* p = m.data<std::uint8_t>();
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x) p[y * w + x] = inside(y, x) ? 1 : 0;
  return nn::rle_encode(m);
}

// The full rectangle x0 <= x < x0 + w, y0 <= y < y0 + h.
nn::Rle rect(std::int64_t x0, std::int64_t y0, std::int64_t w, std::int64_t h, std::int64_t H = kH,
             std::int64_t W = kW) {
  return mask_of([=](std::int64_t y, std::int64_t x) { return x >= x0 && x < x0 + w && y >= y0 && y < y0 + h; },
                 H, W);
}

CocoGroundTruth gt(std::int64_t cat, std::array<float, 4> box, nn::Rle mask, bool crowd = false) {
  CocoGroundTruth g;
  g.category_id = cat;
  g.box = box;
  g.area = static_cast<float>(nn::rle_area(mask));  // COCO's `area` of a mask annotation
  g.iscrowd = crowd;
  g.mask = std::move(mask);
  return g;
}

CocoDetection det(std::int64_t cat, std::array<float, 4> box, nn::Rle mask, float score) {
  CocoDetection d;
  d.category_id = cat;
  d.box = box;
  d.score = score;
  d.mask = std::move(mask);
  return d;
}

void add(CocoEvaluator& ev, std::int64_t image, const std::vector<CocoGroundTruth>& g,
         const std::vector<CocoDetection>& d) {
  ev.add_ground_truth(image, g);
  if (!d.empty()) ev.add_detections(image, d);
}

void expect_stats(const CocoResult& r, const std::array<double, 12>& want) {
  static const char* names[] = {"AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"};
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(r.stats[i], want[i], kTol) << names[i];
}

}  // namespace

TEST(CocoSegm, PerfectMaskScoresOne) {
  // A 20x20 square GT (area 400: small) and a detection with the same mask.
  CocoEvaluator ev(CocoIouType::segm);
  add(ev, 5, {gt(2, {10, 10, 20, 20}, rect(10, 10, 20, 20))}, {det(2, {10, 10, 20, 20}, rect(10, 10, 20, 20), 0.8f)});
  const CocoResult r = ev.compute();
  expect_stats(r, {1, 1, 1, 1, kAbsent, kAbsent, 1, 1, 1, 1, kAbsent, kAbsent});
  EXPECT_EQ(r.images, 1);
  EXPECT_EQ(r.detections, 1);
}

TEST(CocoSegm, HalfOverlappingMaskScoresByHand) {
  // GT square 20x20 at (0, 0); the detection's square shifted right by 4: intersection 16 x 20
  // = 320, union 400 + 400 - 320 = 480, IoU 2/3: matched at thresholds .50 .55 .60 .65, missed
  // at the 6 others (AP 1 and 0 there): AP = 4/10, AP50 = 1, AP75 = 0, recall 0.4; area 400 is
  // small.
  CocoEvaluator ev(CocoIouType::segm);
  add(ev, 1, {gt(1, {0, 0, 20, 20}, rect(0, 0, 20, 20))}, {det(1, {4, 0, 20, 20}, rect(4, 0, 20, 20), 0.6f)});
  expect_stats(ev.compute(), {0.4, 1, 0, 0.4, kAbsent, kAbsent, 0.4, 0.4, 0.4, 0.4, kAbsent, kAbsent});
}

TEST(CocoSegm, IouIsTheMasksNotTheBoxes) {
  // GT: the lower-left triangle x <= y of the 20x20 square at (0, 0): 1 + 2 + ... + 20 = 210
  // pixels. Detection: the full square, the same box. Mask IoU 210 / 400 = 0.525: matched at .50
  // only, AP = 1/10; the box IoU is 1 and a bbox evaluator of the same structs scores 1.
  const nn::Rle tri = mask_of([](std::int64_t y, std::int64_t x) { return x < 20 && y < 20 && x <= y; });
  ASSERT_EQ(nn::rle_area(tri), 210u);
  const std::vector<CocoGroundTruth> g = {gt(1, {0, 0, 20, 20}, tri)};
  const std::vector<CocoDetection> d = {det(1, {0, 0, 20, 20}, rect(0, 0, 20, 20), 0.9f)};
  CocoEvaluator segm(CocoIouType::segm), bbox(CocoIouType::bbox);
  add(segm, 1, g, d);
  add(bbox, 1, g, d);
  expect_stats(segm.compute(), {0.1, 1, 0, 0.1, kAbsent, kAbsent, 0.1, 0.1, 0.1, 0.1, kAbsent, kAbsent});
  // bbox: GT area 210 (the annotation's field) is small as well.
  expect_stats(bbox.compute(), {1, 1, 1, 1, kAbsent, kAbsent, 1, 1, 1, 1, kAbsent, kAbsent});
}

TEST(CocoSegm, DetectionOnACrowdRegionIsIgnoredNotAFalsePositive) {
  // Regular GT: 10x10 square at (0, 0) (area 100). Crowd GT: an L-shaped region, the 40x40
  // square at (40, 40) less its 20x20 top-right quarter (1200 pixels), as an uncompressed RLE.
  //   c (0.97): 10x10 at (42, 60), inside the crowd's mask: crowd IoU = 100 / area(c) = 1 ->
  //     matched to an ignored GT -> ignored.
  //   tp (0.90): on the regular GT.
  // Order c, tp: with c ignored, tp = [1], AP 1. (Were c a false positive: tp = [0, 1], fp =
  // [1, 1], precision 1/2 everywhere, AP 0.5.)
  //   q (0.95): 10x10 at (65, 42), inside the crowd's BOX but in the cut-out quarter: its mask
  //     misses the crowd's mask (IoU 0), so it is a false positive; a box IoU would have
  //     ignored it. With q: order q, tp: tp = [0, 1], fp = [1, 1] -> AP 0.5; AR 1.
  const nn::Rle crowd = mask_of([](std::int64_t y, std::int64_t x) {
    const bool square = x >= 40 && x < 80 && y >= 40 && y < 80;
    const bool cut = x >= 60 && y < 60;
    return square && !cut;
  });
  ASSERT_EQ(nn::rle_area(crowd), 1200u);
  const CocoGroundTruth regular = gt(1, {0, 0, 10, 10}, rect(0, 0, 10, 10));
  const CocoGroundTruth region = gt(1, {40, 40, 40, 40}, crowd, true);
  const CocoDetection c = det(1, {42, 60, 10, 10}, rect(42, 60, 10, 10), 0.97f);
  const CocoDetection tp = det(1, {0, 0, 10, 10}, rect(0, 0, 10, 10), 0.90f);
  const CocoDetection q = det(1, {65, 42, 10, 10}, rect(65, 42, 10, 10), 0.95f);

  CocoEvaluator ev(CocoIouType::segm);
  add(ev, 1, {regular, region}, {c, tp});
  // AR1: each image's best detection of the category only (c, ignored): recall 0.
  expect_stats(ev.compute(), {1, 1, 1, 1, kAbsent, kAbsent, 0, 1, 1, 1, kAbsent, kAbsent});

  CocoEvaluator with_q(CocoIouType::segm);
  add(with_q, 1, {regular, region}, {c, tp, q});
  expect_stats(with_q.compute(), {0.5, 0.5, 0.5, 0.5, kAbsent, kAbsent, 0, 1, 1, 1, kAbsent, kAbsent});
}

namespace {

struct Scene {
  std::int64_t id;
  std::vector<CocoGroundTruth> gts;
  std::vector<CocoDetection> dts;
};

// Random scenes of integer boxes inside a 64 x 80 image, each mask the box's full rectangle; a
// few crowds, detections near the GT (jittered) or anywhere, three categories.
std::vector<Scene> rectangle_scenes(int n, unsigned seed) {
  constexpr std::int64_t H = 64, W = 80;
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto box_in_image = [&](int x, int y, int w, int h) {
    x = std::clamp(x, 0, static_cast<int>(W) - 1);
    y = std::clamp(y, 0, static_cast<int>(H) - 1);
    w = std::clamp(w, 1, static_cast<int>(W) - x);
    h = std::clamp(h, 1, static_cast<int>(H) - y);
    return std::array<int, 4>{x, y, w, h};
  };
  std::vector<Scene> scenes;
  for (int i = 0; i < n; ++i) {
    Scene s{1000 + 3 * i, {}, {}};
    const int ng = uni(0, 4);
    for (int g = 0; g < ng; ++g) {
      const auto b = box_in_image(uni(0, 70), uni(0, 55), uni(2, 45), uni(2, 45));
      const bool crowd = uni(0, 9) == 0;
      CocoGroundTruth o = gt(uni(1, 3), {float(b[0]), float(b[1]), float(b[2]), float(b[3])},
                             rect(b[0], b[1], b[2], b[3], H, W), crowd);
      s.gts.push_back(o);
      for (int k = uni(0, 3); k > 0; --k) {
        const auto j = box_in_image(b[0] + uni(-1, 1), b[1] + uni(-1, 1), b[2] + uni(-2, 2), b[3] + uni(-2, 2));
        s.dts.push_back(det(uni(0, 4) == 0 ? uni(1, 3) : o.category_id,
                            {float(j[0]), float(j[1]), float(j[2]), float(j[3])}, rect(j[0], j[1], j[2], j[3], H, W),
                            static_cast<float>(uni(1, 40)) / 40.0f));  // coarse scores: ties occur
      }
    }
    for (int k = uni(0, 2); k > 0; --k) {
      const auto j = box_in_image(uni(0, 70), uni(0, 55), uni(1, 40), uni(1, 40));
      s.dts.push_back(det(uni(1, 3), {float(j[0]), float(j[1]), float(j[2]), float(j[3])},
                          rect(j[0], j[1], j[2], j[3], H, W), static_cast<float>(uni(1, 40)) / 40.0f));
    }
    scenes.push_back(std::move(s));
  }
  return scenes;
}

}  // namespace

TEST(CocoSegm, EqualsBboxWhenEveryMaskIsItsFullBox) {
  // Integer boxes: the mask IoU (pixel counts) and maskApi's bbIou (w * h products) are the same
  // ratios of the same integers, and the detection's area is w * h either way; so all 12 stats
  // agree exactly, crowds included.
  const std::vector<Scene> scenes = rectangle_scenes(60, 11u);
  CocoEvaluator segm(CocoIouType::segm), bbox(CocoIouType::bbox);
  for (const Scene& s : scenes) {
    add(segm, s.id, s.gts, s.dts);
    add(bbox, s.id, s.gts, s.dts);
  }
  const CocoResult a = segm.compute(), b = bbox.compute();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(a.stats[i], b.stats[i]) << "stat " << i;
  EXPECT_EQ(a.category_ap, b.category_ap);
  EXPECT_EQ(a.detections, b.detections);
  EXPECT_GT(a.stats[0], 0.2);  // a non-trivial scene set
  EXPECT_LT(a.stats[0], 0.9);
}

TEST(CocoSegm, TwoRanksEqualOneRank) {
  // The masks travel in the gathered bytes (Note [COCO map across ranks]).
  const std::vector<Scene> scenes = rectangle_scenes(40, 5u);
  CocoEvaluator whole(CocoIouType::segm);
  for (const Scene& s : scenes) add(whole, s.id, s.gts, s.dts);
  const CocoResult want = whole.compute();
  test_support::Group group(2);
  std::array<CocoResult, 2> got;
  std::array<std::thread, 2> threads;
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      test_support::ThreadComm comm(group, r);
      CocoEvaluator ev(CocoIouType::segm);
      for (std::size_t i = 0; i < scenes.size(); ++i)
        if (static_cast<int>(i % 2) == r) add(ev, scenes[i].id, scenes[i].gts, scenes[i].dts);
      got[r] = ev.compute(&comm);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 12; ++i) EXPECT_EQ(got[r].stats[i], want.stats[i]) << "rank " << r << " stat " << i;
    EXPECT_EQ(got[r].category_ap, want.category_ap);
  }
}

TEST(CocoSegm, RefusesMissingOrMalformedMasks) {
  CocoGroundTruth no_mask;
  no_mask.category_id = 1;
  no_mask.box = {0, 0, 4, 4};
  no_mask.area = 16;
  CocoEvaluator segm(CocoIouType::segm);
  EXPECT_THROW(segm.add_ground_truth(1, std::vector<CocoGroundTruth>{no_mask}), InvalidArgument);
  CocoDetection short_counts = det(1, {0, 0, 4, 4}, rect(0, 0, 4, 4), 0.5f);
  short_counts.mask.counts.back() -= 1;  // counts now add up to H * W - 1
  EXPECT_THROW(segm.add_detections(1, std::vector<CocoDetection>{short_counts}), InvalidArgument);
  // A bbox evaluator reads no mask.
  CocoEvaluator bbox;
  EXPECT_NO_THROW(bbox.add_ground_truth(1, std::vector<CocoGroundTruth>{no_mask}));
  // Masks of different sizes in one image: rle_iou refuses them at compute().
  CocoEvaluator mixed(CocoIouType::segm);
  add(mixed, 1, {gt(1, {0, 0, 4, 4}, rect(0, 0, 4, 4))}, {det(1, {0, 0, 4, 4}, rect(0, 0, 4, 4, 32, 32), 0.5f)});
  EXPECT_THROW(mixed.compute(), InvalidArgument);
}

TEST(CocoSegm, BoxAndMaskAccuracyAsMlperfLogsIt) {
  const metrics::CocoBoxMaskAccuracy acc{0.377, 0.339};
  EXPECT_EQ(acc.to_json(), R"({"BBOX": 0.377, "SEGM": 0.339})");
  EXPECT_TRUE(acc.reached(0.377, 0.339));
  EXPECT_FALSE(acc.reached(0.377, 0.34));
  EXPECT_FALSE((metrics::CocoBoxMaskAccuracy{0.3769, 0.5}.reached(0.377, 0.339)));
  EXPECT_THROW((metrics::CocoBoxMaskAccuracy{std::nan(""), 0.3}.to_json()), InvalidArgument);
}

namespace {

// Random scenes of elliptic masks in a 128 x 160 image (radii 3..60: small, medium and large
// areas), some crowds, GT area = mask pixels (occasionally another `area` field, which the
// ranges read), detections jittered from the GT (same or another category) or anywhere, scores
// partly rounded (ties).
std::vector<Scene> ellipse_scenes(int n, unsigned seed) {
  constexpr std::int64_t H = 128, W = 160;
  std::mt19937 rng(seed);
  auto u = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  auto ellipse = [&](double cx, double cy, double rx, double ry) {
    return mask_of([=](std::int64_t y, std::int64_t x) {
      const double a = (static_cast<double>(x) - cx) / rx, b = (static_cast<double>(y) - cy) / ry;
      return a * a + b * b <= 1.0;
    }, H, W);
  };
  auto score = [&] {
    const double s = u();
    return static_cast<float>(u() < 0.3 ? std::round(s * 10) / 10 : s);
  };
  std::vector<Scene> scenes;
  for (int i = 0; i < n; ++i) {
    Scene s{7 + 2 * i, {}, {}};
    const int ng = static_cast<int>(u() * 5);
    for (int g = 0; g < ng; ++g) {
      const double cx = u() * W, cy = u() * H, rx = 3 + u() * 57, ry = 3 + u() * 57;
      const std::int64_t cat = 1 + static_cast<std::int64_t>(u() * 4);
      CocoGroundTruth o = gt(cat, {0, 0, 1, 1}, ellipse(cx, cy, rx, ry), u() < 0.08);
      if (u() < 0.15) o.area *= static_cast<float>(0.3 + u());
      s.gts.push_back(o);
      for (int k = static_cast<int>(u() * 3); k > 0; --k) {
        const double j = 0.3 * u();
        s.dts.push_back(det(u() < 0.15 ? 1 + static_cast<std::int64_t>(u() * 4) : cat, {0, 0, 1, 1},
                            ellipse(cx + j * rx * (u() - 0.5), cy + j * ry * (u() - 0.5), rx * (1 + j * (u() - 0.5)),
                                    ry * (1 + j * (u() - 0.5))),
                            score()));
      }
    }
    if (i % 8 == 0) {  // a large object (area > 96^2) with a close detection and a loose one
      const double rx = 60 + 10 * u(), ry = 55 + 10 * u();
      const std::int64_t cat = 1 + static_cast<std::int64_t>(u() * 4);
      s.gts.push_back(gt(cat, {0, 0, 1, 1}, ellipse(80, 64, rx, ry)));
      s.dts.push_back(det(cat, {0, 0, 1, 1}, ellipse(80 + 6 * (u() - 0.5), 64, rx * (0.9 + 0.2 * u()), ry), score()));
      s.dts.push_back(det(cat, {0, 0, 1, 1}, ellipse(70, 60, rx * 0.6, ry * 0.8), score()));
    }
    for (int f = static_cast<int>(u() * 3); f > 0; --f)
      s.dts.push_back(det(1 + static_cast<std::int64_t>(u() * 4), {0, 0, 1, 1},
                          ellipse(u() * W, u() * H, 2 + u() * 40, 2 + u() * 40), score()));
    scenes.push_back(std::move(s));
  }
  return scenes;
}

// The scenes as tests/metrics/coco_reference.py reads them (iou_type segm: compressed RLE
// strings; detections without a box, as maskrcnn_benchmark writes its segm results, so
// loadRes takes their area from the mask).
std::string write_segm_json(const std::vector<Scene>& scenes) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("coco_segm_test_" + std::to_string(::getpid()) + ".json")).string();
  FILE* f = std::fopen(path.c_str(), "w");
  auto rle = [&](const nn::Rle& m) {
    std::string text;
    for (const char c : nn::rle_to_string(m)) {
      if (c == '\\') text += '\\';  // JSON escape ('"' is below '0', never written)
      text += c;
    }
    std::fprintf(f, "{\"size\": [%lld, %lld], \"counts\": \"%s\"}", static_cast<long long>(m.height),
                 static_cast<long long>(m.width), text.c_str());
  };
  std::fprintf(f, "{\"iou_type\": \"segm\", \"images\": [");
  for (std::size_t i = 0; i < scenes.size(); ++i)
    std::fprintf(f, "%s%lld", i ? ", " : "", static_cast<long long>(scenes[i].id));
  std::fprintf(f, "], \"categories\": [1, 2, 3, 4], \"annotations\": [");
  int ann = 0;
  for (const Scene& s : scenes)
    for (const auto& g : s.gts) {
      std::fprintf(f, "%s{\"id\": %d, \"image_id\": %lld, \"category_id\": %lld, \"bbox\": [0, 0, 1, 1], \"area\": %.17g, "
                   "\"iscrowd\": %d, \"segmentation\": ",
                   ann ? ", " : "", ann + 1, static_cast<long long>(s.id), static_cast<long long>(g.category_id),
                   static_cast<double>(g.area), g.iscrowd ? 1 : 0);
      rle(g.mask);
      std::fprintf(f, "}");
      ++ann;
    }
  std::fprintf(f, "], \"detections\": [");
  bool first = true;
  for (const Scene& s : scenes)
    for (const auto& d : s.dts) {
      std::fprintf(f, "%s{\"image_id\": %lld, \"category_id\": %lld, \"score\": %.17g, \"segmentation\": ",
                   first ? "" : ", ", static_cast<long long>(s.id), static_cast<long long>(d.category_id),
                   static_cast<double>(d.score));
      rle(d.mask);
      std::fprintf(f, "}");
      first = false;
    }
  std::fprintf(f, "]}\n");
  std::fclose(f);
  return path;
}

bool python_has(const char* module) {
  const std::string cmd = std::string("/usr/bin/python3 -c 'import ") + module + "' >/dev/null 2>&1";
  return std::filesystem::exists("/usr/bin/python3") && std::system(cmd.c_str()) == 0;
}

void cross_check_segm(const char* impl) {
  const std::vector<Scene> scenes = ellipse_scenes(120, 20261126u);
  CocoEvaluator ev(CocoIouType::segm);
  for (const Scene& s : scenes) add(ev, s.id, s.gts, s.dts);
  const CocoResult ours = ev.compute();
  const std::string path = write_segm_json(scenes);
  const std::vector<double> theirs = test_support::run_peer("/usr/bin/python3 " + std::string(BENCHHOST_SOURCE_DIR) +
                                                            "/tests/metrics/coco_reference.py " + impl + " " + path);
  std::remove(path.c_str());
  ASSERT_EQ(theirs.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    std::printf("segm stat %2d: benchhost %.15f  %s %.15f\n", i, ours.stats[i], impl, theirs[i]);
    EXPECT_NEAR(ours.stats[i], theirs[i], 1e-9) << "stat " << i;
  }
  // Non-trivial: every area range has ground truth and the AP is neither 0 nor 1.
  for (int i = kCocoAPSmall; i <= kCocoAPLarge; ++i) EXPECT_GT(ours.stats[i], 0.0) << "stat " << i;
  EXPECT_GT(ours.map(), 0.05);
  EXPECT_LT(ours.map(), 0.95);
}

}  // namespace

TEST(CocoSegm, MatchesNumpyPortOnRandomMaskScenes) {
  if (!python_has("numpy")) GTEST_SKIP() << "/usr/bin/python3 has no numpy: numpy COCOeval port skipped";
  cross_check_segm("port");
}

TEST(CocoSegm, MatchesPycocotoolsOnRandomMaskScenes) {
  if (!python_has("pycocotools, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no pycocotools (Debian 12 has no python3-pycocotools): pycocotools segm "
                    "cross-check skipped; CocoSegm.MatchesNumpyPortOnRandomMaskScenes still runs";
  cross_check_segm("pycocotools");
}
