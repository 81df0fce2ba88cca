// The COCO instances reader: every field kind parsed, the compressed RLE format, the round trip
// through the writer, the category conventions, and one DataError per validation rule naming the
// file and the JSON path.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "benchhost/error.hpp"
#include "coco_json.hpp"
#include "common.hpp"

using namespace benchhost;
using namespace benchhost::coco;

TEST(CocoJson, ParsesEveryFieldKind) {
  const CocoFile f = parse_coco_json(std::string(test::kAllKinds), "all.json");
  EXPECT_EQ(f.source, "all.json");
  ASSERT_EQ(f.categories.size(), 3u);
  EXPECT_EQ(f.categories[0], (CocoCategory{1, "person", "human"}));
  EXPECT_EQ(f.categories[1], (CocoCategory{5, "airplane", std::nullopt}));
  EXPECT_EQ(f.categories[2], (CocoCategory{3, "car", std::nullopt}));
  ASSERT_EQ(f.images.size(), 2u);
  EXPECT_EQ(f.images[0], (CocoImage{10, "a.jpg", 480, 640}));
  EXPECT_EQ(f.images[1], (CocoImage{7, "b.jpg", 100, 200}));
  ASSERT_EQ(f.annotations.size(), 5u);

  const CocoAnnotation& a = f.annotations[0];
  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(a.image_id, 10);
  EXPECT_EQ(a.category_id, 1);
  EXPECT_EQ(a.bbox, (std::array<float, 4>{10.5f, 20.25f, 30.0f, 40.0f}));
  EXPECT_EQ(a.area, 1200.5);
  EXPECT_FALSE(a.iscrowd);
  ASSERT_EQ(a.segmentation.kind, Segmentation::Kind::polygons);
  ASSERT_EQ(a.segmentation.polygons.size(), 2u);
  EXPECT_EQ(a.segmentation.polygons[0], (std::vector<double>{10.5, 20.25, 40.5, 20.25, 40.5, 60.25}));
  EXPECT_EQ(a.segmentation.polygons[1].size(), 8u);

  const CocoAnnotation& b = f.annotations[1];
  EXPECT_TRUE(b.iscrowd);
  ASSERT_EQ(b.segmentation.kind, Segmentation::Kind::rle);
  EXPECT_EQ(b.segmentation.rle.height, 3);
  EXPECT_EQ(b.segmentation.rle.width, 4);
  EXPECT_EQ(b.segmentation.rle.counts, (std::vector<std::uint32_t>{1, 2, 3, 2, 4}));
  EXPECT_FALSE(b.segmentation.rle.compressed);

  const CocoAnnotation& c = f.annotations[2];
  EXPECT_TRUE(c.iscrowd);  // JSON true
  ASSERT_EQ(c.segmentation.kind, Segmentation::Kind::rle);
  EXPECT_TRUE(c.segmentation.rle.compressed);
  EXPECT_EQ(c.segmentation.rle.counts, (std::vector<std::uint32_t>{3, 5, 2, 1}));

  const CocoAnnotation& d = f.annotations[3];
  EXPECT_EQ(d.segmentation.rle.counts, (std::vector<std::uint32_t>{100, 16, 4}));
  EXPECT_EQ(d.area, 0.0);  // absent: w * h = 0 * 5

  const CocoAnnotation& e = f.annotations[4];
  EXPECT_EQ(e.segmentation.kind, Segmentation::Kind::none);
  EXPECT_FALSE(e.iscrowd);
  EXPECT_EQ(e.area, 56.0);  // absent: 7 * 8

  // The index.
  EXPECT_EQ(f.image_position(10), 0u);
  EXPECT_EQ(f.image_position(7), 1u);
  EXPECT_FALSE(f.image_position(8).has_value());
  EXPECT_EQ(f.category_position(3), 2u);
  EXPECT_EQ(f.annotations_of(0), (std::vector<std::size_t>{0, 1, 4}));
  EXPECT_EQ(f.annotations_of(1), (std::vector<std::size_t>{2, 3}));
  EXPECT_THROW(f.annotations_of(2), InvalidArgument);
}

TEST(CocoJson, CompressedRleByHand) {
  EXPECT_EQ(rle_to_string(std::vector<std::uint32_t>{3, 5, 2, 1}), "352L");
  EXPECT_EQ(rle_to_string(std::vector<std::uint32_t>{100, 16, 4}), "T3`04");
  EXPECT_EQ(rle_from_string("", "x"), std::vector<std::uint32_t>{});
  // Large runs and large negative deltas survive the round trip.
  const std::vector<std::uint32_t> big = {0, 4000000000u, 7, 1, 4000000000u, 0, 0, 123456789, 5};
  EXPECT_EQ(rle_from_string(rle_to_string(big), "x"), big);
  // Refused: a value cut short, a character outside '0'..'o', more than 32 bits, a negative run.
  EXPECT_THROW(rle_from_string("T", "x"), DataError);     // 'T' says more groups follow
  EXPECT_THROW(rle_from_string("3 5", "x"), DataError);   // ' ' < '0'
  EXPECT_THROW(rle_from_string("3p", "x"), DataError);    // 'p' = 48 + 64
  EXPECT_THROW(rle_from_string("ooooooo0", "x"), DataError);
  EXPECT_THROW(rle_from_string("L", "x"), DataError);     // first run -4
  try {
    rle_from_string("3 5", "f.json: $.x");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("f.json: $.x"), std::string::npos) << e.message();
  }
}

