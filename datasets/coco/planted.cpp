// Drawing code shared by the planted-shapes generators (planted.hpp).
#include "planted.hpp"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "benchhost/error.hpp"

namespace benchhost::coco::planted {

int uniform_int(Rng& rng, int lo, int hi) {
  return lo + static_cast<int>(rng.below(static_cast<std::uint64_t>(hi - lo + 1)));
}

Box Canvas::paint_mask(const std::uint8_t* mask, const std::array<int, 3>& colour) {
  Box b;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (mask[static_cast<std::size_t>(y) * w + x]) {
        set(x, y, colour);
        b.add(x, y);
      }
  return b;
}

Tensor Canvas::pixels() const {
  Tensor t = Tensor::empty({h, w, 3}, DType::u8);
  std::copy(px.begin(), px.end(), t.data<std::uint8_t>());
  return t;
}

Canvas background(Rng& rng, int min_size, int max_size, std::array<int, 3>& base) {
  Canvas cv;
  cv.h = uniform_int(rng, min_size, max_size);
  cv.w = uniform_int(rng, min_size, max_size);
  cv.px.resize(static_cast<std::size_t>(cv.h) * cv.w * 3);
  std::array<double, 3> grad{};
  for (int k = 0; k < 3; ++k) {
    base[k] = uniform_int(rng, 40, 215);
    grad[k] = rng.uniform(-50.0f, 50.0f);
  }
  const double angle = rng.uniform(0.0f, 6.2831853f);
  const double gx = std::cos(angle), gy = std::sin(angle);
  for (int y = 0; y < cv.h; ++y)
    for (int x = 0; x < cv.w; ++x) {
      const double t = ((x + 0.5) / cv.w - 0.5) * gx + ((y + 0.5) / cv.h - 0.5) * gy;  // in [-0.71, 0.71]
      for (int k = 0; k < 3; ++k) {
        const double v = base[k] + grad[k] * t + rng.uniform(-20.0f, 20.0f);
        cv.px[(static_cast<std::size_t>(y) * cv.w + x) * 3 + k] =
            static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  return cv;
}

std::array<int, 3> object_colour(Rng& rng, const std::array<int, 3>& base) {
  std::array<int, 3> c{};
  for (int attempt = 0; attempt < 32; ++attempt) {
    int far = 0;
    for (int k = 0; k < 3; ++k) {
      c[k] = uniform_int(rng, 0, 255);
      far = std::max(far, std::abs(c[k] - base[k]));
    }
    if (far >= 80) break;
  }
  return c;
}

void write_bytes(const char* tool, const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  BH_CHECK_AS(DataError, out.good(), "{}: cannot write {}", tool, path.string());
}

void write_atomically(const char* tool, const std::string& root, const std::function<void(const std::filesystem::path&)>& fill) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target = fs::absolute(fs::path(root)).lexically_normal();
  const fs::path final_path = target.filename().empty() ? target.parent_path() : target;
  BH_CHECK_AS(InvalidArgument, !fs::exists(final_path, ec), "{}: {} already exists", tool, root);
  fs::create_directories(final_path.parent_path(), ec);
  const fs::path staging =
      final_path.parent_path() / fmt::format(".{}.tmp.{}", final_path.filename().string(), ::getpid());
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  BH_CHECK_AS(DataError, !ec, "{}: cannot create {}: {}", tool, staging.string(), ec.message());
  try {
    fill(staging);
    fs::rename(staging, final_path, ec);
    BH_CHECK_AS(DataError, !ec, "{}: cannot rename {} to {}: {}", tool, staging.string(), final_path.string(),
                ec.message());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

}  // namespace benchhost::coco::planted
