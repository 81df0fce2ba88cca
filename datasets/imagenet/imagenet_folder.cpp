// ImageNet folder scanning (train/<wnid>/, val/ in class folders or flat with val_map.txt) and
// the synthetic ImageNet-layout generator. See imagenet_folder.hpp.

#include "imagenet_folder.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "benchhost/random.hpp"

namespace benchhost::imagenet {
namespace fs = std::filesystem;

namespace {

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpeg" || ext == ".jpg" || ext == ".png";
}

std::vector<std::string> sorted_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && is_image_file(e.path())) files.push_back(e.path().string());
  if (ec) BH_THROW(DataError, "cannot list '{}': {}", dir.string(), ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

ImageList scan_class_folders(const fs::path& dir, const std::vector<std::string>& classes) {
  ImageList list;
  list.classes = classes;
  for (std::size_t k = 0; k < classes.size(); ++k) {
    const fs::path cdir = dir / classes[k];
    if (!fs::is_directory(cdir)) continue;  // a class may have no validation folder
    for (auto& f : sorted_images(cdir)) {
      list.paths.push_back(std::move(f));
      list.labels.push_back(static_cast<std::int64_t>(k));
    }
  }
  if (list.paths.empty())
    BH_THROW(DataError, "no images (.JPEG/.jpg/.png) under the class folders of '{}'", dir.string());
  return list;
}

}  // namespace

std::vector<std::string> list_classes(const std::string& train_dir) {
  if (!fs::is_directory(train_dir))
    BH_THROW(DataError,
             "ImageNet train folder '{}' does not exist (expected <data-dir>/train/<wnid>/*.JPEG)",
             train_dir);
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(train_dir))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.empty())
    BH_THROW(DataError, "ImageNet train folder '{}' has no class folders (<wnid>/)", train_dir);
  return classes;
}

ImageList scan_train(const std::string& root) {
  const fs::path train = fs::path(root) / "train";
  return scan_class_folders(train, list_classes(train.string()));
}

ImageList scan_val(const std::string& root, const std::vector<std::string>& classes) {
  const fs::path val = fs::path(root) / "val";
  if (!fs::is_directory(val))
    BH_THROW(DataError, "ImageNet validation folder '{}' does not exist", val.string());
  fs::path map_file;
  for (const fs::path& candidate : {fs::path(root) / "val_map.txt", val / "val_map.txt"})
    if (fs::is_regular_file(candidate)) {
      map_file = candidate;
      break;
    }
  if (map_file.empty()) {
    // Layout (a): class folders.
    for (const auto& e : fs::directory_iterator(val))
      if (e.is_directory()) return scan_class_folders(val, classes);
    BH_THROW(DataError,
             "'{}' has neither class folders nor a labels file ({}/val_map.txt or "
             "{}/val_map.txt with lines '<file> <class index or wnid>')",
             val.string(), root, val.string());
  }
  // Layout (b): flat files + val_map.txt.
  std::map<std::string, std::int64_t> by_wnid;
  for (std::size_t k = 0; k < classes.size(); ++k) by_wnid[classes[k]] = static_cast<std::int64_t>(k);
  std::ifstream in(map_file);
  if (!in) BH_THROW(DataError, "cannot open '{}'", map_file.string());
  ImageList list;
  list.classes = classes;
  std::string line;
  std::int64_t lineno = 0;
  std::vector<std::pair<std::string, std::int64_t>> entries;
  while (std::getline(in, line)) {
    ++lineno;
    std::istringstream ls(line);
    std::string file, label;
    if (!(ls >> file)) continue;  // blank line
    if (!(ls >> label))
      BH_THROW(DataError, "{}:{}: expected '<file> <label>', got '{}'", map_file.string(), lineno, line);
    std::int64_t k = -1;
    if (auto it = by_wnid.find(label); it != by_wnid.end()) {
      k = it->second;
    } else {
      try {
        std::size_t used = 0;
        k = std::stoll(label, &used);
        if (used != label.size()) k = -1;
      } catch (...) {
        k = -1;
      }
    }
    if (k < 0 || k >= static_cast<std::int64_t>(classes.size()))
      BH_THROW(DataError, "{}:{}: label '{}' is neither a class index in [0, {}) nor a known wnid",
               map_file.string(), lineno, label, classes.size());
    const fs::path path = val / file;
    // The error_code form: a name the file system refuses (too long, a component that is a file)
    // is this line's data error, not a std::filesystem_error (found by fuzz_datasets).
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      BH_THROW(DataError, "{}:{}: image '{}' does not exist{}", map_file.string(), lineno, path.string(),
               ec ? " (" + ec.message() + ")" : std::string());
    entries.emplace_back(path.string(), k);
  }
  if (entries.empty()) BH_THROW(DataError, "labels file '{}' lists no images", map_file.string());
  std::sort(entries.begin(), entries.end());
  for (auto& [p, k] : entries) {
    list.paths.push_back(p);
    list.labels.push_back(k);
  }
  return list;
}

