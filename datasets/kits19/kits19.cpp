// The KiTS19 case index, training Dataset and evaluation cases. See kits19.hpp.
#include "kits19.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "benchhost/data/npy.hpp"
#include "benchhost/error.hpp"

namespace benchhost::kits19 {

namespace fs = std::filesystem;

std::vector<std::string> read_evaluation_cases(const std::string& path) {
  std::ifstream in(path);
  BH_CHECK_AS(DataError, in.good(), "KiTS19: cannot read {}", path);
  std::vector<std::string> ids;
  std::set<std::string> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line.empty()) continue;
    const bool ok = line.size() == 5 && std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; });
    BH_CHECK_AS(DataError, ok, "KiTS19: {} line {}: '{}' is not a 5-digit case id", path, number, line);
    if (seen.insert(line).second) ids.push_back(line);
  }
  return ids;
}

namespace {

// Map one volume and check its dtype and rank.
Tensor map_volume(const std::string& path, DType want) {
  Tensor t = data::map_npy(path);
  BH_CHECK_AS(DataError, t.dtype() == want, "KiTS19: {} holds {}, expected {} ('{}')", path, dtype_name(t.dtype()),
              dtype_name(want), want == DType::f32 ? "<f4" : "|u1");
  BH_CHECK_AS(DataError, t.dim() == 4 && t.size(0) == 1, "KiTS19: {} has shape {}, expected [1, D, H, W]", path,
              shape_str(t.shape()));
  return t;
}

// Scan the label (values must be 0, 1 or 2) and, for a training case, find the foreground boxes.
// Components are labelled inside the bounding box of the class's voxels only (a kidney fills a
// few percent of a CT volume, and the labelling keeps an i32 per voxel): C order within a
// sub-box is C order in the volume, so the numbering and the boxes (shifted back) are unchanged.
void scan_case(Kits19Case& c, bool training) {
  const std::uint8_t* p = c.label.data<std::uint8_t>();
  const std::int64_t D = c.label.size(1), H = c.label.size(2), W = c.label.size(3);
  std::array<Box, 3> extent;  // per value: bounding box of its voxels (lo > hi while absent)
  for (auto& e : extent) e = Box{{D, H, W}, {0, 0, 0}};
  std::int64_t i = 0;
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t w = 0; w < W; ++w, ++i) {
        const std::uint8_t v = p[i];
        if (v > 2)
          BH_THROW(DataError, "KiTS19: {} holds the label value {} at voxel [{}, {}, {}]; only 0, 1 and 2 are classes",
                   c.label_path, static_cast<int>(v), d, h, w);
        if (v == 0) continue;
        Box& e = extent[v];
        e.lo = {std::min(e.lo[0], d), std::min(e.lo[1], h), std::min(e.lo[2], w)};
        e.hi = {std::max(e.hi[0], d + 1), std::max(e.hi[1], h + 1), std::max(e.hi[2], w + 1)};
      }
  if (!training) return;
  for (int k = 0; k < 2; ++k) {
    const Box& e = extent[k + 1];
    c.has_class[k] = e.hi[0] > e.lo[0];
    if (!c.has_class[k]) continue;
    const std::array<std::int64_t, 3> sub{e.hi[0] - e.lo[0], e.hi[1] - e.lo[1], e.hi[2] - e.lo[2]};
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(sub[0] * sub[1] * sub[2]));
    std::size_t j = 0;
    for (std::int64_t d = e.lo[0]; d < e.hi[0]; ++d)
      for (std::int64_t h = e.lo[1]; h < e.hi[1]; ++h, j += static_cast<std::size_t>(sub[2]))
        std::copy_n(p + (d * H + h) * W + e.lo[2], sub[2], mask.begin() + static_cast<std::ptrdiff_t>(j));
    std::vector<Box> boxes = component_boxes(mask, sub, static_cast<std::uint8_t>(k + 1));
    for (Box& b : boxes)
      for (int a = 0; a < 3; ++a) b.lo[a] += e.lo[a], b.hi[a] += e.lo[a];
    c.boxes[k] = largest_boxes(boxes, 2);
  }
}

}  // namespace

