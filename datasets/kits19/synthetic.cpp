// Planted-kidney KiTS19 generator (Note [Planted kidneys] in synthetic.hpp).
#include "synthetic.hpp"

#include <unistd.h>

#include <array>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "benchhost/data/generated.hpp"
#include "benchhost/comm/communicator.hpp"
#include "benchhost/data/npy.hpp"
#include "benchhost/error.hpp"
#include "benchhost/random.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::kits19 {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = "kits19_synthetic.txt";

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<Vec3, 3>;

// A uniformly random rotation from a random unit quaternion.
Mat3 random_rotation(Rng& rng) {
  double q[4];
  double n = 0;
  do {
    n = 0;
    for (double& x : q) x = rng.normal(), n += x * x;
  } while (n < 1e-12);
  n = std::sqrt(n);
  const double w = q[0] / n, x = q[1] / n, y = q[2] / n, z = q[3] / n;
  return Mat3{Vec3{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
              Vec3{2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
              Vec3{2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
}

struct Ellipsoid {
  Vec3 centre{};
  Vec3 radii{};
  Mat3 rot{};  // columns: the ellipsoid's axes
  bool contains(double d, double h, double w) const {
    const Vec3 v{d - centre[0], h - centre[1], w - centre[2]};
    double s = 0;
    for (int a = 0; a < 3; ++a) {
      const double local = rot[0][a] * v[0] + rot[1][a] * v[1] + rot[2][a] * v[2];  // R^T v
      s += (local / radii[a]) * (local / radii[a]);
    }
    return s <= 1.0;
  }
  double max_radius() const { return std::max({radii[0], radii[1], radii[2]}); }
};

double uniform(Rng& rng, double lo, double hi) { return lo + (hi - lo) * static_cast<double>(rng.uniform()); }

Ellipsoid random_ellipsoid(Rng& rng, const std::array<std::int64_t, 3>& dims, double rmin, double rmax) {
  Ellipsoid e;
  for (double& r : e.radii) r = uniform(rng, rmin, rmax);
  const double m = e.max_radius();
  for (int a = 0; a < 3; ++a) e.centre[a] = uniform(rng, m + 1.0, static_cast<double>(dims[a]) - m - 2.0);
  e.rot = random_rotation(rng);
  return e;
}

double distance(const Vec3& a, const Vec3& b) {
  return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) + (a[2] - b[2]) * (a[2] - b[2]));
}

struct Volume {
  std::array<std::int64_t, 3> dims{};
  std::vector<float> image;
  std::vector<std::uint8_t> label;
};

// One attempt at case `id`; false when a class did not survive (then the caller redraws).
bool draw_case(Rng& rng, const Kits19SyntheticOptions& o, Volume& v) {
  for (auto& d : v.dims) d = o.size_min + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(o.size_max - o.size_min + 1)));
  // Object sizes follow the volume up to 64 voxels a side; larger volumes hold more background.
  const double scale = std::min(1.0, static_cast<double>(std::min({v.dims[0], v.dims[1], v.dims[2]})) / 64.0);
  std::vector<Ellipsoid> kidneys(1 + rng.below(2));
  for (auto& k : kidneys) k = random_ellipsoid(rng, v.dims, 8.0 * scale, 14.0 * scale);
  // The tumour: centred at a random point inside a kidney, at up to 80% of its radii (Note [A
  // tumour large enough to learn from] in synthetic.hpp).
  const Ellipsoid& host = kidneys[rng.below(kidneys.size())];
  Ellipsoid tumour;
  for (double& r : tumour.radii) r = uniform(rng, 6.0 * scale, 10.0 * scale);
  tumour.rot = random_rotation(rng);
  {
    Vec3 u{rng.normal(), rng.normal(), rng.normal()};
    const double n = std::max(1e-9, std::sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]));
    const double reach = uniform(rng, 0.2, 0.8);
    for (int a = 0; a < 3; ++a) {
      double off = 0;
      for (int b = 0; b < 3; ++b) off += host.rot[a][b] * (u[b] / n) * reach * host.radii[b];
      tumour.centre[a] = host.centre[a] + off;
    }
  }
  // Distractors: small kidney-bright nodules away from the kidneys (a few tries each). Their size
  // (radii 2-4.5 against the kidneys' 8-14) is what tells them apart: intensity does not.
  std::vector<Ellipsoid> distractors;
  const int wanted = 2 + static_cast<int>(rng.below(4));
  for (int t = 0; t < 24 && static_cast<int>(distractors.size()) < wanted; ++t) {
    Ellipsoid d = random_ellipsoid(rng, v.dims, 2.0 * scale, 4.5 * scale);
    bool clear = true;
    for (const auto& k : kidneys) clear = clear && distance(d.centre, k.centre) > d.max_radius() + k.max_radius() + 2;
    if (clear) distractors.push_back(d);
  }
  const double sigma = uniform(rng, 0.5, 0.65);
  struct Wave {
    Vec3 freq;
    double phase, amp;
  };
  std::array<Wave, 2> waves{};
  for (auto& wv : waves) {
    for (int a = 0; a < 3; ++a) wv.freq[a] = uniform(rng, -1.5, 1.5) * 2.0 * M_PI / static_cast<double>(v.dims[a]);
    wv.phase = uniform(rng, 0, 2 * M_PI);
    wv.amp = 0.05;
  }
  const std::int64_t n = v.dims[0] * v.dims[1] * v.dims[2];
  v.image.assign(static_cast<std::size_t>(n), 0.0f);
  v.label.assign(static_cast<std::size_t>(n), 0);
  bool present[3] = {false, false, false};
  std::int64_t i = 0;
  for (std::int64_t d = 0; d < v.dims[0]; ++d)
    for (std::int64_t h = 0; h < v.dims[1]; ++h)
      for (std::int64_t w = 0; w < v.dims[2]; ++w, ++i) {
        const double x = static_cast<double>(d), y = static_cast<double>(h), z = static_cast<double>(w);
        double mean = 0;
        std::uint8_t cls = 0;
        for (const auto& e : distractors)
          if (e.contains(x, y, z)) mean = 1.0;
        for (const auto& k : kidneys)
          if (k.contains(x, y, z)) mean = 1.0, cls = 1;
        if (tumour.contains(x, y, z)) mean = 2.2, cls = 2;
        double bias = 0;
        for (const auto& wv : waves) bias += wv.amp * std::cos(wv.freq[0] * x + wv.freq[1] * y + wv.freq[2] * z + wv.phase);
        v.image[static_cast<std::size_t>(i)] = static_cast<float>(mean + bias + sigma * static_cast<double>(rng.normal()));
        v.label[static_cast<std::size_t>(i)] = cls;
        present[cls] = true;
      }
  return present[1] && present[2];
}

