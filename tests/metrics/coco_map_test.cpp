// COCO bbox mAP (metrics/coco_map.hpp): hand-built cases whose AP is worked out in the comments,
// a cross-check of all 12 stats on random data against pycocotools (when installed) and against
// an independent numpy port of COCOeval (tests/metrics/coco_reference.py), and two ranks
// (threads over an in-process communicator) against one.
//
// Reading the hand computations: with 101 recall points r_i = i / 100 and a monotone precision
// curve, AP at one IoU threshold = (sum over i of the precision at the first detection whose
// recall reaches r_i, 0 when none does) / 101; AP@[.5:.95] averages that over 10 thresholds.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include <unistd.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"
#include "benchhost/metrics/coco_map.hpp"
#include "common/lm_peer.hpp"
#include "common/thread_comm.hpp"

using namespace benchhost;
using metrics::CocoDetection;
using metrics::CocoEvaluator;
using metrics::CocoGroundTruth;
using metrics::CocoResult;

namespace {

CocoGroundTruth gt(std::int64_t cat, float x, float y, float w, float h, float area = -1, bool crowd = false) {
  return {cat, {x, y, w, h}, area < 0 ? w * h : area, crowd};
}
CocoDetection det(std::int64_t cat, float x, float y, float w, float h, float score) {
  return {cat, {x, y, w, h}, score};
}
void add(CocoEvaluator& ev, std::int64_t image, std::vector<CocoGroundTruth> g, std::vector<CocoDetection> d) {
  ev.add_ground_truth(image, g);
  if (!d.empty()) ev.add_detections(image, d);
}

constexpr double kTol = 1e-12;
constexpr double kAbsent = -1.0;  // summarize()'s value for a slice without ground truth

void expect_stats(const CocoResult& r, const std::array<double, 12>& want) {
  static const char* names[] = {"AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"};
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(r.stats[i], want[i], kTol) << names[i];
}

}  // namespace

TEST(CocoMap, PerfectDetectionScoresOne) {
  // One 100x100 GT (area 10000: large) and a detection on it: precision 1 at every recall point
  // and threshold. Small and medium have no GT: -1.
  CocoEvaluator ev;
  add(ev, 7, {gt(3, 10, 10, 100, 100)}, {det(3, 10, 10, 100, 100, 0.9f)});
  const CocoResult r = ev.compute();
  expect_stats(r, {1, 1, 1, kAbsent, kAbsent, 1, 1, 1, 1, kAbsent, kAbsent, 1});
  EXPECT_EQ(r.images, 1);
  EXPECT_EQ(r.category_ids, std::vector<std::int64_t>{3});
  ASSERT_EQ(r.category_ap.size(), 1u);
  EXPECT_NEAR(r.category_ap[0], 1.0, kTol);
}

TEST(CocoMap, IouOfPointSixMatchesThreeThresholds) {
  // GT [0,0,10,10], detection [0,0,10,6]: intersection 60, union 100 + 60 - 60 = 100, IoU 0.6
  // exactly, which equals linspace's third threshold (0.6 as a double) and matches there (the
  // test is `iou < threshold` to skip). Matched at 0.50, 0.55, 0.60: AP 1 there, 0 at the 7
  // others: AP = 3/10; AP50 = 1, AP75 = 0; recall likewise 3/10. Area 100 is small.
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 10, 10)}, {det(1, 0, 0, 10, 6, 0.5f)});
  expect_stats(ev.compute(), {0.3, 1, 0, 0.3, kAbsent, kAbsent, 0.3, 0.3, 0.3, 0.3, kAbsent, kAbsent});
}

TEST(CocoMap, TwoGroundTruthsOneDetectionHalfRecall) {
  // Two GT, one perfect detection: rc = [0.5], pr = [1]. Recall points r_0..r_50 (<= 0.5) find
  // index 0 (precision 1); r_51..r_100 find none (0). AP = 51/101 at every threshold; AR = 0.5.
  // GT areas: 400 (small) and 10000 (large); the detection is on the small one.
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 20, 20), gt(1, 100, 100, 100, 100)}, {det(1, 0, 0, 20, 20, 0.7f)});
  const double ap = 51.0 / 101.0;
  expect_stats(ev.compute(), {ap, ap, ap, 1, kAbsent, 0, 0.5, 0.5, 0.5, 1, kAbsent, 0});
}

