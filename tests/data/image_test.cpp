// JPEG/PNG decoding and the augmentations.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "benchhost/data/file.hpp"
#include "benchhost/data/image.hpp"
#include "benchhost/data/pipeline.hpp"
#include "data_test_util.hpp"

using namespace benchhost;
using namespace benchhost::data;
using bh_data_test::malformed;
using bh_data_test::TempDir;

namespace {

// A smooth deterministic colour pattern (compresses well, survives JPEG closely).
Tensor pattern(int h, int w, int c = 3) {
  Tensor t = Tensor::empty({h, w, c}, DType::u8);
  auto* p = t.data<std::uint8_t>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        p[(y * w + x) * c + k] = static_cast<std::uint8_t>(
            127.5 + 120 * std::sin(0.05 * x * (k + 1) + 0.03 * y) * std::cos(0.02 * y * (2 - k % 2)));
  return t;
}

double mean_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto av = a.to_float_vector(), bv = b.to_float_vector();
  double s = 0;
  for (std::size_t i = 0; i < av.size(); ++i) s += std::abs(av[i] - bv[i]);
  return av.empty() ? 0 : s / static_cast<double>(av.size());
}

}  // namespace

TEST(Image, PngRoundTripIsExact) {
  for (int c : {1, 3}) {
    const Tensor img = pattern(37, 53, c);
    const auto png = encode_png(img);
    EXPECT_EQ(sniff_image_format(png), "png");
    const Tensor back = decode_png(png, "p.png", c);
    EXPECT_EQ(mean_abs_diff(back, img), 0.0);
    const auto info = read_image_info(png, "p.png");
    EXPECT_EQ(info.height, 37);
    EXPECT_EQ(info.width, 53);
  }
  // Grey PNG decoded as RGB repeats the channel.
  const Tensor grey = pattern(8, 8, 1);
  const Tensor rgb = decode_png(encode_png(grey), "g.png", 3);
  EXPECT_EQ(rgb.item({3, 4, 2}), grey.item({3, 4, 0}));
}

TEST(Image, JpegRoundTripAndDctScaling) {
  const Tensor img = pattern(120, 160);
  const auto jpg = encode_jpeg(img, 95);
  EXPECT_EQ(sniff_image_format(jpg), "jpeg");
  const Tensor back = decode_jpeg(jpg, "a.jpg");
  EXPECT_LT(mean_abs_diff(back, img), 3.0);
  for (int s : {2, 4, 8}) {
    const Tensor small = decode_jpeg(jpg, "a.jpg", {s, 3});
    EXPECT_EQ(small.size(0), (120 + s - 1) / s);
    EXPECT_EQ(small.size(1), (160 + s - 1) / s);
    EXPECT_LT(mean_abs_diff(small, resize_bilinear(img, static_cast<int>(small.size(0)), static_cast<int>(small.size(1)))), 8.0);
  }
  EXPECT_EQ(decode_jpeg(jpg, "a.jpg", {1, 1}).size(2), 1);
  EXPECT_THROW(decode_jpeg(jpg, "a.jpg", {3, 3}), InvalidArgument);
}

TEST(Image, JpegRegionDecodeMatchesCropOfFullDecode) {
  const Tensor img = pattern(256, 320);
  const auto jpg = encode_jpeg(img, 95);
  const Tensor full = decode_jpeg(jpg, "r.jpg");
  const CropBox box{37, 61, 150, 170};
  // No scaling allowed (min size = crop size): exactly the same pixels as cropping a full decode.
  DecodedRegion r = decode_jpeg_region(jpg, "r.jpg", box, 150, 170);
  EXPECT_EQ(r.box.height, 150);
  EXPECT_EQ(r.box.width, 170);
  EXPECT_EQ(mean_abs_diff(crop(r.image, r.box), crop(full, box)), 0.0);
  // With a small target the decoder shrinks by 2 and still covers the window.
  DecodedRegion s = decode_jpeg_region(jpg, "r.jpg", box, 60, 60);
  EXPECT_EQ(s.box.height, 75);
  EXPECT_EQ(s.box.width, 85);
  EXPECT_LE(s.box.top + s.box.height, s.image.size(0));
  EXPECT_LE(s.box.left + s.box.width, s.image.size(1));
  EXPECT_LT(mean_abs_diff(crop(s.image, s.box), resize_bilinear(crop(full, box), 75, 85)), 8.0);
}

