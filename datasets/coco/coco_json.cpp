// COCO instances JSON: guarded parse, validation, index, writer (coco_json.hpp).
#include "coco_json.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "benchhost/data/file.hpp"
#include "benchhost/error.hpp"

namespace benchhost::coco {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Note [Hostile COCO files]: the deepest [ / { nesting, strings skipped, without parsing.
void check_depth(std::span<const std::uint8_t> bytes, const std::string& name, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const std::uint8_t c = bytes[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        BH_THROW(DataError, "{}: JSON nested deeper than {} levels at byte {}", name, max_depth, i);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

// The JSON path of a value, for messages: "$.annotations[3].bbox[2]".
struct Path {
  std::string text = "$";
  Path key(const std::string& k) const { return {text + "." + k}; }
  Path at(std::size_t i) const { return {text + "[" + std::to_string(i) + "]"}; }
};

struct Reader {
  const std::string& name;

  [[noreturn]] void fail(const Path& p, const std::string& what) const {
    BH_THROW(DataError, "{}: {}: {}", name, p.text, what);
  }

  static const char* type_name(const json& v) { return v.type_name(); }

  const json& member(const json& obj, const Path& p, const char* key) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(p.key(key), "missing");
    return *it;
  }
  const json* optional_member(const json& obj, const char* key) const {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& array(const json& v, const Path& p) const {
    if (!v.is_array()) fail(p, fmt::format("expected an array, found {}", type_name(v)));
    return v;
  }
  const json& object(const json& v, const Path& p) const {
    if (!v.is_object()) fail(p, fmt::format("expected an object, found {}", type_name(v)));
    return v;
  }
  double number(const json& v, const Path& p) const {
    if (!v.is_number()) fail(p, fmt::format("expected a number, found {}", type_name(v)));
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(p, "not a finite number");
    return d;
  }
  // A number a model takes as float (boxes, polygons): finite doubles beyond float range are
  // refused. Polygons keep the double (bounded), boxes the float (single).
  double bounded(const json& v, const Path& p) const {
    const double d = number(v, p);
    if (std::fabs(d) > 3.0e38) fail(p, "out of float range");
    return d;
  }
  float single(const json& v, const Path& p) const { return static_cast<float>(bounded(v, p)); }
  // An integer, also written as an integral float.
  std::int64_t integer(const json& v, const Path& p) const {
    if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<std::int64_t>();
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) fail(p, "integer out of range");
      return static_cast<std::int64_t>(u);
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9007199254740992.0)
        fail(p, fmt::format("expected an integer, found {}", d));
      return static_cast<std::int64_t>(d);
    }
    fail(p, fmt::format("expected an integer, found {}", type_name(v)));
  }
  std::string string(const json& v, const Path& p) const {
    if (!v.is_string()) fail(p, fmt::format("expected a string, found {}", type_name(v)));
    return v.get<std::string>();
  }

  CocoImage image(const json& v, const Path& p) const {
    object(v, p);
    CocoImage im;
    im.id = integer(member(v, p, "id"), p.key("id"));
    im.file_name = string(member(v, p, "file_name"), p.key("file_name"));
    im.height = integer(member(v, p, "height"), p.key("height"));
    im.width = integer(member(v, p, "width"), p.key("width"));
    if (im.height < 1) fail(p.key("height"), fmt::format("{} is not a positive size", im.height));
    if (im.width < 1) fail(p.key("width"), fmt::format("{} is not a positive size", im.width));
    return im;
  }

  CocoCategory category(const json& v, const Path& p) const {
    object(v, p);
    CocoCategory c;
    c.id = integer(member(v, p, "id"), p.key("id"));
    c.name = string(member(v, p, "name"), p.key("name"));
    if (const json* s = optional_member(v, "supercategory"); s && !s->is_null())
      c.supercategory = string(*s, p.key("supercategory"));
    return c;
  }

  Rle rle(const json& v, const Path& p) const {
    Rle r;
    const Path sp = p.key("size");
    const json& size = array(member(v, p, "size"), sp);
    if (size.size() != 2) fail(sp, fmt::format("expected [height, width], found {} values", size.size()));
    r.height = integer(size[0], sp.at(0));
    r.width = integer(size[1], sp.at(1));
    if (r.height < 0 || r.width < 0 || r.height > (std::int64_t{1} << 31) || r.width > (std::int64_t{1} << 31))
      fail(sp, fmt::format("mask size {}x{} out of range", r.height, r.width));
    const Path cp = p.key("counts");
    const json& counts = member(v, p, "counts");
    if (counts.is_string()) {
      r.compressed = true;
      r.counts = rle_from_string(counts.get_ref<const std::string&>(), fmt::format("{}: {}", name, cp.text));
    } else {
      array(counts, cp);
      r.counts.reserve(counts.size());
      for (std::size_t i = 0; i < counts.size(); ++i) {
        const std::int64_t c = integer(counts[i], cp.at(i));
        if (c < 0 || c > std::numeric_limits<std::uint32_t>::max()) fail(cp.at(i), fmt::format("run {} out of range", c));
        r.counts.push_back(static_cast<std::uint32_t>(c));
      }
    }
    std::uint64_t sum = 0;
    for (const std::uint32_t c : r.counts) sum += c;  // at most 2^32 runs of < 2^32: no overflow
    const auto area = static_cast<std::uint64_t>(r.height) * static_cast<std::uint64_t>(r.width);
    if (sum != area) fail(cp, fmt::format("runs sum to {}, the mask {}x{} has {} pixels", sum, r.height, r.width, area));
    return r;
  }

  Segmentation segmentation(const json& v, const Path& p) const {
    Segmentation s;
    if (v.is_object()) {
      s.kind = Segmentation::Kind::rle;
      s.rle = rle(v, p);
      return s;
    }
    if (!v.is_array()) fail(p, fmt::format("expected polygons or an RLE object, found {}", type_name(v)));
    s.kind = Segmentation::Kind::polygons;
    s.polygons.reserve(v.size());
    for (std::size_t k = 0; k < v.size(); ++k) {
      const Path pp = p.at(k);
      const json& poly = array(v[k], pp);
      if (poly.size() < 6 || poly.size() % 2 != 0)
        fail(pp, fmt::format("a polygon needs an even number >= 6 of coordinates, found {}", poly.size()));
      std::vector<double> xy;
      xy.reserve(poly.size());
      for (std::size_t i = 0; i < poly.size(); ++i) xy.push_back(bounded(poly[i], pp.at(i)));
      s.polygons.push_back(std::move(xy));
    }
    return s;
  }

  CocoAnnotation annotation(const json& v, const Path& p) const {
    object(v, p);
    CocoAnnotation a;
    a.id = integer(member(v, p, "id"), p.key("id"));
    a.image_id = integer(member(v, p, "image_id"), p.key("image_id"));
    a.category_id = integer(member(v, p, "category_id"), p.key("category_id"));
    const Path bp = p.key("bbox");
    const json& bbox = array(member(v, p, "bbox"), bp);
    if (bbox.size() != 4) fail(bp, fmt::format("expected [x, y, w, h], found {} values", bbox.size()));
    for (int i = 0; i < 4; ++i) a.bbox[i] = single(bbox[i], bp.at(i));
    if (a.bbox[2] < 0) fail(bp.at(2), fmt::format("negative width {}", a.bbox[2]));
    if (a.bbox[3] < 0) fail(bp.at(3), fmt::format("negative height {}", a.bbox[3]));
    if (const json* area = optional_member(v, "area")) a.area = number(*area, p.key("area"));
    else a.area = static_cast<double>(a.bbox[2]) * a.bbox[3];
    if (const json* crowd = optional_member(v, "iscrowd")) {
      if (crowd->is_boolean()) {
        a.iscrowd = crowd->get<bool>();
      } else {
        const std::int64_t c = integer(*crowd, p.key("iscrowd"));
        if (c != 0 && c != 1) fail(p.key("iscrowd"), fmt::format("expected 0 or 1, found {}", c));
        a.iscrowd = c == 1;
      }
    }
    if (const json* seg = optional_member(v, "segmentation"); seg && !seg->is_null())
      a.segmentation = segmentation(*seg, p.key("segmentation"));
    return a;
  }

  template <class T, class F>
  std::vector<T> section(const json& root, const char* key, bool required, F&& one) const {
    std::vector<T> out;
    const json* v = optional_member(root, key);
    if (v == nullptr) {
      if (required) fail(Path{}.key(key), "missing");
      return out;
    }
    const Path p = Path{}.key(key);
    array(*v, p);
    out.reserve(v->size());
    for (std::size_t i = 0; i < v->size(); ++i) out.push_back(one((*v)[i], p.at(i)));
    return out;
  }
};

std::string json_path(const char* section, std::size_t i, const char* key) {
  return fmt::format("$.{}[{}].{}", section, i, key);
}

// A float as the double of its shortest decimal form, so that the file says 23.07 rather than
// 23.069999694824219 (the float's exact value as a double); reading it back as a float gives the
// same float.
double shortest(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

ordered_json rle_json(const Rle& r) {
  ordered_json j;
  j["size"] = {r.height, r.width};
  if (r.compressed) j["counts"] = rle_to_string(r.counts);
  else j["counts"] = r.counts;
  return j;
}

}  // namespace

std::optional<std::size_t> CocoFile::image_position(std::int64_t image_id) const {
  const auto it = image_pos_.find(image_id);
  if (it == image_pos_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::size_t> CocoFile::category_position(std::int64_t category_id) const {
  const auto it = category_pos_.find(category_id);
  if (it == category_pos_.end()) return std::nullopt;
  return it->second;
}

const std::vector<std::size_t>& CocoFile::annotations_of(std::size_t image_pos) const {
  BH_CHECK_AS(InvalidArgument, image_pos < per_image_.size(), "{}: image position {} out of range for {} images",
              source, image_pos, per_image_.size());
  return per_image_[image_pos];
}

void CocoFile::build_index() {
  image_pos_.clear();
  category_pos_.clear();
  per_image_.assign(images.size(), {});
  image_pos_.reserve(images.size());
  for (std::size_t i = 0; i < images.size(); ++i)
    if (!image_pos_.emplace(images[i].id, i).second)
      BH_THROW(DataError, "{}: {}: duplicate image id {}", source, json_path("images", i, "id"), images[i].id);
  for (std::size_t i = 0; i < categories.size(); ++i)
    if (!category_pos_.emplace(categories[i].id, i).second)
      BH_THROW(DataError, "{}: {}: duplicate category id {}", source, json_path("categories", i, "id"), categories[i].id);
  std::unordered_map<std::int64_t, std::size_t> seen;
  seen.reserve(annotations.size());
  for (std::size_t i = 0; i < annotations.size(); ++i) {
    const CocoAnnotation& a = annotations[i];
    if (!seen.emplace(a.id, i).second)
      BH_THROW(DataError, "{}: {}: duplicate annotation id {}", source, json_path("annotations", i, "id"), a.id);
    const auto im = image_pos_.find(a.image_id);
    if (im == image_pos_.end())
      BH_THROW(DataError, "{}: {}: no image has id {}", source, json_path("annotations", i, "image_id"), a.image_id);
    if (!category_pos_.contains(a.category_id))
      BH_THROW(DataError, "{}: {}: no category has id {}", source, json_path("annotations", i, "category_id"),
               a.category_id);
    per_image_[im->second].push_back(i);
  }
}

CocoFile parse_coco_json(std::span<const std::uint8_t> bytes, const std::string& name,
                         const CocoReadOptions& options) {
  if (bytes.size() > options.max_bytes)
    BH_THROW(DataError, "{}: {} bytes, more than the {} accepted", name, bytes.size(), options.max_bytes);
  check_depth(bytes, name, options.max_depth);
  json root;
  try {
    root = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    BH_THROW(DataError, "{}: not valid JSON: {}", name, e.what());
  }
  const Reader r{name};
  r.object(root, Path{});
  CocoFile f;
  f.source = name;
  try {
    f.images = r.section<CocoImage>(root, "images", true, [&](const json& v, const Path& p) { return r.image(v, p); });
    f.categories = r.section<CocoCategory>(root, "categories", true,
                                           [&](const json& v, const Path& p) { return r.category(v, p); });
    f.annotations = r.section<CocoAnnotation>(root, "annotations", false,
                                              [&](const json& v, const Path& p) { return r.annotation(v, p); });
  } catch (const json::exception& e) {  // defensive: every access above checks types first
    BH_THROW(DataError, "{}: unexpected JSON content: {}", name, e.what());
  }
  f.build_index();
  return f;
}

CocoFile parse_coco_json(const std::string& text, const std::string& name, const CocoReadOptions& options) {
  return parse_coco_json(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()), name, options);
}

CocoFile read_coco_json(const std::string& path, const CocoReadOptions& options) {
  const std::vector<std::uint8_t> bytes = data::read_file(path, options.max_bytes);
  return parse_coco_json(std::span<const std::uint8_t>(bytes), path, options);
}

std::string to_coco_json(const CocoFile& file, int indent) {
  ordered_json root;
  root["info"] = ordered_json::object();
  root["licenses"] = ordered_json::array();
  ordered_json cats = ordered_json::array();
  for (const CocoCategory& c : file.categories) {
    ordered_json j;
    j["id"] = c.id;
    j["name"] = c.name;
    j["supercategory"] = c.supercategory ? ordered_json(*c.supercategory) : ordered_json(nullptr);
    cats.push_back(std::move(j));
  }
  root["categories"] = std::move(cats);
  ordered_json ims = ordered_json::array();
  for (const CocoImage& im : file.images) {
    ordered_json j;
    j["id"] = im.id;
    j["file_name"] = im.file_name;
    j["height"] = im.height;
    j["width"] = im.width;
    ims.push_back(std::move(j));
  }
  root["images"] = std::move(ims);
  ordered_json anns = ordered_json::array();
  for (const CocoAnnotation& a : file.annotations) {
    ordered_json j;
    j["id"] = a.id;
    j["image_id"] = a.image_id;
    j["category_id"] = a.category_id;
    j["bbox"] = {shortest(a.bbox[0]), shortest(a.bbox[1]), shortest(a.bbox[2]), shortest(a.bbox[3])};
    j["area"] = a.area;
    j["iscrowd"] = a.iscrowd ? 1 : 0;
    if (a.segmentation.kind == Segmentation::Kind::polygons) j["segmentation"] = a.segmentation.polygons;
    else if (a.segmentation.kind == Segmentation::Kind::rle) j["segmentation"] = rle_json(a.segmentation.rle);
    anns.push_back(std::move(j));
  }
  root["annotations"] = std::move(anns);
  return root.dump(indent);
}

void write_coco_json(const CocoFile& file, const std::string& path) {
  const std::string text = to_coco_json(file);
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    BH_CHECK_AS(DataError, out.good(), "cannot write {}", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  BH_CHECK_AS(DataError, !ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
}

std::vector<std::uint32_t> rle_from_string(const std::string& s, const std::string& name) {
  std::vector<std::uint32_t> counts;
  std::size_t p = 0;
  while (p < s.size()) {
    std::int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= s.size()) BH_THROW(DataError, "{}: compressed RLE ends inside a value", name);
      const int c = static_cast<unsigned char>(s[p]) - 48;
      if (c < 0 || c > 63)
        BH_THROW(DataError, "{}: compressed RLE: character code {} at {} is not in '0'..'o'", name, c + 48, p);
      if (k >= 7) BH_THROW(DataError, "{}: compressed RLE: value at {} longer than 32 bits", name, p);
      x |= static_cast<std::int64_t>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10)) x |= -(std::int64_t{1} << (5 * k));  // sign-extend
    }
    const std::size_t m = counts.size();
    if (m > 2) x += counts[m - 2];
    if (x < 0 || x > std::numeric_limits<std::uint32_t>::max())
      BH_THROW(DataError, "{}: compressed RLE: run {} is {}", name, m, x);
    counts.push_back(static_cast<std::uint32_t>(x));
  }
  return counts;
}

std::string rle_to_string(std::span<const std::uint32_t> counts) {
  std::string s;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::int64_t x = counts[i];
    if (i > 2) x -= counts[i - 2];
    bool more = true;
    while (more) {
      int c = static_cast<int>(x & 0x1f);
      x >>= 5;  // arithmetic shift: sign preserved
      more = (c & 0x10) ? x != -1 : x != 0;
      if (more) c |= 0x20;
      s.push_back(static_cast<char>(c + 48));
    }
  }
  return s;
}

std::map<std::int64_t, std::int64_t> contiguous_category_index(const CocoFile& file, std::int64_t first) {
  std::set<std::int64_t> ids;
  for (const CocoCategory& c : file.categories) ids.insert(c.id);
  std::map<std::int64_t, std::int64_t> out;
  std::int64_t next = first;
  for (const std::int64_t id : ids) out.emplace(id, next++);
  return out;
}

std::map<std::int64_t, std::int64_t> direct_category_index(const CocoFile& file) {
  std::map<std::int64_t, std::int64_t> out;
  const auto k = static_cast<std::int64_t>(file.categories.size());
  for (std::size_t i = 0; i < file.categories.size(); ++i) {
    const std::int64_t id = file.categories[i].id;
    if (id < 0 || id >= k)
      BH_THROW(DataError, "{}: {}: category id {} is not a class index 0..{} (OpenImages-MLPerf uses ids directly)",
               file.source, json_path("categories", i, "id"), id, k - 1);
    out.emplace(id, id);
  }
  return out;
}

}  // namespace benchhost::coco
