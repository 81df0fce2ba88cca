// .npy / .npz: round trips, memory maps, truncation and hand-made malformed files.
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "benchhost/data/npy.hpp"
#include "data_test_util.hpp"

using namespace benchhost;
using namespace benchhost::data;
using bh_data_test::malformed;
using bh_data_test::TempDir;

namespace {

Tensor sample_tensor(DType dt, const Shape& shape) {
  Tensor t = Tensor::empty(shape, dt);
  auto* p = static_cast<std::uint8_t*>(t.raw_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(i * 37 + 11);
  if (dt == DType::boolean)
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  if (dt == DType::f32 || dt == DType::f64 || dt == DType::f16) {  // keep floats finite
    auto v = Tensor::empty(shape, DType::f64);
    for (std::int64_t i = 0; i < v.numel(); ++i) v.data<double>()[i] = 0.25 * static_cast<double>(i) - 3;
    t = v.to(dt);
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()) == 0;
}

// The same array with a version 2.0 or 3.0 header (4-byte header length).
std::vector<std::uint8_t> with_version(const std::vector<std::uint8_t>& v1, int major) {
  const std::size_t len = v1[8] | (v1[9] << 8);
  std::vector<std::uint8_t> out(v1.begin(), v1.begin() + 8);
  out[6] = static_cast<std::uint8_t>(major);
  const std::uint32_t len2 = static_cast<std::uint32_t>(len);  // keep the dict; 2 bytes more of prefix
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(len2 >> (8 * i)));
  out.insert(out.end(), v1.begin() + 10, v1.end());
  return out;
}

}  // namespace

TEST(Npy, RoundTripsEveryDtypeAndVersion) {
  TempDir dir;
  const DType types[] = {DType::f32, DType::f64, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean};
  for (DType dt : types) {
    for (const Shape& shape : {Shape{}, Shape{5}, Shape{3, 4}, Shape{2, 0, 3}, Shape{2, 3, 4}}) {
      const Tensor t = sample_tensor(dt, shape);
      const std::string path = dir.file(std::string("a_") + dtype_name(dt) + ".npy");
      write_npy(path, t);
      EXPECT_TRUE(same_bytes(read_npy(path), t)) << dtype_name(dt) << " " << shape_str(shape);
      EXPECT_TRUE(same_bytes(map_npy(path), t)) << dtype_name(dt) << " " << shape_str(shape);
      for (int major : {2, 3}) {
        auto bytes = with_version(encode_npy(t), major);
        const auto h = parse_npy_header(bytes, "v");
        EXPECT_EQ(h.major_version, major);
        EXPECT_TRUE(same_bytes(parse_npy(bytes, "v"), t));
      }
    }
  }
  // Headers are padded so the data is 64-byte aligned, like numpy's.
  EXPECT_EQ(parse_npy_header(encode_npy(sample_tensor(DType::f32, {3})), "x").data_offset % 64, 0u);
}

TEST(Npy, MappedTensorOutlivesItsFileAndWritesStayPrivate) {
  TempDir dir;
  const std::string path = dir.file("m.npy");
  const Tensor t = sample_tensor(DType::f32, {64, 3});
  write_npy(path, t);
  Tensor m = map_npy(path);
  std::filesystem::remove(path);  // the mapping keeps the data alive
  EXPECT_TRUE(same_bytes(m, t));
  m.data<float>()[0] = 1234.5f;  // copy-on-write page: allowed, not written back
  EXPECT_EQ(m.data<float>()[0], 1234.5f);
}

TEST(Npy, EveryTruncationIsRefused) {
  const auto bytes = encode_npy(sample_tensor(DType::i32, {7, 3}));
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + n);
    EXPECT_THROW(parse_npy(cut, "cut.npy"), DataError) << "length " << n;
  }
}

TEST(Npy, HandMadeMalformedFiles) {
  EXPECT_DATA_ERROR(read_npy(malformed("npy_truncated_header.npy")), "truncated");
  EXPECT_DATA_ERROR(read_npy(malformed("npy_absurd_shape.npy")), "npy_absurd_shape.npy");
  EXPECT_DATA_ERROR(read_npy(malformed("npy_bad_magic.npy")), "bad magic");
  EXPECT_DATA_ERROR(read_npy(malformed("npy_wrong_dtype.npy")), "'<c16'");
  EXPECT_DATA_ERROR(read_npy(malformed("npy_fortran.npy")), "Fortran");
  EXPECT_DATA_ERROR(map_npy(malformed("npy_fortran.npy")), "Fortran");
  EXPECT_DATA_ERROR(read_npy(malformed("npy_truncated_data.npy")), "truncated");
  EXPECT_DATA_ERROR(read_npy(malformed("npy_bad_header_len.npy")), "truncated");
  EXPECT_DATA_ERROR(read_npy(malformed("does_not_exist.npy")), "cannot open");
  EXPECT_DATA_ERROR(parse_npy(std::vector<std::uint8_t>{0x93, 'N', 'U', 'M', 'P', 'Y', 9, 0, 0, 0}, "v9"), "version 9");
}

