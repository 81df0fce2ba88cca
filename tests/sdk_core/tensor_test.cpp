#include <gtest/gtest.h>

#include <limits>

#include "benchhost/tensor.hpp"

using namespace benchhost;

TEST(Tensor, CreateViewsAndCopies) {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_TRUE(t.is_contiguous());
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_DOUBLE_EQ(tt.item({2, 1}), 6.0);
  EXPECT_EQ(tt.contiguous().to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.to_float_vector(), (std::vector<float>{2, 3, 5, 6}));
  EXPECT_EQ(t.view({-1}).shape(), (Shape{6}));
  EXPECT_THROW(tt.view({6}), InvalidArgument);
  EXPECT_EQ(tt.reshape({6}).to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(t.permute({1, 0}).shape(), (Shape{3, 2}));
  EXPECT_DOUBLE_EQ(t.select(0, 1).item({0}), 4.0);
}

TEST(Tensor, DtypeConversionsRoundTrip) {
  Tensor t = Tensor::from_vector({0.5f, -2.0f, 65504.0f, 1e-6f}, {4});
  auto h = t.to(DType::f16).to(DType::f32).to_float_vector();
  EXPECT_FLOAT_EQ(h[0], 0.5f);
  EXPECT_FLOAT_EQ(h[1], -2.0f);
  EXPECT_FLOAT_EQ(h[2], 65504.0f);
  EXPECT_NEAR(h[3], 1e-6f, 1e-7f);
  auto b = t.to(DType::bf16).to_float_vector();
  EXPECT_FLOAT_EQ(b[1], -2.0f);
  EXPECT_FLOAT_EQ(e4m3_to_float(float_to_e4m3(448.0f)), 448.0f);
  EXPECT_FLOAT_EQ(e4m3_to_float(float_to_e4m3(1000.0f)), 448.0f);  // saturates
  EXPECT_FLOAT_EQ(e4m3_to_float(float_to_e4m3(0.3125f)), 0.3125f);
  EXPECT_FLOAT_EQ(e5m2_to_float(float_to_e5m2(57344.0f)), 57344.0f);
  EXPECT_FLOAT_EQ(e5m2_to_float(float_to_e5m2(-0.75f)), -0.75f);
  // every e4m3 code round-trips
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    float f = e4m3_to_float(static_cast<std::uint8_t>(c));
    EXPECT_EQ(float_to_e4m3(f) & 0x7f, c & 0x7f) << c;
  }
  for (int c = 0; c < 65536; c += 7) {
    float f = half_to_float(static_cast<std::uint16_t>(c));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), c) << c;
  }
}

TEST(Device, ParseAndAvailability) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_THROW(parse_device("gpu"), InvalidArgument);
  EXPECT_THROW(parse_device("cuda:-1"), InvalidArgument);
  std::string why;
  EXPECT_TRUE(device_available(Device::cpu(), &why));
}

TEST(Allocator, TracksPeakAndCurrent) {
  Allocator& a = allocator_for(Device::cpu());
  a.reset_peak();
  auto before = a.stats().current_bytes;
  {
    Tensor t = Tensor::empty({1024, 1024});
    EXPECT_GE(a.stats().current_bytes, before + 4u * 1024 * 1024);
  }
  EXPECT_EQ(a.stats().current_bytes, before);
  EXPECT_GE(a.stats().peak_bytes, before + 4u * 1024 * 1024);
}

TEST(Allocator, HugeRequestIsTypedOom) {
  try {
    Tensor t = Tensor::empty({std::int64_t(1) << 46});
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested_bytes(), (std::size_t(1) << 46) * 4);
  }
}

TEST(Allocator, CpuCachesLargeBlocks) {
  Allocator& a = allocator_for(Device::cpu());
  void* p1 = a.allocate(8 << 20);
  a.deallocate(p1, 8 << 20);
  void* p2 = a.allocate((8 << 20) - 1000);  // within the reuse slack
  EXPECT_EQ(p1, p2);
  auto s = a.stats();
  EXPECT_GE(s.reserved_bytes, s.current_bytes);
  a.deallocate(p2, (8 << 20) - 1000);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes, a.stats().current_bytes);
}

// Found by fuzz_idx: converting 1.7e22 to i64 was undefined behaviour. Now NaN is 0 and values out
// of range clamp to the integer type's ends.
TEST(Tensor, FloatToIntegerConversionSaturates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> in = {1.7e22, -1.7e22, nan, 3.7, -2.5, 300.0};
  Tensor v = Tensor::empty({6}, DType::f64);
  for (std::size_t i = 0; i < in.size(); ++i) v.data<double>()[i] = in[i];
  const Tensor i64 = v.to(DType::i64), i32 = v.to(DType::i32), u8 = v.to(DType::u8);
  const std::vector<std::int64_t> want64 = {std::numeric_limits<std::int64_t>::max(),
                                            std::numeric_limits<std::int64_t>::min(), 0, 3, -2, 300};
  const std::vector<std::int32_t> want32 = {std::numeric_limits<std::int32_t>::max(),
                                            std::numeric_limits<std::int32_t>::min(), 0, 3, -2, 300};
  const std::vector<std::uint8_t> want8 = {255, 0, 0, 3, 0, 255};
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(i64.data<std::int64_t>()[i], want64[i]) << in[i];
    EXPECT_EQ(i32.data<std::int32_t>()[i], want32[i]) << in[i];
    EXPECT_EQ(u8.data<std::uint8_t>()[i], want8[i]) << in[i];
  }
}

TEST(Tensor, ShapesWhoseSizeOrStridesOverflowAreRefused) {
  // A zero dimension makes numel 0, but the strides multiply the dimensions to its right.
  EXPECT_THROW(Tensor::empty({0, std::int64_t{1} << 40, std::int64_t{1} << 40}, DType::u8), InvalidArgument);
  EXPECT_THROW(Tensor::empty({std::int64_t{1} << 62, 4}, DType::f32), InvalidArgument);
  EXPECT_THROW(Tensor::empty({3, -1}, DType::f32), InvalidArgument);
  EXPECT_EQ(Tensor::empty({0, 1 << 20, 1 << 20}, DType::u8).numel(), 0);
  const Tensor t = Tensor::zeros({4, 6}, DType::f32);
  EXPECT_THROW(t.view({-1, std::int64_t{1} << 40, std::int64_t{1} << 40}), InvalidArgument);
  EXPECT_EQ(t.view({-1, 3}).shape(), (Shape{8, 3}));
  // contiguous_strides on its own (readers that wrap a mapped file call it before any tensor
  // checks the shape): found by fuzz_datasets through a .npy header.
  EXPECT_THROW(contiguous_strides({0, 5888088888808888, 8888, 1}), InvalidArgument);
  EXPECT_EQ(contiguous_strides({0, 1 << 20, 3}), (Shape{3 << 20, 3, 1}));
}
