// data/generated.hpp: a generated data set is reused only when it was made with the same options
// (Note [Generated once across ranks]); generate() runs once, and not at all when the data is there.

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "benchhost/data/generated.hpp"

namespace {

namespace fs = std::filesystem;
using benchhost::data::ensure_generated;
using benchhost::data::generated_with;

TEST(Generated, ReusedOnlyWithTheSameOptions) {
  const fs::path dir = fs::temp_directory_path() / ("bh_generated_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  EXPECT_FALSE(generated_with("Test set", dir.string(), "marker.txt", "seed=1"));
  fs::create_directories(dir);
  EXPECT_TRUE(generated_with("Test set", dir.string(), "marker.txt", "seed=1"));  // no marker: taken as is
  std::ofstream(dir / "marker.txt") << "seed=1";
  EXPECT_TRUE(generated_with("Test set", dir.string(), "marker.txt", "seed=1"));
  try {
    generated_with("Test set", dir.string(), "marker.txt", "seed=2");
    ADD_FAILURE() << "other options were accepted";
  } catch (const benchhost::DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Test set: " + dir.string() + " was generated with other options (seed=1)"), std::string::npos) << what;
    EXPECT_NE(what.find("remove it to regenerate with seed=2"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

TEST(Generated, GeneratesOnceAndRethrowsItsError) {
  int made = 0;
  bool there = false;
  auto check = [&](int& r) {
    r = 7;
    return there;
  };
  auto generate = [&] {
    ++made;
    there = true;
    return 8;
  };
  EXPECT_EQ(ensure_generated<int>(nullptr, "Test set", "/nowhere", check, generate), 8);
  EXPECT_EQ(ensure_generated<int>(nullptr, "Test set", "/nowhere", check, generate), 7);
  EXPECT_EQ(made, 1);
  auto failing = []() -> int { throw benchhost::Unsupported("no generator program", __FILE__, __LINE__); };
  there = false;
  EXPECT_THROW(ensure_generated<int>(nullptr, "Test set", "/nowhere", check, failing), benchhost::Unsupported);
}

}  // namespace
