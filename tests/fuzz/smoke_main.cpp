// The fuzz harnesses without libFuzzer (Note [Fuzzing the readers], fuzz.hpp): every seed, then a
// fixed, seeded set of mutations of each. A finding ends the process, so ctest fails with the
// input's description in the output.
//   fuzz_smoke_<name>                   run
//   fuzz_smoke_<name> --write-seeds DIR write the seeds as files (the corpus of a libFuzzer run)
//   fuzz_smoke_<name> FILE...           run these inputs (reproduce a libFuzzer finding)
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz.hpp"

namespace {

using bh_fuzz::Bytes;

std::uint64_t next(std::uint64_t& s) {  // SplitMix64
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::size_t runs = 0;
char current[256] = "";  // the input being run, for the report of a finding

// A finding kills the process; say which input it was first (signal-safe: write only).
extern "C" void on_finding(int sig) {
  static const char prefix[] = "\nfuzz smoke: FINDING on input: ";
  [[maybe_unused]] auto n = ::write(2, prefix, sizeof prefix - 1);
  n = ::write(2, current, std::strlen(current));
  n = ::write(2, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void run(const Bytes& input, const std::string& what) {
  std::snprintf(current, sizeof current, "%s (%zu bytes)", what.c_str(), input.size());
  LLVMFuzzerTestOneInput(input.data(), input.size());
  ++runs;
}

void mutate_and_run(const Bytes& seed, int index) {
  const std::string name = "seed " + std::to_string(index);
  run(seed, name);
  if (seed.empty()) return;
  const std::size_t n = seed.size();
  for (int k = 0; k <= 16; ++k) {  // truncations
    const std::size_t at = n * static_cast<std::size_t>(k) / 17;
    run(Bytes(seed.begin(), seed.begin() + static_cast<std::ptrdiff_t>(at)), name + " cut at " + std::to_string(at));
  }
  std::uint64_t state = 0x5eed0000u + static_cast<std::uint64_t>(index);
  for (int k = 0; k < 48; ++k) {  // one flipped byte
    Bytes m = seed;
    const std::size_t at = next(state) % n;
    m[at] ^= static_cast<std::uint8_t>(1u + next(state) % 255u);
    run(m, name + " byte " + std::to_string(at) + " changed");
  }
  const std::uint64_t extremes[] = {0, ~0ull, 0x7fffffffffffffffull, 0x8000000000000000ull, 0xffffffffull, 0x80000000ull};
  for (int k = 0; k < 48 && n >= 8; ++k) {  // a 64-bit (or 32-bit) field set to an extreme
    Bytes m = seed;
    const std::size_t at = next(state) % (n - 7);
    const std::uint64_t v = extremes[next(state) % 6];
    std::memcpy(m.data() + at, &v, (k % 2) ? 8 : 4);
    run(m, name + " field at " + std::to_string(at) + " extreme");
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, on_finding);
  std::set_terminate([] {  // an exception other than benchhost::Error escaped the reader
    std::fprintf(stderr, "\nfuzz smoke: FINDING on input: %s: uncaught exception\n", current);
    std::abort();
  });
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
    fs::create_directories(argv[2]);
    int i = 0;
    for (const Bytes& s : bh_fuzz::seeds()) {
      std::ofstream(fs::path(argv[2]) / ("seed_" + std::to_string(i++)), std::ios::binary)
          .write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size()));
    }
    std::printf("%d seeds written to %s\n", i, argv[2]);
    return 0;
  }
  if (argc > 1) {
    for (int a = 1; a < argc; ++a) run(bh_fuzz::read_bytes(argv[a]), argv[a]);
  } else {
    int i = 0;
    for (const Bytes& s : bh_fuzz::seeds()) mutate_and_run(s, i++);
  }
  std::printf("fuzz smoke: %zu inputs, no finding\n", runs);
  std::error_code ec;
  fs::remove_all(bh_fuzz::scratch_dir(), ec);
  return 0;
}