TEST(CocoMap, FalsePositiveAboveTheTruePositive) {
  // One GT. Detection A (0.9) misses it, B (0.8) is perfect. Order A, B: tp = [0, 1],
  // fp = [1, 1], rc = [0, 1], pr = [0, 1/2]; made monotone: [1/2, 1/2]. r_0 = 0 finds index 0,
  // r_1..r_100 find index 1: precision 1/2 everywhere, AP = 0.5; recall 1. AR1 (one detection per
  // image and category: A only) = 0.
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 50, 50)}, {det(1, 200, 200, 50, 50, 0.9f), det(1, 0, 0, 50, 50, 0.8f)});
  expect_stats(ev.compute(), {0.5, 0.5, 0.5, kAbsent, 0.5, kAbsent, 0, 1, 1, kAbsent, 1, kAbsent});
}

TEST(CocoMap, CrowdGroundTruthIsIgnoredAndMatchedByDetectionArea) {
  // Regular GT [0,0,10,10] (area 100) and crowd GT [20,20,40,40] (area 1600).
  //   c2 (0.99) [20,20,80,80]: crowd IoU = 1600 / 6400 = 0.25: no match anywhere -> FP.
  //   c3 (0.97) [40,40,10,10] and c1 (0.95) [30,30,10,10]: inside the crowd region, crowd IoU
  //     = 100 / 100 = 1 (a standard IoU would be 100 / 1600) -> matched to an ignored GT ->
  //     ignored, neither TP nor FP; the crowd GT takes both (it is never used up).
  //   tp (0.90) on the regular GT.
  // Order c2, c3, c1, tp: tp = [0,0,0,1], fp = [1,1,1,1], rc = [0,0,0,1], pr -> 1/2 everywhere:
  // AP = 0.5 (if c1 and c3 counted as FPs: 1/4; if only the first took the crowd: 1/3).
  // Only one non-ignored GT (the crowd is ignored), small: APm, APl are -1.
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 10, 10), gt(1, 20, 20, 40, 40, 1600, true)},
      {det(1, 20, 20, 80, 80, 0.99f), det(1, 40, 40, 10, 10, 0.97f), det(1, 30, 30, 10, 10, 0.95f),
       det(1, 0, 0, 10, 10, 0.90f)});
  const CocoResult r = ev.compute();
  // Small range: c2 (area 6400) is unmatched and outside [0, 1024] -> ignored there; c1 and c3
  // are on the crowd; so only tp counts: APs = 1.
  expect_stats(r, {0.5, 0.5, 0.5, 1, kAbsent, kAbsent, 0, 1, 1, 1, kAbsent, kAbsent});
  // A crowd-only category has no non-ignored GT: it is skipped (-1), not 0.
  CocoEvaluator only_crowd;
  add(only_crowd, 1, {gt(1, 20, 20, 40, 40, 1600, true)}, {det(1, 30, 30, 10, 10, 0.9f)});
  expect_stats(only_crowd.compute(), {kAbsent, kAbsent, kAbsent, kAbsent, kAbsent, kAbsent, kAbsent, kAbsent,
                                      kAbsent, kAbsent, kAbsent, kAbsent});
}