std::shared_ptr<data::ImageFileDataset> make_dataset(const ImageList& list,
                                                     const data::ImageTransform& transform) {
  return std::make_shared<data::ImageFileDataset>(list.paths, list.labels, transform);
}

// ---------------------------------------------------------------------------------------------

namespace {

/// A class-dependent image: hue from the class, stripes whose direction and frequency depend on
/// the class, per-image phase and noise.
Tensor synthetic_image(std::int64_t cls, std::int64_t classes, int h, int w, Rng& rng) {
  Tensor img = Tensor::empty({h, w, 3}, DType::u8);
  std::uint8_t* p = img.data<std::uint8_t>();
  const double hue = 6.2831853 * static_cast<double>(cls) / static_cast<double>(classes);
  const double base[3] = {0.5 + 0.4 * std::cos(hue), 0.5 + 0.4 * std::cos(hue + 2.094),
                          0.5 + 0.4 * std::cos(hue + 4.189)};
  const double angle = 3.14159265 * static_cast<double>(cls % 4) / 4.0;
  const double freq = 0.15 + 0.05 * static_cast<double>((cls / 4) % 3);
  const double phase = rng.uniform(0.0f, 6.283f);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const double t = std::sin(freq * (x * std::cos(angle) + y * std::sin(angle)) + phase);
      for (int c = 0; c < 3; ++c) {
        double v = 255.0 * (base[c] + 0.25 * t) + rng.uniform(-12.0f, 12.0f);
        p[(static_cast<std::int64_t>(y) * w + x) * 3 + c] =
            static_cast<std::uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  return img;
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) BH_THROW(DataError, "cannot write '{}'", path.string());
}

}  // namespace

std::int64_t write_synthetic_imagenet(const SyntheticImageNetOptions& o) {
  BH_CHECK_AS(InvalidArgument, !o.root.empty() && o.classes > 0 && o.train_per_class >= 0 &&
                                   o.val_per_class >= 0 && o.min_size >= 8 &&
                                   o.max_size >= o.min_size && o.max_size <= 4096,
              "write_synthetic_imagenet: need a root, classes > 0, counts >= 0 and 8 <= min_size "
              "<= max_size <= 4096");
  const fs::path root(o.root);
  fs::create_directories(root / "train");
  fs::create_directories(root / "val");
  Rng rng(o.seed, 0x1a6e);
  std::int64_t written = 0;
  std::ofstream val_map;
  if (o.flat_val) val_map.open(root / "val" / "val_map.txt");
  auto size = [&] {
    return o.min_size + static_cast<int>(rng.below(static_cast<std::uint64_t>(o.max_size - o.min_size + 1)));
  };
  std::int64_t val_index = 0;
  for (std::int64_t c = 0; c < o.classes; ++c) {
    const std::string wnid = fmt::format("n{:08d}", c);
    fs::create_directories(root / "train" / wnid);
    for (std::int64_t i = 0; i < o.train_per_class; ++i) {
      const int h = size(), w = size();
      write_bytes(root / "train" / wnid / fmt::format("{}_{}.JPEG", wnid, i),
                  data::encode_jpeg(synthetic_image(c, o.classes, h, w, rng), 92));
      ++written;
    }
    for (std::int64_t i = 0; i < o.val_per_class; ++i) {
      const int h = size(), w = size();
      const auto bytes = data::encode_jpeg(synthetic_image(c, o.classes, h, w, rng), 92);
      if (o.flat_val) {
        const std::string file = fmt::format("ILSVRC2012_val_{:08d}.JPEG", ++val_index);
        write_bytes(root / "val" / file, bytes);
        val_map << file << ' ' << c << '\n';
      } else {
        fs::create_directories(root / "val" / wnid);
        write_bytes(root / "val" / wnid / fmt::format("ILSVRC2012_val_{:08d}.JPEG", ++val_index), bytes);
      }
      ++written;
    }
  }
  if (o.flat_val && !val_map) BH_THROW(DataError, "cannot write '{}'", (root / "val" / "val_map.txt").string());
  return written;
}

}  // namespace benchhost::imagenet