TEST(CocoJson, RoundTripThroughTheWriter) {
  const CocoFile f = parse_coco_json(std::string(test::kAllKinds), "all.json");
  for (int indent : {-1, 2}) {
    const std::string text = to_coco_json(f, indent);
    const CocoFile g = parse_coco_json(text, "again.json");
    EXPECT_EQ(g.images, f.images);
    EXPECT_EQ(g.categories, f.categories);
    EXPECT_EQ(g.annotations, f.annotations);
    EXPECT_EQ(to_coco_json(g, indent), text);
  }
  // The compressed RLE is written back as the same string.
  const auto j = nlohmann::json::parse(to_coco_json(f));
  EXPECT_EQ(j["annotations"][2]["segmentation"]["counts"], "352L");
  EXPECT_EQ(j["annotations"][3]["segmentation"]["counts"], "T3`04");
  EXPECT_EQ(j["annotations"][1]["segmentation"]["counts"], nlohmann::json::array({1, 2, 3, 2, 4}));
  EXPECT_TRUE(j["categories"][1]["supercategory"].is_null());

  test::TempDir dir("rt");
  write_coco_json(f, dir / "out.json");
  const CocoFile h = read_coco_json(dir / "out.json");
  EXPECT_EQ(h.source, dir / "out.json");
  EXPECT_EQ(h.annotations, f.annotations);
}

TEST(CocoJson, CategoryConventions) {
  const CocoFile f = parse_coco_json(std::string(test::kAllKinds), "all.json");
  // Mask R-CNN: sorted ids 1, 3, 5 -> 1, 2, 3 (0 is the background).
  EXPECT_EQ(contiguous_category_index(f), (std::map<std::int64_t, std::int64_t>{{1, 1}, {3, 2}, {5, 3}}));
  EXPECT_EQ(contiguous_category_index(f, 0), (std::map<std::int64_t, std::int64_t>{{1, 0}, {3, 1}, {5, 2}}));
  // OpenImages: ids must be 0..K-1; 5 is not.
  try {
    direct_category_index(f);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("all.json: $.categories[1].id"), std::string::npos) << e.message();
  }
  const CocoFile g = parse_coco_json(
      std::string(R"({"images": [], "categories": [{"id": 1, "name": "b"}, {"id": 0, "name": "a"}]})"), "g.json");
  EXPECT_EQ(direct_category_index(g), (std::map<std::int64_t, std::int64_t>{{0, 0}, {1, 1}}));
}

namespace {

// The hand-written file with one change at a JSON pointer.
std::string with(const std::string& pointer, const nlohmann::json& value) {
  auto j = nlohmann::json::parse(test::kAllKinds);
  j[nlohmann::json::json_pointer(pointer)] = value;
  return j.dump();
}
std::string without(const std::string& pointer) {
  auto j = nlohmann::json::parse(test::kAllKinds);
  const nlohmann::json::json_pointer p(pointer);
  j[p.parent_pointer()].erase(p.back());
  return j.dump();
}

void expect_error(const std::string& text, const std::string& expected, int line) {
  try {
    parse_coco_json(text, "bad.json");
    ADD_FAILURE_AT(__FILE__, line) << "no error; expected " << expected;
  } catch (const DataError& e) {
    EXPECT_EQ(e.message().rfind("bad.json: ", 0), 0u) << "line " << line << ": " << e.message();
    EXPECT_NE(e.message().find(expected), std::string::npos) << "line " << line << ": " << e.message();
  }
}

}  // namespace

#define EXPECT_COCO_ERROR(text, expected) expect_error(text, expected, __LINE__)