TEST(CocoMap, GreedyMatchingTakesTheBestFreeRegularGroundTruth) {
  // GT1 [0,0,10,10], GT2 [5,0,10,10]. det1 (0.9) [3,0,10,10]: IoU with GT1 70/130 = 0.538, with
  // GT2 80/120 = 0.667: it takes the best, GT2, at the thresholds <= 0.667 (.50 .55 .60 .65).
  // det2 (0.8) [5,0,10,10]: IoU 1 with GT2, 50/150 with GT1.
  //   4 thresholds .50-.65: det1 TP (GT2), det2 finds GT2 taken and GT1 too far: FP.
  //     tp = [1,1], fp = [0,1], npig 2: rc = [1/2, 1/2], pr = [1, 1/2]: r_0..r_50 get 1: 51/101.
  //   6 thresholds .70-.95: det1 FP, det2 TP: rc = [0, 1/2], pr -> [1/2, 1/2]: 25.5/101.
  // AP = (4 * 51 + 6 * 25.5) / 1010 = 357/1010. (Taking the first GT above the threshold instead
  // of the best would give det1 GT1 and det2 GT2 at .50: AP 1 there.)
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 10, 10), gt(1, 5, 0, 10, 10)}, {det(1, 3, 0, 10, 10, 0.9f), det(1, 5, 0, 10, 10, 0.8f)});
  const CocoResult r = ev.compute();
  EXPECT_NEAR(r.map(), 357.0 / 1010.0, kTol);
  EXPECT_NEAR(r.stats[metrics::kCocoAP50], 51.0 / 101.0, kTol);
  EXPECT_NEAR(r.stats[metrics::kCocoAP75], 25.5 / 101.0, kTol);
  // Once on a regular GT, matching stops at the ignored ones: a detection on regular GT [0,0,10,10]
  // (IoU 1) and inside crowd GT [0,0,20,20] (crowd IoU 100/100 = 1, listed after the regular
  // one) stays a TP (AP 1); were the crowd allowed to replace it on the equal IoU, the detection
  // would be ignored and the GT missed (AP 0).
  CocoEvaluator both;
  add(both, 1, {gt(1, 0, 0, 20, 20, 400, true), gt(1, 0, 0, 10, 10)}, {det(1, 0, 0, 10, 10, 0.9f)});
  EXPECT_NEAR(both.compute().map(), 1.0, kTol);
}

TEST(CocoMap, AreaRangesUseTheAnnotationAreaField) {
  // GT box 100x100 (w*h = 10000, large) whose `area` field says 500 (small): it is a small object.
  // Detections: perfect tp (0.90), a 10x10 FP (0.95, area 100: small), a 50x50 FP (0.99, area
  // 2500: medium).
  //   all:   order FPm, FPs, tp: tp = [0,0,1], fp = [1,2,2], rc = [0,0,1], pr at tp 1/3 -> AP 1/3.
  //   small: FPm is unmatched and outside [0, 32^2] -> ignored; FPs, tp: pr [0, 1/2] -> 1/2.
  //   medium, large: no non-ignored GT (the GT's area is 500) -> -1; a recomputed area would
  //   have made APl defined and APs -1.
  // AR1: the first detection per image and category is FPm: 0 (small: ignored, still 0).
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 100, 100, 500)},
      {det(1, 0, 0, 100, 100, 0.90f), det(1, 300, 300, 10, 10, 0.95f), det(1, 400, 400, 50, 50, 0.99f)});
  const double third = 1.0 / 3.0;
  expect_stats(ev.compute(), {third, third, third, 0.5, kAbsent, kAbsent, 0, 1, 1, 1, kAbsent, kAbsent});
}

TEST(CocoMap, MaxDetsCountPerImagePerCategory) {
  // One image, 101 GT (2x2 boxes on a grid, small) and 101 perfect detections, scores
  // descending: the 101st is cut by maxDets 100. rc reaches 100/101 = 0.990099 with precision 1:
  // r_0..r_99 (0.99 <= 0.990099) get 1, r_100 = 1 gets 0: AP = 100/101; AR100 = 100/101,
  // AR10 = 10/101, AR1 = 1/101.
  std::vector<CocoGroundTruth> g;
  std::vector<CocoDetection> d;
  for (int i = 0; i < 101; ++i) {
    const float x = 10.0f * static_cast<float>(i % 11), y = 10.0f * static_cast<float>(i / 11);
    g.push_back(gt(5, x, y, 2, 2));
    d.push_back(det(5, x, y, 2, 2, 1.0f - 0.001f * static_cast<float>(i)));
  }
  CocoEvaluator ev;
  add(ev, 1, g, d);
  const double n = 101;
  expect_stats(ev.compute(), {100 / n, 100 / n, 100 / n, 100 / n, kAbsent, kAbsent, 1 / n, 10 / n, 100 / n,
                              100 / n, kAbsent, kAbsent});
  // 60 + 60 of one category on two images, and 60 + 60 of two categories on one image: nothing
  // is cut (the limit is per image and per category), AP = AR100 = 1. AR10: 10 of 60 per image
  // and category = 1/6.
  g.resize(60);
  d.resize(60);
  CocoEvaluator two_images, two_categories;
  add(two_images, 1, g, d);
  add(two_images, 2, g, d);
  std::vector<CocoGroundTruth> g2 = g;
  std::vector<CocoDetection> d2 = d;
  for (auto& o : g2) o.category_id = 6;
  for (auto& o : d2) o.category_id = 6;
  g2.insert(g2.end(), g.begin(), g.end());
  d2.insert(d2.end(), d.begin(), d.end());
  add(two_categories, 1, g2, d2);
  for (const CocoResult& r : {two_images.compute(), two_categories.compute()}) {
    EXPECT_NEAR(r.map(), 1.0, kTol);
    EXPECT_NEAR(r.stats[metrics::kCocoAR100], 1.0, kTol);
    EXPECT_NEAR(r.stats[metrics::kCocoAR10], 1.0 / 6.0, kTol);
  }
}

