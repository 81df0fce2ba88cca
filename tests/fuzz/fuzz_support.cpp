// Helpers shared by the fuzz harnesses (Note [Fuzzing the readers], fuzz.hpp).
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "fuzz.hpp"

namespace bh_fuzz {

namespace fs = std::filesystem;

std::vector<std::span<const std::uint8_t>> split_parts(std::span<const std::uint8_t> input, int parts) {
  std::vector<std::span<const std::uint8_t>> out;
  for (int k = 0; k + 1 < parts; ++k) {
    std::uint32_t n = 0;
    for (int b = 0; b < 4 && b < static_cast<int>(input.size()); ++b) n |= std::uint32_t{input[b]} << (8 * b);
    input = input.subspan(std::min<std::size_t>(4, input.size()));
    const std::size_t take = std::min<std::size_t>(n, input.size());
    out.push_back(input.first(take));
    input = input.subspan(take);
  }
  out.push_back(input);
  return out;
}

Bytes join_parts(const std::vector<Bytes>& parts) {
  Bytes out;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k + 1 < parts.size()) {
      const auto n = static_cast<std::uint32_t>(parts[k].size());
      for (int b = 0; b < 4; ++b) out.push_back(static_cast<std::uint8_t>(n >> (8 * b)));
    }
    out.insert(out.end(), parts[k].begin(), parts[k].end());
  }
  return out;
}

const fs::path& scratch_dir() {
  static const fs::path dir = [] {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path d = base / ("benchhost_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string write_scratch(const std::string& name, std::span<const std::uint8_t> bytes) {
  const fs::path p = scratch_dir() / name;
  std::ofstream(p, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return p.string();
}

Bytes to_bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace bh_fuzz