Kits19Index::Kits19Index(const std::string& dir, const Kits19IndexOptions& options) : dir_(dir) {
  std::error_code ec;
  BH_CHECK_AS(DataError, fs::is_directory(dir, ec), "KiTS19: data directory {} does not exist", dir);
  static const std::regex kName(R"(case_(\d{5})_([xy])\.npy)");
  std::map<std::string, std::pair<std::string, std::string>> files;  // id -> (x, y)
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, kName)) continue;
    auto& pair = files[m[1].str()];
    (m[2].str() == "x" ? pair.first : pair.second) = entry.path().string();
  }
  BH_CHECK_AS(DataError, !ec, "KiTS19: cannot list {}: {}", dir, ec.message());
  BH_CHECK_AS(DataError, !files.empty(), "KiTS19: {} holds no case_XXXXX_x.npy / case_XXXXX_y.npy files", dir);
  for (const auto& [id, pair] : files) {
    BH_CHECK_AS(DataError, !pair.first.empty(), "KiTS19: {} has no image {}", pair.second,
                (fs::path(dir) / fmt::format("case_{}_x.npy", id)).string());
    BH_CHECK_AS(DataError, !pair.second.empty(), "KiTS19: {} has no label {}", pair.first,
                (fs::path(dir) / fmt::format("case_{}_y.npy", id)).string());
  }
  const std::string eval_path = (fs::path(dir) / "evaluation_cases.txt").string();
  BH_CHECK_AS(DataError, fs::exists(eval_path, ec), "KiTS19: {} is missing (it lists the evaluation case ids)",
              eval_path);
  const std::vector<std::string> eval_ids = read_evaluation_cases(eval_path);
  const std::set<std::string> eval_set(eval_ids.begin(), eval_ids.end());
  for (const std::string& id : eval_ids)
    BH_CHECK_AS(DataError, files.count(id) != 0, "KiTS19: {} lists case {} but {} has no case_{}_x.npy / _y.npy",
                eval_path, id, dir, id);

  std::vector<Kits19Case> cases;
  std::vector<bool> training;
  for (const auto& [id, pair] : files) {
    Kits19Case c;
    c.id = id;
    c.image_path = pair.first;
    c.label_path = pair.second;
    c.image = map_volume(c.image_path, DType::f32);
    c.label = map_volume(c.label_path, DType::u8);
    BH_CHECK_AS(DataError, c.image.shape() == c.label.shape(), "KiTS19: {} has shape {} but {} has {}", c.image_path,
                shape_str(c.image.shape()), c.label_path, shape_str(c.label.shape()));
    const bool is_train = eval_set.count(id) == 0;
    if (is_train)
      for (int a = 0; a < 3; ++a)
        BH_CHECK_AS(DataError, c.image.size(a + 1) >= options.min_train_shape[a],
                    "KiTS19: {} has shape {}, smaller than the training patch [{}, {}, {}] in dimension {}",
                    c.image_path, shape_str(c.image.shape()), options.min_train_shape[0], options.min_train_shape[1],
                    options.min_train_shape[2], a + 1);
    cases.push_back(std::move(c));
    training.push_back(is_train);
  }
  // Label scans and component boxes in parallel; the first failing case (in id order) reports.
  std::vector<std::exception_ptr> errors(cases.size());
  tbb::parallel_for(std::size_t{0}, cases.size(), [&](std::size_t i) {
    try {
      scan_case(cases[i], training[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (std::size_t i = 0; i < cases.size(); ++i) (training[i] ? train_ : eval_).push_back(std::move(cases[i]));
}

// ---------------------------------------------------------------------------------------------

Kits19TrainDataset::Kits19TrainDataset(const Kits19Index& index, const Kits19TrainOptions& options)
    : index_(&index), options_(options) {
  for (int a = 0; a < 3; ++a) BH_CHECK_AS(InvalidArgument, options.patch[a] >= 1, "KiTS19: patch size {} must be >= 1", options.patch[a]);
  BH_CHECK_AS(InvalidArgument, options.oversampling >= 0 && options.oversampling <= 1 && options.noise_std >= 0,
              "KiTS19: oversampling {} must be in [0, 1] and the noise std {} >= 0", options.oversampling,
              options.noise_std);
  for (const Kits19Case& c : index.train())
    for (int a = 0; a < 3; ++a)
      BH_CHECK_AS(DataError, c.image.size(a + 1) >= options.patch[a],
                  "KiTS19: {} has shape {}, smaller than the patch [{}, {}, {}]", c.image_path,
                  shape_str(c.image.shape()), options.patch[0], options.patch[1], options.patch[2]);
}

namespace {

// random.randrange(n) with the reference's randrange(0) = 0.
std::int64_t randrange(Rng& rng, std::int64_t n) {
  return n <= 0 ? 0 : static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(n)));
}

}  // namespace

std::array<std::int64_t, 3> Kits19TrainDataset::draw_crop(const Kits19Case& c, Rng& rng) const {
  const std::array<std::int64_t, 3> dims{c.image.size(1), c.image.size(2), c.image.size(3)};
  const auto& p = options_.patch;
  std::array<std::int64_t, 3> corner{};
  const bool foreground = static_cast<double>(rng.uniform()) < options_.oversampling;
  std::vector<int> classes;
  for (int k = 0; k < 2; ++k)
    if (c.has_class[k]) classes.push_back(k);
  if (foreground && !classes.empty()) {
    const int k = classes[static_cast<std::size_t>(randrange(rng, static_cast<std::int64_t>(classes.size())))];
    const auto& boxes = c.boxes[k];
    const Box& box = boxes[static_cast<std::size_t>(randrange(rng, static_cast<std::int64_t>(boxes.size())))];
    for (int a = 0; a < 3; ++a) {
      std::int64_t diff = p[a] - (box.hi[a] - box.lo[a]);
      const std::int64_t sign = diff < 0 ? -1 : 1;
      diff = std::abs(diff);
      const std::int64_t ladj = randrange(rng, diff);
      const std::int64_t hadj = diff - ladj;
      std::int64_t low = std::max<std::int64_t>(0, box.lo[a] - sign * ladj);
      std::int64_t high = std::min(dims[a], box.hi[a] + sign * hadj);
      diff = p[a] - (high - low);
      if (diff > 0 && low == 0) high += diff;
      else if (diff > 0) low -= diff;
      corner[a] = low;
    }
    return corner;
  }
  for (int a = 0; a < 3; ++a) corner[a] = randrange(rng, dims[a] - p[a]);
  return corner;
}

data::Sample Kits19TrainDataset::get(const data::SampleContext& ctx) const {
  data::check_index(ctx.index, size());
  const Kits19Case& c = index_->train()[static_cast<std::size_t>(ctx.index)];
  Rng rng = ctx.rng();
  const std::array<std::int64_t, 3> corner = draw_crop(c, rng);
  std::array<bool, 3> flip{};
  for (int a = 0; a < 3; ++a) flip[a] = static_cast<double>(rng.uniform()) < options_.flip_probability;

  const auto& p = options_.patch;
  const std::int64_t H = c.image.size(2), W = c.image.size(3);
  Tensor image = Tensor::empty({1, p[0], p[1], p[2]}, DType::f32);
  Tensor label = Tensor::empty({1, p[0], p[1], p[2]}, DType::u8);
  float* dst = image.data<float>();
  std::uint8_t* ldst = label.data<std::uint8_t>();
  const float* src = c.image.data<float>();
  const std::uint8_t* lsrc = c.label.data<std::uint8_t>();
  // Crop and flip in one copy: output (d, h, w) reads the crop at the mirrored index.
  for (std::int64_t d = 0; d < p[0]; ++d) {
    const std::int64_t sd = corner[0] + (flip[0] ? p[0] - 1 - d : d);
    for (std::int64_t h = 0; h < p[1]; ++h) {
      const std::int64_t sh = corner[1] + (flip[1] ? p[1] - 1 - h : h);
      const std::int64_t srow = (sd * H + sh) * W + corner[2];
      const std::int64_t drow = (d * p[1] + h) * p[2];
      if (flip[2]) {
        for (std::int64_t w = 0; w < p[2]; ++w) {
          dst[drow + w] = src[srow + p[2] - 1 - w];
          ldst[drow + w] = lsrc[srow + p[2] - 1 - w];
        }
      } else {
        std::copy_n(src + srow, p[2], dst + drow);
        std::copy_n(lsrc + srow, p[2], ldst + drow);
      }
    }
  }
  const std::int64_t n = image.numel();
  if (static_cast<double>(rng.uniform()) < options_.brightness_probability) {
    const double f = (1.0 - options_.brightness_factor) + 2.0 * options_.brightness_factor * static_cast<double>(rng.uniform());
    const double scale = 1.0 + f;  // the reference's quirk: 1 + U(0.7, 1.3)
    for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<double>(dst[i]) * scale);
  }
  if (static_cast<double>(rng.uniform()) < options_.noise_probability) {
    const auto std_dev = static_cast<float>(options_.noise_std * static_cast<double>(rng.uniform()));
    for (std::int64_t i = 0; i < n; ++i) dst[i] += rng.normal() * std_dev;
  }
  return data::Sample{{"image", image}, {"label", label}};
}

std::string Kits19TrainDataset::source(std::int64_t index) const {
  data::check_index(index, size());
  return index_->train()[static_cast<std::size_t>(index)].image_path;
}

const Tensor& Kits19EvalCases::image(std::int64_t j) const {
  data::check_index(j, size());
  return index_->eval()[static_cast<std::size_t>(j)].image;
}

const Tensor& Kits19EvalCases::label(std::int64_t j) const {
  data::check_index(j, size());
  return index_->eval()[static_cast<std::size_t>(j)].label;
}

const std::string& Kits19EvalCases::id(std::int64_t j) const {
  data::check_index(j, size());
  return index_->eval()[static_cast<std::size_t>(j)].id;
}

std::string Kits19EvalCases::source(std::int64_t j) const {
  data::check_index(j, size());
  return index_->eval()[static_cast<std::size_t>(j)].image_path;
}

}  // namespace benchhost::kits19