TEST(CocoMap, CategoryWithoutGroundTruthIsSkippedAndOneWithoutDetectionsCountsZero) {
  // Category 1: perfect (AP 1). Category 2: GT, no detection (AP 0, recall 0). Category 9:
  // detections only: not a category of the evaluation (COCOeval: -1, skipped). Mean AP = 1/2.
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 50, 50), gt(2, 100, 100, 50, 50)},
      {det(1, 0, 0, 50, 50, 0.6f), det(9, 100, 100, 50, 50, 0.99f), det(9, 0, 0, 50, 50, 0.98f)});
  const CocoResult r = ev.compute();
  expect_stats(r, {0.5, 0.5, 0.5, kAbsent, 0.5, kAbsent, 0.5, 0.5, 0.5, kAbsent, 0.5, kAbsent});
  EXPECT_EQ(r.category_ids, (std::vector<std::int64_t>{1, 2}));
  ASSERT_EQ(r.category_ap.size(), 2u);
  EXPECT_NEAR(r.category_ap[0], 1.0, kTol);
  EXPECT_EQ(r.category_ap[1], 0.0);
  EXPECT_EQ(r.detections, 1) << "category 9's detections are not evaluated";
}

TEST(CocoMap, TiedScoresKeepImageIdThenCallOrder) {
  // Across images: image 1 has a FP at 0.5, image 2 a TP at 0.5 (each image has one GT). The
  // stable sort keeps image-id order (not the order the images were added): FP, TP:
  // tp = [0,1], fp = [1,1], rc = [0, 1/2], pr -> [1/2, 1/2]; r_0..r_50 get 1/2: AP = 25.5/101.
  // (TP first would give rc = [1/2, 1/2], pr = [1, 1/2] -> AP = 51/101.)
  CocoEvaluator across;
  add(across, 2, {gt(1, 0, 0, 50, 50)}, {det(1, 0, 0, 50, 50, 0.5f)});
  add(across, 1, {gt(1, 0, 0, 50, 50)}, {det(1, 300, 300, 50, 50, 0.5f)});
  EXPECT_NEAR(across.compute().map(), 25.5 / 101.0, kTol);
  // Within one image: detections tied at 0.5 keep the order they were added in.
  //   FP added first: tp = [0,1], fp = [1,1], rc = [0,1], pr -> [1/2, 1/2]: AP 1/2.
  //   TP added first: rc = [1,1], pr = [1, 1/2]: every r_i finds index 0: AP 1.
  CocoEvaluator fp_first, tp_first;
  add(fp_first, 1, {gt(1, 0, 0, 50, 50)}, {det(1, 300, 300, 50, 50, 0.5f), det(1, 0, 0, 50, 50, 0.5f)});
  add(tp_first, 1, {gt(1, 0, 0, 50, 50)}, {det(1, 0, 0, 50, 50, 0.5f), det(1, 300, 300, 50, 50, 0.5f)});
  EXPECT_NEAR(fp_first.compute().map(), 0.5, kTol);
  EXPECT_NEAR(tp_first.compute().map(), 1.0, kTol);
}

