// Connected components: against a brute-force flood fill and against scipy.ndimage (the
// reference's own labelling), on random masks.
#include <gtest/gtest.h>

#include <deque>

#include "benchhost/data/npy.hpp"
#include "benchhost/random.hpp"
#include "common.hpp"
#include "components.hpp"

using namespace benchhost;
using namespace benchhost::kits19;

namespace {

std::vector<std::uint8_t> random_mask(Rng& rng, const std::array<std::int64_t, 3>& s, float density) {
  std::vector<std::uint8_t> m(static_cast<std::size_t>(s[0] * s[1] * s[2]));
  for (auto& v : m) v = rng.uniform() < density ? static_cast<std::uint8_t>(1 + rng.below(2)) : 0;
  return m;
}

// Breadth-first flood fill from each unlabelled voxel in raster order, 6 neighbours.
std::vector<std::int32_t> flood_fill(const std::vector<std::uint8_t>& m, const std::array<std::int64_t, 3>& s,
                                     std::uint8_t value) {
  std::vector<std::int32_t> lab(m.size(), 0);
  std::int32_t next = 0;
  for (std::size_t start = 0; start < m.size(); ++start) {
    if (m[start] != value || lab[start] != 0) continue;
    lab[start] = ++next;
    std::deque<std::int64_t> queue{static_cast<std::int64_t>(start)};
    while (!queue.empty()) {
      const std::int64_t i = queue.front();
      queue.pop_front();
      const std::int64_t d = i / (s[1] * s[2]), h = (i / s[2]) % s[1], w = i % s[2];
      const std::int64_t nb[6][3] = {{d - 1, h, w}, {d + 1, h, w}, {d, h - 1, w}, {d, h + 1, w}, {d, h, w - 1}, {d, h, w + 1}};
      for (const auto& q : nb) {
        if (q[0] < 0 || q[1] < 0 || q[2] < 0 || q[0] >= s[0] || q[1] >= s[1] || q[2] >= s[2]) continue;
        const std::int64_t j = (q[0] * s[1] + q[1]) * s[2] + q[2];
        if (m[static_cast<std::size_t>(j)] == value && lab[static_cast<std::size_t>(j)] == 0) {
          lab[static_cast<std::size_t>(j)] = next;
          queue.push_back(j);
        }
      }
    }
  }
  return lab;
}

}  // namespace

TEST(Kits19Components, MatchesFloodFill) {
  Rng rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const std::array<std::int64_t, 3> s{1 + static_cast<std::int64_t>(rng.below(9)), 1 + static_cast<std::int64_t>(rng.below(9)),
                                        1 + static_cast<std::int64_t>(rng.below(9))};
    const auto m = random_mask(rng, s, 0.2f + 0.5f * rng.uniform());
    for (std::uint8_t value : {1, 2}) {
      const Components c = label_components(m, s, value);
      const auto want = flood_fill(m, s, value);
      ASSERT_EQ(c.labels, want) << "trial " << trial;
      // Boxes and sizes from the labels directly.
      for (std::int64_t k = 0; k < c.count(); ++k) {
        Box b{{1 << 30, 1 << 30, 1 << 30}, {-1, -1, -1}};
        std::int64_t size = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
          if (want[i] != k + 1) continue;
          ++size;
          const std::array<std::int64_t, 3> at{static_cast<std::int64_t>(i) / (s[1] * s[2]),
                                               (static_cast<std::int64_t>(i) / s[2]) % s[1], static_cast<std::int64_t>(i) % s[2]};
          for (int a = 0; a < 3; ++a) b.lo[a] = std::min(b.lo[a], at[a]), b.hi[a] = std::max(b.hi[a], at[a] + 1);
        }
        EXPECT_EQ(c.boxes[static_cast<std::size_t>(k)], b);
        EXPECT_EQ(c.sizes[static_cast<std::size_t>(k)], size);
      }
    }
  }
}