TEST(Image, TruncatedAndCorruptImagesAreRefused) {
  const auto jpg = encode_jpeg(pattern(64, 64), 90);
  const auto png = encode_png(pattern(64, 64));
  for (double frac : {0.0, 0.01, 0.3, 0.6, 0.95}) {
    const auto n = static_cast<std::size_t>(frac * static_cast<double>(jpg.size()));
    std::vector<std::uint8_t> cut(jpg.begin(), jpg.begin() + n);
    EXPECT_THROW(decode_jpeg(cut, "cut.jpg"), DataError) << "jpeg length " << n;
    const auto m = static_cast<std::size_t>(frac * static_cast<double>(png.size()));
    std::vector<std::uint8_t> pcut(png.begin(), png.begin() + m);
    EXPECT_THROW(decode_png(pcut, "cut.png"), DataError) << "png length " << m;
  }
  try {
    decode_jpeg(std::vector<std::uint8_t>(jpg.begin(), jpg.begin() + jpg.size() / 2), "half.jpg");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("half.jpg"), std::string::npos) << e.what();
  }
  EXPECT_DATA_ERROR(read_image(malformed("png_absurd_size.png")), "png_absurd_size.png");
  EXPECT_DATA_ERROR(read_image(malformed("png_bad_crc.png")), "corrupt PNG");
  EXPECT_DATA_ERROR(read_image(malformed("jpeg_garbage.jpg")), "jpeg_garbage.jpg");
  EXPECT_DATA_ERROR(read_image(malformed("npy_fortran.npy")), "not a JPEG or PNG");
}

// A header that claims far more pixels than the file holds data for (16000x16000 from a 64x64
// file) is refused, whole or as a region, never decoded as whatever the decoder fills in.
TEST(Image, AJpegHeaderClaimingMoreThanItsDataIsRefused) {
  auto jpg = encode_jpeg(pattern(64, 64), 90);
  std::size_t sof = 0;
  for (std::size_t i = 0; i + 9 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && (jpg[i + 1] == 0xC0 || jpg[i + 1] == 0xC2)) {
      sof = i;
      break;
    }
  ASSERT_NE(sof, 0u);
  for (std::size_t at : {sof + 5, sof + 7}) {  // height, width: 16000 = 0x3E80
    jpg[at] = 0x3E;
    jpg[at + 1] = 0x80;
  }
  // Refused from the header, before its 768 MB are allocated (Note [JPEG pixels against the bytes
  // stored]), not when the decoder runs out of data.
  EXPECT_DATA_ERROR(decode_jpeg(jpg, "claims_16000.jpg"), "more than its");
  EXPECT_DATA_ERROR(decode_jpeg_region(jpg, "claims_16000.jpg", CropBox{1000, 2000, 4000, 4000}, 224, 224),
                    "more than its");
  // The bound holds for real files however well they compress: a flat 2048x2048 image.
  Tensor flat = Tensor::empty({2048, 2048, 3}, DType::u8);
  std::memset(flat.data<std::uint8_t>(), 128, static_cast<std::size_t>(flat.numel()));
  for (int quality : {5, 50}) {
    const auto small = encode_jpeg(flat, quality);
    const Tensor back = decode_jpeg(small, "flat.jpg");
    EXPECT_EQ(back.size(0), 2048);
    EXPECT_EQ(back.size(1), 2048);
  }
}