TEST(CocoMap, ImagesWithoutDetectionsOrWithoutObjectsCount) {
  // Image 1: one GT, a perfect detection (0.8). Image 2: no objects, a detection (0.9): a FP.
  // Image 3: one GT, no detection: a miss. npig = 2; order FP, TP: rc = [0, 1/2],
  // pr -> [1/2, 1/2]: r_0..r_50 get 1/2: AP = 25.5/101; AR = 1/2.
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 50, 50)}, {det(1, 0, 0, 50, 50, 0.8f)});
  add(ev, 2, {}, {det(1, 0, 0, 50, 50, 0.9f)});
  add(ev, 3, {gt(1, 0, 0, 50, 50)}, {});
  const CocoResult r = ev.compute();
  EXPECT_NEAR(r.map(), 25.5 / 101.0, kTol);
  EXPECT_NEAR(r.stats[metrics::kCocoAR100], 0.5, kTol);
  EXPECT_EQ(r.images, 3);
  // Detections of an image never given ground truth: COCO.loadRes refuses them, so does compute().
  ev.add_detections(4, std::vector<CocoDetection>{det(1, 0, 0, 5, 5, 0.1f)});
  EXPECT_THROW(ev.compute(), InvalidArgument);
}

TEST(CocoMap, RefusesBadInput) {
  CocoEvaluator ev;
  add(ev, 1, {gt(1, 0, 0, 5, 5)}, {});
  EXPECT_THROW(ev.add_ground_truth(1, std::vector<CocoGroundTruth>{}), InvalidArgument) << "image 1 twice";
  EXPECT_THROW(ev.add_ground_truth(2, std::vector<CocoGroundTruth>{gt(1, 0, 0, -1, 5)}), InvalidArgument);
  EXPECT_THROW(ev.add_ground_truth(3, std::vector<CocoGroundTruth>{gt(1, 0, 0, 5, NAN)}), InvalidArgument);
  EXPECT_THROW(ev.add_detections(1, std::vector<CocoDetection>{det(1, 0, 0, 5, 5, NAN)}), InvalidArgument);
  EXPECT_EQ(ev.images(), 1);
  EXPECT_EQ(ev.ground_truths(), 1);
  EXPECT_EQ(ev.detections(), 0);
  ev.reset();
  EXPECT_EQ(ev.images(), 0);
  const CocoResult empty = ev.compute();
  for (double s : empty.stats) EXPECT_EQ(s, -1.0) << "no ground truth at all";
}

// ---- random data: pycocotools, the numpy port, and ranks ----

