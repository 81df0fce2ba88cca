// IDX files (gzipped or not) and Fashion-MNIST from Debian's dataset-fashion-mnist package.
#include <filesystem>

#include <gtest/gtest.h>

#include "benchhost/data/idx.hpp"
#include "data_test_util.hpp"

using namespace benchhost;
using namespace benchhost::data;
using bh_data_test::malformed;
using bh_data_test::TempDir;

TEST(Idx, RoundTripPlainAndGzipped) {
  TempDir dir;
  Tensor u8 = Tensor::empty({3, 5, 4}, DType::u8);
  for (std::int64_t i = 0; i < u8.numel(); ++i) u8.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 13);
  Tensor f32 = Tensor::from_vector({1.5f, -2.25f, 3e7f, 0.f}, {2, 2});
  Tensor i32 = Tensor::from_vector_i32({-7, 1 << 30, 0, 42, -100000}, {5});
  Tensor f64 = Tensor::from_vector({0.1f, 0.2f}, {2}).to(DType::f64);
  for (bool gz : {false, true}) {
    int k = 0;
    for (const Tensor& t : {u8, f32, i32, f64}) {
      const std::string path = dir.file("t" + std::to_string(k++) + (gz ? ".idx.gz" : ".idx"));
      write_idx(path, t, gz);
      Tensor back = read_idx(path);
      EXPECT_EQ(back.shape(), t.shape());
      EXPECT_EQ(back.dtype(), t.dtype());
      EXPECT_EQ(back.to_float_vector(), t.to_float_vector());
    }
  }
}

TEST(Idx, TruncationAndMalformedFilesAreRefused) {
  TempDir dir;
  Tensor t = Tensor::empty({10, 28, 28}, DType::u8);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 7 % 251);
  for (bool gz : {false, true}) {
    const std::string path = dir.file(gz ? "x.gz" : "x");
    write_idx(path, t, gz);
    const auto bytes = bh_data_test::read_bytes(path);
    for (std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{9}, bytes.size() / 2, bytes.size() - 9, bytes.size() - 1}) {
      bh_data_test::write_bytes(path, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + n));
      EXPECT_THROW(read_idx(path), DataError) << (gz ? "gz " : "plain ") << "length " << n;
    }
  }
  EXPECT_DATA_ERROR(read_idx(malformed("idx_bad_magic.idx")), "not an IDX file");
  EXPECT_DATA_ERROR(read_idx(malformed("idx_absurd_dims.idx")), "idx_absurd_dims.idx");
  EXPECT_DATA_ERROR(read_idx(malformed("idx_truncated.idx")), "truncated");
  EXPECT_DATA_ERROR(read_idx(malformed("idx_bad_type.idx")), "type 0x07");
  EXPECT_THROW(read_idx(malformed("idx_truncated.idx.gz")), DataError);
  EXPECT_DATA_ERROR(read_idx(dir.file("missing.idx")), "cannot open");
  // Found by fuzz_idx: a zero first dimension hid 7 huge ones from the size bound, and the
  // tensor's strides overflowed int64.
  const std::string zero_first = dir.file("zero_first.idx");
  bh_data_test::write_bytes(zero_first, {0, 0, 0x08, 7, 0, 0, 0, 0, 0, 0, 0x57, 0, 0, 1, 0, 0, 0, 0, 0x57, 0,
                                         0, 1, 0, 0, 0, 0, 0x57, 0, 0, 1, 0, 0});
  EXPECT_DATA_ERROR(read_idx(zero_first), "absurd IDX shape");
  // A header that promises far more than the file holds is refused without allocating it all.
  const std::string liar = dir.file("liar.idx");
  bh_data_test::write_bytes(liar, {0, 0, 0x08, 2, 0, 1, 0, 0, 0, 1, 0, 0, 1, 2, 3});
  EXPECT_DATA_ERROR(read_idx(liar), "needs 4294967296 data bytes, found 3");
}

TEST(Idx, ClassificationDataset) {
  TempDir dir;
  Tensor images = Tensor::empty({4, 2, 3}, DType::u8);
  for (std::int64_t i = 0; i < images.numel(); ++i) images.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 10);
  Tensor labels = Tensor::empty({4}, DType::u8);
  for (int i = 0; i < 4; ++i) labels.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(3 - i);
  write_idx(dir.file("img.gz"), images, true);
  write_idx(dir.file("lbl"), labels, false);
  IdxClassificationDataset ds(dir.file("img.gz"), dir.file("lbl"), 0.5f, 0.25f);
  ASSERT_EQ(ds.size(), 4);
  auto s = ds.get(1);
  EXPECT_EQ(s["image"].shape(), (Shape{1, 2, 3}));
  EXPECT_NEAR(s["image"].item({0, 0, 1}), (70 / 255.0 - 0.5) / 0.25, 1e-5);
  EXPECT_EQ(s["label"].item(), 2);
  IdxClassificationDataset raw(dir.file("img.gz"), dir.file("lbl"), 0, 1, true);
  EXPECT_EQ(raw.get(1)["image"].dtype(), DType::u8);
  Tensor few = Tensor::empty({3}, DType::u8);
  write_idx(dir.file("few"), few, false);
  EXPECT_DATA_ERROR(IdxClassificationDataset(dir.file("img.gz"), dir.file("few")), "3 labels");
  // Found by fuzz_idx: a label file of f64 holding 1.7e22 (its conversion to i64 was undefined).
  Tensor real = Tensor::from_vector({1.0f, 2.0f, 1.7e22f, 0.0f}, {4});
  write_idx(dir.file("real_labels"), real.to(DType::f64), false);
  EXPECT_DATA_ERROR(IdxClassificationDataset(dir.file("img.gz"), dir.file("real_labels")), "integer IDX type");
  EXPECT_DATA_ERROR(IdxClassificationDataset(dir.file("img.gz"), dir.file("real_labels")), "real_labels");
  // Signed integer labels (i32 after reading) are accepted as before.
  write_idx(dir.file("i32_labels"), labels.to(DType::i32), false);
  EXPECT_EQ(IdxClassificationDataset(dir.file("img.gz"), dir.file("i32_labels")).get(1)["label"].item(), 2);
}

TEST(FashionMnist, DebianPackageLoadsWithExactCounts) {
  const std::string root = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(root + "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)";
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", 60000}, {"t10k", 10000}}) {
    IdxClassificationDataset ds(root + split + "-images-idx3-ubyte.gz", root + split + "-labels-idx1-ubyte.gz");
    ASSERT_EQ(ds.size(), count) << split;
    EXPECT_EQ(ds.images().shape(), (Shape{count, 28, 28}));
    std::vector<int> per_class(10, 0);
    const auto* l = ds.labels().data<std::int64_t>();
    for (int i = 0; i < count; ++i) {
      ASSERT_GE(l[i], 0);
      ASSERT_LT(l[i], 10);
      per_class[static_cast<std::size_t>(l[i])]++;
    }
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], count / 10) << split << " class " << c;
    // Pixels are real images: not constant, full 0..255 range used.
    const auto* px = ds.images().data<std::uint8_t>();
    int lo = 255, hi = 0;
    for (int i = 0; i < 28 * 28 * 100; ++i) {
      lo = std::min<int>(lo, px[i]);
      hi = std::max<int>(hi, px[i]);
    }
    EXPECT_EQ(lo, 0);
    EXPECT_EQ(hi, 255);
  }
}