TEST(Image, RandomResizedCropFollowsTorchvisionRules) {
  Rng rng(1);
  int fallback_like = 0;
  for (int i = 0; i < 2000; ++i) {
    const int h = 50 + static_cast<int>(rng.below(400)), w = 50 + static_cast<int>(rng.below(400));
    const CropBox b = random_resized_crop_box(h, w, rng);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_GE(b.height, 1);
    ASSERT_GE(b.width, 1);
    ASSERT_LE(b.top + b.height, h);
    ASSERT_LE(b.left + b.width, w);
    const double area = static_cast<double>(b.height) * b.width / (static_cast<double>(h) * w);
    const double ratio = static_cast<double>(b.width) / b.height;
    if (area < 0.07 || ratio < 0.7 || ratio > 1.4) ++fallback_like;
  }
  EXPECT_LT(fallback_like, 40);  // rounding at tiny crops only
  // Same stream -> same window.
  Rng a(9, 3), b(9, 3);
  EXPECT_EQ(random_resized_crop_box(300, 400, a), random_resized_crop_box(300, 400, b));
  // Extreme aspect ratio: the 10 tries fail, the centre fallback clamps the ratio to 4/3.
  Rng c(2);
  const CropBox wide = random_resized_crop_box(10, 1000, c);
  EXPECT_EQ(wide.height, 10);
  EXPECT_EQ(wide.width, 13);
  EXPECT_EQ(wide.left, (1000 - 13) / 2);
  const CropBox eval = resize_center_crop_box(300, 400, 256, 224, 224);
  EXPECT_EQ(eval.height, 263);
  EXPECT_EQ(eval.width, 263);
  EXPECT_EQ(center_crop_box(10, 20, 4, 6), (CropBox{3, 7, 4, 6}));
}

TEST(Image, ResizeFlipNormalize) {
  const Tensor img = pattern(20, 30);
  EXPECT_EQ(mean_abs_diff(resize_bilinear(img, 20, 30), img), 0.0);  // identity
  Tensor flat = Tensor::full({9, 7, 3}, 77, DType::u8);
  Tensor r = resize_bilinear(flat, 4, 11);
  for (float v : r.to_float_vector()) EXPECT_EQ(v, 77);
  EXPECT_EQ(mean_abs_diff(hflip(hflip(img)), img), 0.0);
  EXPECT_EQ(hflip(img).item({2, 0, 1}), img.item({2, 29, 1}));
  const Normalization norm;
  Tensor n = normalize(img, norm, Layout::chw);
  EXPECT_EQ(n.shape(), (Shape{3, 20, 30}));
  EXPECT_NEAR(n.item({1, 4, 5}), (img.item({4, 5, 1}) / 255.0 - norm.mean[1]) / norm.std[1], 1e-5);
  Tensor nh = normalize(img, norm, Layout::hwc);
  EXPECT_NEAR(nh.item({4, 5, 2}), n.item({2, 4, 5}), 1e-6);
  // Fused crop-resize with flip == flip of the unflipped result.
  const CropBox box{2, 3, 15, 21};
  Tensor a = Tensor::empty({3, 12, 16}), b = Tensor::empty({3, 12, 16});
  resized_crop_normalize(img, box, 12, 16, false, norm, Layout::chw, a.data<float>());
  resized_crop_normalize(img, box, 12, 16, true, norm, Layout::chw, b.data<float>());
  for (int k = 0; k < 3; ++k)
    for (int y = 0; y < 12; ++y)
      for (int x = 0; x < 16; ++x) ASSERT_EQ(a.item({k, y, x}), b.item({k, y, 15 - x}));
  // And equals crop + resize + normalise done step by step (within u8 rounding).
  Tensor steps = normalize(resize_bilinear(crop(img, box), 12, 16), norm);
  EXPECT_LT(mean_abs_diff(a, steps), 0.01);
  EXPECT_THROW(crop(img, {15, 0, 10, 5}), InvalidArgument);
}