namespace {

struct Scene {
  std::int64_t id;
  std::vector<CocoGroundTruth> gts;
  std::vector<CocoDetection> dts;
};

// A few hundred images over 6 categories (5 with GT, category 6 detections only): jittered true
// positives, duplicates, random false positives, overlapping GT (contested matches), crowd GT, `area` fields that differ from w*h,
// scores quantised so that ties happen, images without objects or without detections, and one
// image with 130 detections of one category (the maxDets cut).
std::vector<Scene> random_scenes(int n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<Scene> scenes;
  for (int i = 0; i < n; ++i) {
    Scene s;
    s.id = 1000 + 7 * i;
    const int objects = i % 17 == 3 ? 0 : static_cast<int>(u(rng) * 6);
    for (int o = 0; o < objects; ++o) {
      float w = 4 + u(rng) * (u(rng) < 0.5f ? 30 : 200), h = 4 + u(rng) * (u(rng) < 0.5f ? 30 : 200);
      float x = u(rng) * 400, y = u(rng) * 400;
      int cat = 1 + static_cast<int>(u(rng) * 5);
      if (o > 0 && u(rng) < 0.4f) {  // an overlapping neighbour of the same category: contested matches
        const CocoGroundTruth& prev = s.gts.back();
        x = prev.box[0] + (u(rng) - 0.5f) * 0.3f * prev.box[2];
        y = prev.box[1] + (u(rng) - 0.5f) * 0.3f * prev.box[3];
        cat = static_cast<int>(prev.category_id);
        w = prev.box[2] * (0.85f + 0.3f * u(rng));
        h = prev.box[3] * (0.85f + 0.3f * u(rng));
      }
      const float area = u(rng) < 0.2f ? w * h * (0.3f + u(rng)) : w * h;
      s.gts.push_back(gt(cat, x, y, w, h, area, u(rng) < 0.08f));
    }
    if (i % 13 != 5) {
      for (const auto& g : s.gts) {
        const int copies = static_cast<int>(u(rng) * 3);
        for (int c = 0; c < copies; ++c) {
          const float j = 0.25f * u(rng);
          float score = u(rng);
          if (u(rng) < 0.3f) score = std::round(score * 10) / 10;
          s.dts.push_back(det(g.category_id, g.box[0] + j * g.box[2] * (u(rng) - 0.5f),
                              g.box[1] + j * g.box[3] * (u(rng) - 0.5f), g.box[2] * (1 + j * (u(rng) - 0.5f)),
                              g.box[3] * (1 + j * (u(rng) - 0.5f)), score));
        }
      }
      const int fps = static_cast<int>(u(rng) * 4);
      for (int f = 0; f < fps; ++f)
        s.dts.push_back(det(1 + static_cast<int>(u(rng) * 6), u(rng) * 400, u(rng) * 400, 5 + u(rng) * 150,
                            5 + u(rng) * 150, std::round(u(rng) * 20) / 20));
    }
    if (i == 11) {
      s.gts.push_back(gt(2, 50, 50, 60, 60));
      for (int k = 0; k < 130; ++k)
        s.dts.push_back(det(2, 50 + u(rng) * 20, 50 + u(rng) * 20, 40 + u(rng) * 30, 40 + u(rng) * 30, u(rng)));
    }
    scenes.push_back(std::move(s));
  }
  return scenes;
}

void add_scenes(CocoEvaluator& ev, const std::vector<Scene>& scenes) {
  for (const Scene& s : scenes) add(ev, s.id, s.gts, s.dts);
}

// The scenes as tests/metrics/coco_reference.py reads them; floats written as the doubles they
// are (17 digits), so Python sees exactly our values.
std::string write_json(const std::vector<Scene>& scenes) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("coco_map_test_" + std::to_string(::getpid()) + ".json")).string();
  FILE* f = std::fopen(path.c_str(), "w");
  auto num = [&](double v) { std::fprintf(f, "%.17g", v); };
  std::fprintf(f, "{\"images\": [");
  for (std::size_t i = 0; i < scenes.size(); ++i) std::fprintf(f, "%s%lld", i ? ", " : "", static_cast<long long>(scenes[i].id));
  std::fprintf(f, "], \"categories\": [1, 2, 3, 4, 5, 6], \"annotations\": [");
  int ann = 0;
  for (const Scene& s : scenes)
    for (const auto& g : s.gts) {
      std::fprintf(f, "%s{\"id\": %d, \"image_id\": %lld, \"category_id\": %lld, \"bbox\": [", ann ? ", " : "", ann + 1,
                   static_cast<long long>(s.id), static_cast<long long>(g.category_id));
      for (int k = 0; k < 4; ++k) {
        if (k) std::fprintf(f, ", ");
        num(g.box[k]);
      }
      std::fprintf(f, "], \"area\": ");
      num(g.area);
      std::fprintf(f, ", \"iscrowd\": %d}", g.iscrowd ? 1 : 0);
      ++ann;
    }
  std::fprintf(f, "], \"detections\": [");
  bool first = true;
  for (const Scene& s : scenes)
    for (const auto& d : s.dts) {
      std::fprintf(f, "%s{\"image_id\": %lld, \"category_id\": %lld, \"bbox\": [", first ? "" : ", ",
                   static_cast<long long>(s.id), static_cast<long long>(d.category_id));
      for (int k = 0; k < 4; ++k) {
        if (k) std::fprintf(f, ", ");
        num(d.box[k]);
      }
      std::fprintf(f, "], \"score\": ");
      num(d.score);
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

void cross_check(const char* impl) {
  const std::vector<Scene> scenes = random_scenes(300, 20240611u);
  CocoEvaluator ev;
  add_scenes(ev, scenes);
  const CocoResult ours = ev.compute();
  const std::string path = write_json(scenes);
  const std::vector<double> theirs = test_support::run_peer("/usr/bin/python3 " + std::string(BENCHHOST_SOURCE_DIR) +
                                              "/tests/metrics/coco_reference.py " + impl + " " + path);
  std::remove(path.c_str());
  ASSERT_EQ(theirs.size(), 12u);
  for (int i = 0; i < 12; ++i) {
    std::printf("stat %2d: benchhost %.15f  %s %.15f\n", i, ours.stats[i], impl, theirs[i]);
    EXPECT_NEAR(ours.stats[i], theirs[i], 1e-9) << "stat " << i;
  }
  // The data exercises what it should: several categories defined, some slices non-trivial.
  EXPECT_GT(ours.map(), 0.05);
  EXPECT_LT(ours.map(), 0.95);
  EXPECT_EQ(ours.category_ids.size(), 5u);
}

}  // namespace

