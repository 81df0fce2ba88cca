// The torchvision cross-checks' plumbing, shared by the detection and Mask R-CNN op tests: a
// scratch folder of raw arrays plus meta.json that a tools/peers/ script reads and answers in, and
// the skip when /usr/bin/python3 has no torchvision.
#pragma once

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "benchhost/tensor.hpp"

#ifndef BENCHHOST_SOURCE_DIR
#error "BENCHHOST_SOURCE_DIR must be defined by the build"
#endif

namespace benchhost::testing {

inline std::string peer_python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

inline bool have_torchvision() {
  static const bool ok =
      std::system(fmt::format("{} -c 'import torch, torchvision' > /dev/null 2>&1", peer_python()).c_str()) == 0;
  return ok;
}

#define SKIP_WITHOUT_TORCHVISION()                                                                      \
  if (!::benchhost::testing::have_torchvision())                                                        \
  GTEST_SKIP() << ::benchhost::testing::peer_python()                                                   \
               << " has no torch/torchvision: the torchvision cross-check did not run"

/// A scratch folder with meta.json and raw arrays for a peer script under tools/peers/.
struct PeerDir {
  std::filesystem::path dir;
  std::string script;               // e.g. "detection_peer.py"
  std::vector<std::string> shapes;  // "name": [dims]
  std::string extra;                // more meta fields, JSON, each ending with ", "

  PeerDir(const char* script_name, const char* tag) : script(script_name) {
    dir = std::filesystem::temp_directory_path() /
          fmt::format("bh_peer_{}_{}_{}", std::filesystem::path(script).stem().string(), tag, ::getpid());
    std::filesystem::create_directories(dir);
  }
  ~PeerDir() { std::filesystem::remove_all(dir); }

  void put(const std::string& name, const Tensor& t) {
    const Tensor c = t.to(Device::cpu()).contiguous();
    std::ofstream f(dir / (name + ".bin"), std::ios::binary);
    f.write(static_cast<const char*>(c.raw_data()), static_cast<std::streamsize>(c.numel() * dtype_size(c.dtype())));
    shapes.push_back(fmt::format("\"{}\": [{}]", name, fmt::join(c.shape(), ", ")));
  }

  // Run the peer in `mode`; false (with a test failure) if it fails.
  bool run(const char* mode) {
    std::ofstream(dir / "meta.json") << "{" << extra << "\"shapes\": {" << fmt::format("{}", fmt::join(shapes, ", "))
                                     << "}}";
    const std::filesystem::path peer = std::filesystem::path(BENCHHOST_SOURCE_DIR) / "tools" / "peers" / script;
    const std::string cmd = fmt::format("{} '{}' {} '{}' 2>&1", peer_python(), peer.string(), mode, dir.string());
    const int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    return rc == 0;
  }

  std::vector<char> bytes(const std::string& name) const {
    std::ifstream f(dir / (name + ".bin"), std::ios::binary | std::ios::ate);
    std::vector<char> v(static_cast<std::size_t>(f.tellg()));
    f.seekg(0);
    f.read(v.data(), static_cast<std::streamsize>(v.size()));
    return v;
  }
  Tensor floats(const std::string& name, const Shape& shape) const {
    const auto b = bytes(name);
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return Tensor::from_vector(v, shape);
  }
  std::vector<std::int64_t> ints(const std::string& name) const {
    const auto b = bytes(name);
    std::vector<std::int64_t> v(b.size() / 8);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
  }
};

}  // namespace benchhost::testing