TEST(Image, FolderDatasetIsDeterministicAcrossThreads) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("root/cat"));
  std::filesystem::create_directories(dir.file("root/dog"));
  for (int i = 0; i < 6; ++i) {
    const Tensor img = pattern(40 + 10 * i, 60 + 7 * i);
    bh_data_test::write_bytes(dir.file("root/cat/" + std::to_string(i) + ".jpg"), encode_jpeg(img, 90));
    bh_data_test::write_bytes(dir.file("root/dog/" + std::to_string(i) + ".png"), encode_png(img));
  }
  ImageTransform t;
  t.out_height = t.out_width = 32;
  auto ds = ImageFileDataset::from_folder(dir.file("root"), t);
  ASSERT_EQ(ds->size(), 12);
  EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"cat", "dog"}));
  auto s = ds->get(SampleContext{7, 0, 1});
  EXPECT_EQ(s["image"].shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(s["label"].item(), 1);
  std::vector<std::vector<float>> per_threads;
  for (int threads : {1, 4}) {
    DataLoader l(ds, Sampler({12, 0, 1, true, 3}), {5, threads, 2, 0, false, Device::cpu(), 17});
    l.start_epoch(2);
    std::vector<float> all;
    while (auto b = l.next()) {
      auto v = (*b)["image"].to_float_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    per_threads.push_back(all);
  }
  EXPECT_EQ(per_threads[0], per_threads[1]);
  // A corrupt file in the folder surfaces with its path and index.
  bh_data_test::write_bytes(dir.file("root/cat/3.jpg"), std::vector<std::uint8_t>{0xFF, 0xD8, 0xFF, 0xE0, 0, 16});
  DataLoader l(ds, Sampler({12, 0, 1, false}), {4, 2});
  l.start_epoch(0);
  EXPECT_DATA_ERROR(while (l.next()) {}, "cat/3.jpg");
}

namespace {
std::uint32_t crc32_of(const std::uint8_t* p, std::size_t n, std::uint32_t crc = 0) {
  crc ^= 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xffffffffu;
}

// An 8-bit RGBA PNG written by hand: filter-0 rows in one stored (uncompressed) deflate block.
std::vector<std::uint8_t> rgba_png(int w, int h, const std::vector<std::uint8_t>& rgba) {
  std::vector<std::uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgba.begin() + y * w * 4, rgba.begin() + (y + 1) * w * 4);
  }
  std::vector<std::uint8_t> z{0x78, 0x01, 0x01, static_cast<std::uint8_t>(raw.size() & 0xff),
                              static_cast<std::uint8_t>(raw.size() >> 8), static_cast<std::uint8_t>(~raw.size() & 0xff),
                              static_cast<std::uint8_t>((~raw.size() >> 8) & 0xff)};
  z.insert(z.end(), raw.begin(), raw.end());
  std::uint32_t a = 1, b = 0;
  for (auto v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  const std::uint32_t adler = (b << 16) | a;
  for (int i = 3; i >= 0; --i) z.push_back(static_cast<std::uint8_t>(adler >> (8 * i)));
  std::vector<std::uint8_t> png{0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  auto chunk = [&](const char* type, const std::vector<std::uint8_t>& data) {
    for (int i = 3; i >= 0; --i) png.push_back(static_cast<std::uint8_t>(data.size() >> (8 * i)));
    std::vector<std::uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    png.insert(png.end(), body.begin(), body.end());
    const std::uint32_t crc = crc32_of(body.data(), body.size());
    for (int i = 3; i >= 0; --i) png.push_back(static_cast<std::uint8_t>(crc >> (8 * i)));
  };
  std::vector<std::uint8_t> ihdr;
  for (std::uint32_t v : {static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(h)})
    for (int i = 3; i >= 0; --i) ihdr.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  ihdr.insert(ihdr.end(), {8, 6, 0, 0, 0});  // 8-bit RGBA
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", {});
  return png;
}
}  // namespace

TEST(Image, PngAlphaIsDroppedNotComposited) {
  const int w = 5, h = 3;
  std::vector<std::uint8_t> rgba(static_cast<std::size_t>(w * h * 4));
  for (std::size_t i = 0; i < rgba.size(); ++i) rgba[i] = static_cast<std::uint8_t>(i * 29 + 3);
  const auto png = rgba_png(w, h, rgba);
  const Tensor rgb = decode_png(png, "rgba.png", 3);
  ASSERT_EQ(rgb.shape(), (Shape{h, w, 3}));
  for (int i = 0; i < w * h; ++i)
    for (int k = 0; k < 3; ++k) ASSERT_EQ(rgb.data<std::uint8_t>()[i * 3 + k], rgba[static_cast<std::size_t>(i * 4 + k)]);
  EXPECT_EQ(decode_png(png, "rgba.png", 1).shape(), (Shape{h, w, 1}));
  EXPECT_EQ(read_image_info(png, "rgba.png").channels, 4);
}