TEST(CocoMap, MatchesPycocotoolsOnRandomScenes) {
  if (!python_has("pycocotools, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no pycocotools (Debian 12 has no python3-pycocotools): pycocotools "
                    "cross-check skipped; CocoMap.MatchesNumpyPortOnRandomScenes still runs";
  cross_check("pycocotools");
}

TEST(CocoMap, MatchesNumpyPortOnRandomScenes) {
  if (!python_has("numpy")) GTEST_SKIP() << "/usr/bin/python3 has no numpy: numpy COCOeval port skipped";
  cross_check("port");
}

TEST(CocoMap, TwoRanksEqualOneRank) {
  const std::vector<Scene> scenes = random_scenes(200, 7u);
  CocoEvaluator whole;
  add_scenes(whole, scenes);
  const CocoResult want = whole.compute();
  // Rank 0 takes the even scenes, rank 1 the odd ones; both also hold scene 3 (a sampler's padding
  // repeat), which must count once.
  test_support::Group group(2);
  std::array<CocoResult, 2> got;
  std::array<std::thread, 2> threads;
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      test_support::ThreadComm comm(group, r);
      CocoEvaluator ev;
      for (std::size_t i = 0; i < scenes.size(); ++i)
        if (static_cast<int>(i % 2) == r || i == 3) add(ev, scenes[i].id, scenes[i].gts, scenes[i].dts);
      got[r] = ev.compute(&comm);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 12; ++i) EXPECT_EQ(got[r].stats[i], want.stats[i]) << "rank " << r << " stat " << i;
    EXPECT_EQ(got[r].images, want.images);
    EXPECT_EQ(got[r].detections, want.detections);
    EXPECT_EQ(got[r].category_ap, want.category_ap);
  }
  // A rank with detections of an image it gave no ground truth: every rank throws.
  std::array<int, 2> threw{};
  for (int r = 0; r < 2; ++r)
    threads[r] = std::thread([&, r] {
      test_support::ThreadComm comm(group, r);
      CocoEvaluator ev;
      add(ev, 10 + r, {gt(1, 0, 0, 5, 5)}, {det(1, 0, 0, 5, 5, 0.5f)});
      if (r == 1) ev.add_detections(10, std::vector<CocoDetection>{det(1, 0, 0, 5, 5, 0.5f)});
      try {
        ev.compute(&comm);
      } catch (const InvalidArgument&) {
        threw[r] = 1;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(threw, (std::array<int, 2>{1, 1}));
}

TEST(CocoMap, ScalesToManyDetections) {
  // 2,000 images x ~300 detections over 50 categories (the OpenImages validation set is 24,781
  // images like these): evaluate + accumulate + summarize should take seconds, not minutes.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  CocoEvaluator ev;
  std::vector<CocoGroundTruth> g;
  std::vector<CocoDetection> d;
  for (int i = 0; i < 2000; ++i) {
    g.clear();
    d.clear();
    for (int o = 0; o < 8; ++o) g.push_back(gt(static_cast<int>(u(rng) * 50), u(rng) * 600, u(rng) * 600, 10 + u(rng) * 200, 10 + u(rng) * 200));
    for (int k = 0; k < 300; ++k) {
      const auto& t = g[static_cast<std::size_t>(k) % g.size()];
      d.push_back(k < 40 ? det(t.category_id, t.box[0] + u(rng) * 10, t.box[1] + u(rng) * 10, t.box[2], t.box[3], u(rng))
                         : det(static_cast<int>(u(rng) * 50), u(rng) * 600, u(rng) * 600, 10 + u(rng) * 200, 10 + u(rng) * 200, u(rng) * 0.5f));
    }
    add(ev, i, g, d);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const CocoResult r = ev.compute();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%lld images, %lld detections evaluated: %.2f s, mAP %.4f\n", static_cast<long long>(r.images),
              static_cast<long long>(r.detections), s, r.map());
  EXPECT_EQ(r.images, 2000);
  EXPECT_GT(r.map(), 0.0);
  EXPECT_LT(s, 60.0);
}