std::vector<int> eval_ids(int total, int eval) {
  std::vector<int> ids;
  for (int k = 0; k < eval; ++k)
    ids.push_back(static_cast<int>((static_cast<std::int64_t>(2 * k + 1) * total) / (2 * static_cast<std::int64_t>(eval))));
  return ids;
}

void check_options(const Kits19SyntheticOptions& o) {
  BH_CHECK_AS(InvalidArgument, o.train_cases >= 1 && o.eval_cases >= 0 && o.train_cases + o.eval_cases <= 100000,
              "make_kits19_synthetic: {} train and {} eval cases (need >= 1 train, ids fit 5 digits)", o.train_cases,
              o.eval_cases);
  BH_CHECK_AS(InvalidArgument, o.size_min >= 32 && o.size_max >= o.size_min && o.size_max <= 1024,
              "make_kits19_synthetic: sizes {}..{} (need 32 <= size_min <= size_max <= 1024)", o.size_min, o.size_max);
}

}  // namespace

std::string kits19_synthetic_options_text(const Kits19SyntheticOptions& o) {
  return fmt::format("kits19 synthetic v2\ntrain_cases {}\neval_cases {}\nsize_min {}\nsize_max {}\nseed {}\n",
                     o.train_cases, o.eval_cases, o.size_min, o.size_max, o.seed);
}