TEST(CocoJson, EachValidationErrorNamesFileAndPath) {
  EXPECT_COCO_ERROR(with("/images/1/id", 10), "$.images[1].id: duplicate image id 10");
  EXPECT_COCO_ERROR(with("/categories/2/id", 1), "$.categories[2].id: duplicate category id 1");
  EXPECT_COCO_ERROR(with("/annotations/3/id", 1), "$.annotations[3].id: duplicate annotation id 1");
  EXPECT_COCO_ERROR(with("/annotations/0/image_id", 11), "$.annotations[0].image_id: no image has id 11");
  EXPECT_COCO_ERROR(with("/annotations/4/category_id", 2), "$.annotations[4].category_id: no category has id 2");
  EXPECT_COCO_ERROR(with("/annotations/0/bbox/2", -1), "$.annotations[0].bbox[2]: negative width");
  EXPECT_COCO_ERROR(with("/annotations/0/bbox/3", -0.5), "$.annotations[0].bbox[3]: negative height");
  EXPECT_COCO_ERROR(with("/annotations/0/bbox", {1, 2, 3}), "$.annotations[0].bbox: expected [x, y, w, h]");
  EXPECT_COCO_ERROR(with("/annotations/0/bbox/1", "7"), "$.annotations[0].bbox[1]: expected a number, found string");
  EXPECT_COCO_ERROR(with("/annotations/0/area", nullptr), "$.annotations[0].area: expected a number");
  EXPECT_COCO_ERROR(with("/annotations/0/iscrowd", 2), "$.annotations[0].iscrowd: expected 0 or 1");
  EXPECT_COCO_ERROR(with("/annotations/0/segmentation/0", {1, 2, 3, 4, 5, 6, 7}),
                    "$.annotations[0].segmentation[0]: a polygon needs an even number >= 6");
  EXPECT_COCO_ERROR(with("/annotations/0/segmentation/1", {1, 2, 3, 4}),
                    "$.annotations[0].segmentation[1]: a polygon needs an even number >= 6");
  EXPECT_COCO_ERROR(with("/annotations/0/segmentation/1/3", "x"), "$.annotations[0].segmentation[1][3]: expected a number");
  EXPECT_COCO_ERROR(with("/annotations/0/segmentation", 5), "$.annotations[0].segmentation: expected polygons or an RLE");
  EXPECT_COCO_ERROR(with("/annotations/1/segmentation/counts/4", 5),
                    "$.annotations[1].segmentation.counts: runs sum to 13, the mask 3x4 has 12 pixels");
  EXPECT_COCO_ERROR(with("/annotations/1/segmentation/counts/1", -2), "$.annotations[1].segmentation.counts[1]: run -2 out of range");
  EXPECT_COCO_ERROR(with("/annotations/1/segmentation/size", {3}), "$.annotations[1].segmentation.size: expected [height, width]");
  EXPECT_COCO_ERROR(without("/annotations/1/segmentation/size"), "$.annotations[1].segmentation.size: missing");
  EXPECT_COCO_ERROR(with("/annotations/2/segmentation/counts", "352"),
                    "$.annotations[2].segmentation.counts: runs sum to 10, the mask 1x11 has 11 pixels");
  EXPECT_COCO_ERROR(with("/annotations/2/segmentation/counts", "35 L"), "$.annotations[2].segmentation.counts: compressed RLE");
  EXPECT_COCO_ERROR(with("/images/0/height", 0), "$.images[0].height: 0 is not a positive size");
  EXPECT_COCO_ERROR(with("/images/1/width", 2.5), "$.images[1].width: expected an integer, found 2.5");
  EXPECT_COCO_ERROR(with("/images/0/id", "10"), "$.images[0].id: expected an integer, found string");
  EXPECT_COCO_ERROR(with("/images/0/file_name", 3), "$.images[0].file_name: expected a string");
  EXPECT_COCO_ERROR(without("/images/0/file_name"), "$.images[0].file_name: missing");
  EXPECT_COCO_ERROR(with("/categories/0/supercategory", 1), "$.categories[0].supercategory: expected a string");
  EXPECT_COCO_ERROR(without("/categories"), "$.categories: missing");
  EXPECT_COCO_ERROR(with("/images", nlohmann::json::object()), "$.images: expected an array, found object");
  EXPECT_COCO_ERROR(with("/annotations/2", 3), "$.annotations[2]: expected an object, found number");
  EXPECT_COCO_ERROR(with("/images/1/id", 18446744073709551615ull), "$.images[1].id: integer out of range");
  // Numbers beyond double range are refused by the parser.
  std::string huge = with("/annotations/0/bbox/0", 1.0);
  huge.replace(huge.find("[1.0,"), 5, "[1e999,");
  EXPECT_COCO_ERROR(huge, "not valid JSON: [json.exception.out_of_range.406] number overflow parsing '1e999'");
  // Finite doubles beyond float range cannot be boxes.
  EXPECT_COCO_ERROR(with("/annotations/0/bbox/0", 1e300), "$.annotations[0].bbox[0]: out of float range");
  // Not JSON, not an object, too deep, too large.
  EXPECT_COCO_ERROR("{\"images\": [", "not valid JSON");
  EXPECT_COCO_ERROR("[]", "$: expected an object, found array");
  EXPECT_COCO_ERROR(std::string(100000, '[') + std::string(100000, ']'), "nested deeper than 32 levels at byte 32");
  CocoReadOptions small;
  small.max_bytes = 100;
  EXPECT_THROW(parse_coco_json(std::string(test::kAllKinds), "bad.json", small), DataError);
}

TEST(CocoJson, MissingFileIsADataErrorNamingIt) {
  try {
    read_coco_json("/nonexistent/instances.json");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("/nonexistent/instances.json"), std::string::npos) << e.message();
  }
}