// Found by fuzz_datasets (a KiTS19 volume): a zero dimension hid the overflow of the others in the
// header check, and mapping the file overflowed the strides.
TEST(Npy, DimensionsPastAZeroOneThatOverflowAreADataError) {
  TempDir dir;
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5888088888808888, 8888, 1), }";
  std::vector<std::uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<std::uint8_t>(dict.size() + 1), 0};
  bytes.insert(bytes.end(), dict.begin(), dict.end());
  bytes.push_back('\n');
  const std::string path = dir.file("zero_then_huge.npy");
  bh_data_test::write_bytes(path, bytes);
  EXPECT_DATA_ERROR(parse_npy(bytes, "zero_then_huge.npy"), "overflows");
  EXPECT_DATA_ERROR(read_npy(path), "zero_then_huge.npy");
  EXPECT_DATA_ERROR(map_npy(path), "zero_then_huge.npy");
  // A zero dimension beside sane ones is an empty array, as numpy writes it.
  const Tensor empty = parse_npy(encode_npy(Tensor::empty({0, 5, 3}, DType::f32)), "empty.npy");
  EXPECT_EQ(empty.shape(), (Shape{0, 5, 3}));
}

TEST(Npz, RoundTripStoredAndDeflated) {
  TempDir dir;
  std::vector<std::pair<std::string, Tensor>> arrays = {
      {"dense", sample_tensor(DType::f32, {10, 13})},
      {"sparse", sample_tensor(DType::i64, {10, 3})},
      {"labels", sample_tensor(DType::u8, {10})},
      {"empty", sample_tensor(DType::f64, {0})}};
  for (bool compress : {false, true}) {
    const std::string path = dir.file(compress ? "c.npz" : "s.npz");
    write_npz(path, arrays, compress);
    const auto back = read_npz(path);
    ASSERT_EQ(back.size(), arrays.size());
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      EXPECT_EQ(back[i].first, arrays[i].first);
      EXPECT_TRUE(same_bytes(back[i].second, arrays[i].second)) << arrays[i].first;
    }
  }
}

TEST(Npz, CorruptionAndTruncationAreRefused) {
  TempDir dir;
  const std::string path = dir.file("c.npz");
  write_npz(path, {{"a", sample_tensor(DType::f32, {100})}, {"b", sample_tensor(DType::i32, {50})}}, true);
  const auto bytes = bh_data_test::read_bytes(path);
  // Every truncation point (the end record is what is cut first, then the directory, then data).
  for (std::size_t n = 0; n < bytes.size(); n += 5) {
    bh_data_test::write_bytes(path, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + n));
    EXPECT_THROW(read_npz(path), DataError) << "length " << n;
  }
  // A flipped bit inside the deflated data of the first member.
  auto flipped = bytes;
  flipped[60] ^= 0x10;
  bh_data_test::write_bytes(path, flipped);
  EXPECT_THROW(read_npz(path), DataError);
  EXPECT_DATA_ERROR(read_npz(malformed("npz_bad_crc.npz")), "CRC");
  EXPECT_DATA_ERROR(read_npz(malformed("npz_bad_offset.npz")), "local header offset");
  EXPECT_DATA_ERROR(read_npz(malformed("npz_truncated.npz")), "npz_truncated.npz");
  EXPECT_DATA_ERROR(read_npz(malformed("npz_bad_cd_offset.npz")), "central directory");
  EXPECT_DATA_ERROR(read_npz(malformed("npy_fortran.npy")), "not a zip");
}

TEST(Npy, DatasetOverMappedFiles) {
  TempDir dir;
  write_npy(dir.file("x.npy"), sample_tensor(DType::f32, {6, 4}));
  write_npy(dir.file("y.npy"), sample_tensor(DType::i64, {6}));
  write_npy(dir.file("z.npy"), sample_tensor(DType::i64, {5}));
  NpyDataset ds({{"x", dir.file("x.npy")}, {"y", dir.file("y.npy")}});
  EXPECT_EQ(ds.size(), 6);
  auto s = ds.get(4);
  EXPECT_EQ(s["x"].shape(), (Shape{4}));
  EXPECT_EQ(s["x"].to_float_vector(), sample_tensor(DType::f32, {6, 4}).select(0, 4).to_float_vector());
  EXPECT_NE(ds.source(4).find("x.npy[4]"), std::string::npos);
  EXPECT_THROW(NpyDataset({{"x", dir.file("x.npy")}, {"z", dir.file("z.npy")}}), DataError);
}

