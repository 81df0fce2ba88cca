#pragma once
/// @file datasets/coco/planted.hpp  Drawing code shared by the planted-shapes generators
/// (Note [Planted shapes] in synthetic.hpp, Note [Planted polygons] in synthetic_coco2017.hpp):
/// the image size and background, the object colours and painting into an RGB canvas. Internal to
/// benchhost_coco (not installed, not used by plugins).
///
/// Every function draws from the Rng it is given in a fixed order, so a generator that calls them
/// in the same sequence writes the same bytes for the same (seed, split, index).

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::coco::planted {

/// Uniform integer in [lo, hi].
int uniform_int(Rng& rng, int lo, int hi);

/// Tight box of painted pixels, inclusive extents; empty() until a pixel is added.
struct Box {
  int x0 = 1 << 30, y0 = 1 << 30, x1 = -1, y1 = -1;
  void add(int x, int y) {
    x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x), y1 = std::max(y1, y);
  }
  void add(const Box& b) {
    if (!b.empty()) add(b.x0, b.y0), add(b.x1, b.y1);
  }
  bool empty() const { return x1 < 0; }
  /// COCO's [x, y, w, h] of the pixels covered.
  std::array<float, 4> xywh() const {
    return {static_cast<float>(x0), static_cast<float>(y0), static_cast<float>(x1 - x0 + 1),
            static_cast<float>(y1 - y0 + 1)};
  }
};

/// An RGB image being drawn: HWC u8.
struct Canvas {
  int h = 0, w = 0;
  std::vector<std::uint8_t> px;

  void set(int x, int y, const std::array<int, 3>& colour) {
    std::uint8_t* p = px.data() + (static_cast<std::size_t>(y) * w + x) * 3;
    for (int k = 0; k < 3; ++k) p[k] = static_cast<std::uint8_t>(colour[k]);
  }
  /// Paint the pixels (left + j, top + i), 0 <= i, j < s, whose centre (j + 0.5, i + 0.5) `inside`
  /// accepts (pixels outside the image are skipped); returns their tight box.
  template <class Inside>
  Box paint(int left, int top, int s, const std::array<int, 3>& colour, Inside&& inside) {
    Box b;
    for (int i = 0; i < s; ++i)
      for (int j = 0; j < s; ++j) {
        if (!inside(j + 0.5, i + 0.5)) continue;
        const int y = top + i, x = left + j;
        if (y < 0 || y >= h || x < 0 || x >= w) continue;
        set(x, y, colour);
        b.add(x, y);
      }
    return b;
  }
  /// Paint every pixel set in `mask` (u8, h x w, row-major); returns their tight box.
  Box paint_mask(const std::uint8_t* mask, const std::array<int, 3>& colour);
  /// The pixels as u8 [h, w, 3].
  Tensor pixels() const;
};

/// A canvas of height and width each uniform in [min_size, max_size], filled with the background
/// of Note [Planted shapes] (base colour, linear gradient, pixel noise); `base` receives the base
/// colour (object colours are drawn away from it).
Canvas background(Rng& rng, int min_size, int max_size, std::array<int, 3>& base);

/// An object colour at least 80 (max over channels) away from `base` (32 tries, then the last).
std::array<int, 3> object_colour(Rng& rng, const std::array<int, 3>& base);

/// Write `bytes` to `path` (DataError "<tool>: cannot write <path>").
void write_bytes(const char* tool, const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes);

/// Create `root` atomically: `fill` writes into a fresh staging directory beside it
/// (".<name>.tmp.<pid>"), which is then renamed to `root`; on any exception the staging directory
/// is removed and the exception passed on. InvalidArgument when `root` exists, DataError when the
/// directories cannot be made or renamed (messages start with `tool`).
void write_atomically(const char* tool, const std::string& root, const std::function<void(const std::filesystem::path&)>& fill);

}  // namespace benchhost::coco::planted
