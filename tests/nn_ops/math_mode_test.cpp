#include <gtest/gtest.h>

#include <thread>

#include "benchhost/nn/math_mode.hpp"

namespace benchhost::nn {
namespace {

TEST(MathMode, Tf32IsOffByDefaultScopedAndPerThread) {
  EXPECT_FALSE(tf32_enabled());
  {
    Tf32Scope scope(true);
    EXPECT_TRUE(tf32_enabled());
    bool other_thread = true;
    std::thread([&] { other_thread = tf32_enabled(); }).join();
    EXPECT_FALSE(other_thread) << "the mode must not leak to other threads";
    {
      Tf32Scope inner(false);
      EXPECT_FALSE(tf32_enabled());
    }
    EXPECT_TRUE(tf32_enabled());
  }
  EXPECT_FALSE(tf32_enabled());
}

}  // namespace
}  // namespace benchhost::nn