TEST(Npz, Zip64DirectoryIsUnderstood) {
  // A small archive written the way zip64 writers do for large members: saturated 32-bit fields
  // in the central directory, the real values in extra field 0x0001, and a zip64 end record.
  const Tensor t = sample_tensor(DType::i32, {5, 2});
  const auto member = encode_npy(t);
  std::vector<std::uint8_t> z;
  auto p16 = [&](std::uint32_t v) { z.push_back(v & 0xff); z.push_back((v >> 8) & 0xff); };
  auto p32 = [&](std::uint32_t v) { p16(v & 0xffff); p16(v >> 16); };
  auto p64 = [&](std::uint64_t v) { p32(static_cast<std::uint32_t>(v)); p32(static_cast<std::uint32_t>(v >> 32)); };
  const std::string name = "big.npy";
  // crc32 of the member, computed bitwise (the test does not link zlib).
  std::uint32_t crc = 0xffffffffu;
  for (auto b : member) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xffffffffu;
  p32(0x04034b50); p16(45); p16(0); p16(0); p16(0); p16(0x21); p32(crc); p32(0xffffffffu); p32(0xffffffffu);
  p16(static_cast<std::uint32_t>(name.size())); p16(20);
  z.insert(z.end(), name.begin(), name.end());
  p16(1); p16(16); p64(member.size()); p64(member.size());
  z.insert(z.end(), member.begin(), member.end());
  const std::uint64_t cd_offset = z.size();
  p32(0x02014b50); p16(45); p16(45); p16(0); p16(0); p16(0); p16(0x21); p32(crc); p32(0xffffffffu); p32(0xffffffffu);
  p16(static_cast<std::uint32_t>(name.size())); p16(28); p16(0); p16(0); p16(0); p32(0); p32(0xffffffffu);
  z.insert(z.end(), name.begin(), name.end());
  p16(1); p16(24); p64(member.size()); p64(member.size()); p64(0);
  const std::uint64_t cd_size = z.size() - cd_offset, z64_offset = z.size();
  p32(0x06064b50); p64(44); p16(45); p16(45); p32(0); p32(0); p64(1); p64(1); p64(cd_size); p64(cd_offset);
  p32(0x07064b50); p32(0); p64(z64_offset); p32(1);
  p32(0x06054b50); p16(0); p16(0); p16(0xffff); p16(0xffff); p32(0xffffffffu); p32(0xffffffffu); p16(0);
  TempDir dir;
  bh_data_test::write_bytes(dir.file("z64.npz"), z);
  const auto back = read_npz(dir.file("z64.npz"));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].first, "big");
  EXPECT_TRUE(same_bytes(back[0].second, t));
  // The same archive with the zip64 record's directory offset pointing past the end.
  auto bad = z;
  bad[z64_offset + 48 + 4] = 0x7f;
  bh_data_test::write_bytes(dir.file("bad64.npz"), bad);
  EXPECT_DATA_ERROR(read_npz(dir.file("bad64.npz")), "central directory");

  // npz_members (what a reader that maps members in place uses) locates the member inside the file.
  const auto members = npz_members(z, "z64.npz");
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].name, "big.npy");
  EXPECT_EQ(members[0].size, member.size());
  EXPECT_TRUE(std::equal(member.begin(), member.end(), z.begin() + static_cast<std::ptrdiff_t>(members[0].data_offset)));
  // Crafted values near 2^64 in every 64-bit field (what crashed the Criteo reader's own zip
  // parser): each is a DataError, never a read outside the file.
  const std::size_t local_in_extra = cd_offset + 46 + name.size() + 4 + 16;
  for (const std::size_t at : {z64_offset + 48, z64_offset + 40, z64_offset + 32, local_in_extra,
                               local_in_extra - 8, local_in_extra - 16, z.size() - 22 - 20 + 8}) {
    auto crafted = z;
    const std::uint64_t near_max = ~std::uint64_t{0} - 40;
    std::memcpy(crafted.data() + at, &near_max, 8);
    EXPECT_THROW(npz_members(crafted, "crafted.npz"), DataError) << "64-bit field at byte " << at;
  }
}