// Diagonal neighbours are separate components (the cross structure, not 26-connectivity).
TEST(Kits19Components, SixConnectivity) {
  std::vector<std::uint8_t> m(27, 0);
  m[0] = m[13] = m[26] = 1;  // (0,0,0), (1,1,1), (2,2,2): only corners touch
  m[1] = 1;                  // (0,0,1) joins (0,0,0)
  const Components c = label_components(m, {3, 3, 3}, 1);
  EXPECT_EQ(c.count(), 3);
  EXPECT_EQ(c.labels[0], 1);
  EXPECT_EQ(c.labels[1], 1);
  EXPECT_EQ(c.labels[13], 2);
  EXPECT_EQ(c.labels[26], 3);
}

// Ranked by bounding-box volume, not voxel count; ascending; ties to the later component.
TEST(Kits19Components, LargestBoxesOrder) {
  const Box a{{0, 0, 0}, {3, 3, 1}};   // volume 9
  const Box b{{0, 0, 0}, {2, 2, 2}};   // volume 8
  const Box c{{5, 5, 5}, {8, 8, 6}};   // volume 9 (ties with a, numbered later)
  const Box d{{0, 0, 0}, {1, 1, 1}};   // volume 1
  const auto top = largest_boxes({a, b, c, d}, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0], a);
  EXPECT_EQ(top[1], c);
  EXPECT_EQ(largest_boxes({d}, 2).size(), 1u);
  EXPECT_TRUE(largest_boxes({}, 2).empty());
  // A long thin component with few voxels outranks a compact one with many.
  std::vector<std::uint8_t> m(10 * 10 * 10, 0);
  for (int w = 0; w < 10; ++w) m[static_cast<std::size_t>(w)] = 1;                    // line along w: box 1x1x10
  for (int d = 0; d < 10; ++d) m[static_cast<std::size_t>(d * 100 + 10 * 9 + 9)] = 1;  // line along d: box 10x1x1
  for (int d = 4; d < 7; ++d)
    for (int h = 4; h < 7; ++h)
      for (int w = 4; w < 6; ++w) m[static_cast<std::size_t>(d * 100 + h * 10 + w)] = 1;  // 18 voxels, box 18
  const auto boxes = component_boxes(m, {10, 10, 10}, 1);
  ASSERT_EQ(boxes.size(), 3u);
  const auto kept = largest_boxes(boxes, 2);
  EXPECT_EQ(kept[0].volume(), 10);
  EXPECT_EQ(kept[1].volume(), 18);
}

TEST(Kits19Components, MatchesScipy) {
  if (!test::have_numpy_scipy()) GTEST_SKIP() << "/usr/bin/python3 with numpy and scipy is not installed";
  test::TempDir dir("cc");
  Rng rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    const std::array<std::int64_t, 3> s{7 + trial, 12, 9 + 2 * trial};
    const auto m = random_mask(rng, s, 0.25f + 0.08f * static_cast<float>(trial));
    Tensor t = Tensor::empty({s[0], s[1], s[2]}, DType::u8);
    std::copy(m.begin(), m.end(), t.data<std::uint8_t>());
    data::write_npy(dir / "m.npy", t);
    for (int value : {1, 2}) {
      const std::string cmd = fmt::format("/usr/bin/python3 {} {} {} {} {} {}", test::script("components_ref.py"),
                                          dir / "m.npy", value, dir / "l.npy", dir / "b.npy", dir / "t.npy");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
      const Components c = label_components(m, s, static_cast<std::uint8_t>(value));
      const Tensor labels = data::read_npy(dir / "l.npy");
      ASSERT_EQ(labels.numel(), static_cast<std::int64_t>(c.labels.size()));
      EXPECT_TRUE(std::equal(c.labels.begin(), c.labels.end(), labels.data<std::int32_t>())) << "trial " << trial;
      auto check = [&](const Tensor& want, const std::vector<Box>& got) {
        ASSERT_EQ(want.size(0), static_cast<std::int64_t>(got.size()));
        const auto* p = want.data<std::int64_t>();
        for (std::size_t k = 0; k < got.size(); ++k)
          for (int a = 0; a < 3; ++a) {
            EXPECT_EQ(p[k * 6 + 2 * a], got[k].lo[a]);
            EXPECT_EQ(p[k * 6 + 2 * a + 1], got[k].hi[a]);
          }
      };
      check(data::read_npy(dir / "b.npy"), c.boxes);
      check(data::read_npy(dir / "t.npy"), largest_boxes(c.boxes, 2));
    }
  }
}
