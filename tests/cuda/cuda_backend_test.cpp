// CUDA device backend: these run on a machine with a GPU and skip visibly elsewhere.
#include <gtest/gtest.h>

#include <numeric>

#include "benchhost/tensor.hpp"

using namespace benchhost;

namespace {
bool have_gpu(std::string* why) { return device_available(Device::cuda(0), why); }
}  // namespace

#define REQUIRE_GPU()                                              \
  do {                                                             \
    std::string why_;                                              \
    if (!have_gpu(&why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)

TEST(CudaBackend, AvailabilityNeverThrows) {
  std::string why;
  bool ok = false;
  EXPECT_NO_THROW(ok = device_available(Device::cuda(0), &why));
  if (!ok) {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(Tensor::empty({4}, DType::f32, Device::cuda(0)), Error);
  }
}

TEST(CudaBackend, CopyRoundTrip) {
  REQUIRE_GPU();
  std::vector<float> v(1000);
  std::iota(v.begin(), v.end(), 0.0f);
  Tensor h = Tensor::from_vector(v, {10, 100});
  Tensor d = h.to(Device::cuda(0));
  EXPECT_TRUE(d.device().is_cuda());
  Tensor d2 = d.clone();
  EXPECT_EQ(d2.to(Device::cpu()).to_float_vector(), v);
  Tensor f = Tensor::full({3}, 2.5, DType::f32, Device::cuda(0));
  EXPECT_EQ(f.to_float_vector(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
}

TEST(CudaBackend, CachingAllocatorReusesBlocksAndTracksPeak) {
  REQUIRE_GPU();
  Allocator& a = allocator_for(Device::cuda(0));
  a.reset_peak();
  void* p1 = a.allocate(10 << 20);
  auto s1 = a.stats();
  a.deallocate(p1, 10 << 20);
  void* p2 = a.allocate(10 << 20);
  EXPECT_EQ(p1, p2) << "a freed block of the same size should be reused";
  EXPECT_EQ(a.stats().reserved_bytes, s1.reserved_bytes);
  EXPECT_GE(a.stats().peak_bytes, std::size_t(10) << 20);
  a.deallocate(p2, 10 << 20);
  a.empty_cache();
}

TEST(CudaBackend, OutOfMemoryIsTyped) {
  REQUIRE_GPU();
  const std::size_t huge = std::size_t(1) << 50;  // 1 PiB
  try {
    allocator_for(Device::cuda(0)).allocate(huge);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested_bytes(), huge);
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
  // The device still works afterwards.
  Tensor t = Tensor::zeros({16}, DType::f32, Device::cuda(0));
  EXPECT_EQ(t.to_float_vector(), std::vector<float>(16, 0.0f));
}

TEST(CudaBackend, StreamsAndPinnedCopies) {
  REQUIRE_GPU();
  DeviceBackend& b = device_backend(DeviceType::cuda);
  StreamHandle s = b.create_stream(0);
  Allocator& pinned = b.host_pinned_allocator();
  const std::size_t n = 1 << 20;
  auto* host = static_cast<float*>(pinned.allocate(n * sizeof(float)));
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 97);
  Tensor d = Tensor::empty({static_cast<std::int64_t>(n)}, DType::f32, Device::cuda(0));
  b.copy(d.raw_data(), Device::cuda(0), host, Device::cpu(), n * sizeof(float), s);
  b.synchronize(0, s);
  auto back = d.to_float_vector();
  for (std::size_t i = 0; i < n; i += 4099) EXPECT_EQ(back[i], static_cast<float>(i % 97));
  pinned.deallocate(host, n * sizeof(float));
  b.destroy_stream(0, s);
  auto env = b.environment();
  EXPECT_FALSE(env.empty());
}

// A copy on a side stream (the data loader's) is ordered after the work already queued on the
// default stream, where the ops run: it sees what that work wrote. Device-to-device copies do
// not block the host, so the fill below is still running when the side-stream copy is issued.
TEST(CudaBackend, SideStreamCopyWaitsForTheDefaultStream) {
  REQUIRE_GPU();
  DeviceBackend& b = device_backend(DeviceType::cuda);
  const std::int64_t n = std::int64_t(1) << 26;  // 256 MiB of f32
  Tensor d = Tensor::empty({n}, DType::f32, Device::cuda(0));
  d.fill_(3.0);
  StreamHandle s = b.create_stream(0);
  Allocator& pinned = b.host_pinned_allocator();
  auto* host = static_cast<float*>(pinned.allocate(sizeof(float)));
  *host = 0.0f;
  b.copy(host, Device::cpu(), d.data<float>() + (n - 1), Device::cuda(0), sizeof(float), s);
  b.synchronize(0, s);
  EXPECT_EQ(*host, 3.0f);
  pinned.deallocate(host, sizeof(float));
  b.destroy_stream(0, s);
}