Kits19SyntheticReport generate_kits19_synthetic(const std::string& dir, const Kits19SyntheticOptions& o) {
  check_options(o);
  std::error_code ec;
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path final_path = target.filename().empty() ? target.parent_path() : target;
  BH_CHECK_AS(InvalidArgument, !fs::exists(final_path, ec), "make_kits19_synthetic: {} already exists", dir);
  fs::create_directories(final_path.parent_path(), ec);
  const fs::path staging =
      final_path.parent_path() / fmt::format(".{}.tmp.{}", final_path.filename().string(), ::getpid());
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  BH_CHECK_AS(DataError, !ec, "make_kits19_synthetic: cannot create {}: {}", staging.string(), ec.message());
  try {
    const int total = o.train_cases + o.eval_cases;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(total));
    tbb::parallel_for(0, total, [&](int id) {
      try {
        Rng rng(o.seed ^ 0x6b69747331397ull, static_cast<std::uint64_t>(id));
        Volume v;
        while (!draw_case(rng, o, v)) {
        }
        const Shape shape{1, v.dims[0], v.dims[1], v.dims[2]};
        Tensor x = Tensor::empty(shape, DType::f32);
        Tensor y = Tensor::empty(shape, DType::u8);
        std::copy(v.image.begin(), v.image.end(), x.data<float>());
        std::copy(v.label.begin(), v.label.end(), y.data<std::uint8_t>());
        data::write_npy((staging / fmt::format("case_{:05d}_x.npy", id)).string(), x);
        data::write_npy((staging / fmt::format("case_{:05d}_y.npy", id)).string(), y);
      } catch (...) {
        errors[static_cast<std::size_t>(id)] = std::current_exception();
      }
    });
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    {
      std::ofstream f(staging / "evaluation_cases.txt");
      for (int id : eval_ids(total, o.eval_cases)) f << fmt::format("{:05d}\n", id);
      std::ofstream m(staging / kMarker);
      m << kits19_synthetic_options_text(o);
      BH_CHECK_AS(DataError, f.good() && m.good(), "make_kits19_synthetic: cannot write into {}", staging.string());
    }
    fs::rename(staging, final_path, ec);
    BH_CHECK_AS(DataError, !ec, "make_kits19_synthetic: cannot rename {} to {}: {}", staging.string(),
                final_path.string(), ec.message());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  Kits19SyntheticReport r;
  r.train_cases = o.train_cases;
  r.eval_cases = o.eval_cases;
  r.generated = true;
  return r;
}

namespace {

// The existing directory's state: nullopt-like flag when absent; DataError when it holds another
// generation's options.
bool check_existing(const std::string& dir, const Kits19SyntheticOptions& o, Kits19SyntheticReport& r) {
  if (!data::generated_with("KiTS19", dir, kMarker, kits19_synthetic_options_text(o))) return false;
  r.train_cases = o.train_cases;
  r.eval_cases = o.eval_cases;
  r.generated = false;
  return true;
}

}  // namespace

Kits19SyntheticReport ensure_kits19_synthetic(const std::string& dir, const Kits19SyntheticOptions& o, Communicator* comm) {
  // Note [Generated once across ranks] (benchhost/data/generated.hpp).
  return data::ensure_generated<Kits19SyntheticReport>(
      comm, "KiTS19", dir, [&](Kits19SyntheticReport& r) { return check_existing(dir, o, r); },
      [&] { return generate_kits19_synthetic(dir, o); });
}

}  // namespace benchhost::kits19
