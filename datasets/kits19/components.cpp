// 6-connected component labelling by union-find over a raster scan. See components.hpp.
#include "components.hpp"

#include <algorithm>
#include <numeric>

#include "benchhost/error.hpp"

namespace benchhost::kits19 {

namespace {

// Union-find over provisional labels; the smaller root wins, so a root is always the
// provisional label first met in raster order within its set.
struct DisjointSets {
  std::vector<std::int32_t> parent;
  std::int32_t add() {
    parent.push_back(static_cast<std::int32_t>(parent.size()));
    return static_cast<std::int32_t>(parent.size()) - 1;
  }
  std::int32_t find(std::int32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  }
  void unite(std::int32_t a, std::int32_t b) {
    a = find(a);
    b = find(b);
    if (a == b) return;
    if (a < b) parent[b] = a;
    else parent[a] = b;
  }
};

}  // namespace

Components label_components(std::span<const std::uint8_t> mask, const std::array<std::int64_t, 3>& shape,
                            std::uint8_t value) {
  const std::int64_t D = shape[0], H = shape[1], W = shape[2];
  BH_CHECK_AS(InvalidArgument, D >= 0 && H >= 0 && W >= 0 && static_cast<std::int64_t>(mask.size()) == D * H * W,
              "label_components: a mask of {} voxels for shape [{}, {}, {}]", mask.size(), D, H, W);
  Components out;
  out.labels.assign(mask.size(), 0);
  std::vector<std::int32_t>& lab = out.labels;  // provisional labels 1.. first (0 = outside)
  DisjointSets sets;
  sets.add();  // 0: background, never united
  const std::int64_t plane = H * W;
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t row = d * plane + h * W;
      for (std::int64_t w = 0; w < W; ++w) {
        const std::int64_t i = row + w;
        if (mask[i] != value) continue;
        // The three neighbours already scanned under the cross structure.
        const std::int32_t a = w > 0 ? lab[i - 1] : 0;
        const std::int32_t b = h > 0 ? lab[i - W] : 0;
        const std::int32_t c = d > 0 ? lab[i - plane] : 0;
        std::int32_t l = a ? a : b ? b : c;
        if (l == 0) {
          l = sets.add();
        } else {
          if (a) sets.unite(l, a);
          if (b) sets.unite(l, b);
          if (c) sets.unite(l, c);
        }
        lab[i] = l;
      }
    }
  // Final numbers in raster order of each set's first voxel: roots are the smallest provisional
  // label of their set, and provisional labels were handed out in raster order.
  std::vector<std::int32_t> final_of(sets.parent.size(), 0);
  std::int32_t next = 0;
  for (std::size_t p = 1; p < sets.parent.size(); ++p) {
    const std::int32_t r = sets.find(static_cast<std::int32_t>(p));
    if (r == static_cast<std::int32_t>(p)) final_of[p] = ++next;
  }
  for (std::size_t p = 1; p < sets.parent.size(); ++p) final_of[p] = final_of[sets.find(static_cast<std::int32_t>(p))];
  out.boxes.resize(static_cast<std::size_t>(next));
  out.sizes.assign(static_cast<std::size_t>(next), 0);
  std::vector<bool> seen(static_cast<std::size_t>(next), false);
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t w = 0; w < W; ++w) {
        const std::int64_t i = d * plane + h * W + w;
        if (lab[i] == 0) continue;
        const std::int32_t f = final_of[lab[i]];
        lab[i] = f;
        const std::size_t k = static_cast<std::size_t>(f - 1);
        Box& box = out.boxes[k];
        const std::array<std::int64_t, 3> at{d, h, w};
        if (!seen[k]) {
          seen[k] = true;
          for (int a = 0; a < 3; ++a) box.lo[a] = at[a], box.hi[a] = at[a] + 1;
        } else {
          for (int a = 0; a < 3; ++a) {
            box.lo[a] = std::min(box.lo[a], at[a]);
            box.hi[a] = std::max(box.hi[a], at[a] + 1);
          }
        }
        ++out.sizes[k];
      }
  return out;
}

std::vector<Box> component_boxes(std::span<const std::uint8_t> mask, const std::array<std::int64_t, 3>& shape,
                                 std::uint8_t value) {
  return label_components(mask, shape, value).boxes;
}

std::vector<Box> largest_boxes(const std::vector<Box>& boxes, int k) {
  std::vector<std::size_t> order(boxes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return boxes[a].volume() < boxes[b].volume(); });
  const std::size_t keep = std::min(order.size(), static_cast<std::size_t>(std::max(k, 0)));
  std::vector<Box> out;
  for (std::size_t i = order.size() - keep; i < order.size(); ++i) out.push_back(boxes[order[i]]);
  return out;
}

}  // namespace benchhost::kits19
