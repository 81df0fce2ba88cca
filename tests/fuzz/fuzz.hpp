#pragma once
// Note [Fuzzing the readers]
// Every reader of an on-disk format (and the command-line/config parser) has a harness here:
// LLVMFuzzerTestOneInput feeds it one input and accepts exactly one outcome besides success, a
// benchhost::Error (a DataError or InvalidArgument naming the file). Anything else is a bug: a
// crash, a sanitizer report, an uncaught std:: exception, an allocation the input's real size
// does not justify (libFuzzer's -rss_limit_mb), a hang.
//
// Each harness also gives fuzz_seeds(): valid files in the real format, written by the project's
// own writers, the starting corpus. Two drivers run the same harness:
//   - fuzz_smoke_<name> (any compiler, part of ctest): every seed, then a fixed set of mutations
//     of each (truncations, flipped bytes, 64-bit fields set to extremes), a few seconds;
//   - fuzz_<name> (clang, libFuzzer; tools/fuzz.sh): coverage-guided, millions of executions.
// Inputs made of several files (an index and its data) are the parts joined by join_parts().
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace bh_fuzz {

using Bytes = std::vector<std::uint8_t>;

/// The seeds of this harness (defined by each fuzz_<name>.cpp).
std::vector<Bytes> seeds();

/// Run `f`, accepting a benchhost::Error (the reader refused the input, as it should); everything
/// else propagates and ends the process (a finding).
template <class F>
void refused_or_read(F&& f);

/// Several files in one input: each part but the last is preceded by its length (4 bytes, little
/// endian, clamped to what is left), the last takes the rest.
std::vector<std::span<const std::uint8_t>> split_parts(std::span<const std::uint8_t> input, int parts);
Bytes join_parts(const std::vector<Bytes>& parts);

/// A directory private to this process (in /dev/shm when it exists), for readers that take paths.
const std::filesystem::path& scratch_dir();
/// Write `bytes` to scratch_dir()/name and return the path.
std::string write_scratch(const std::string& name, std::span<const std::uint8_t> bytes);

Bytes to_bytes(const std::string& text);
Bytes read_bytes(const std::filesystem::path& p);

}  // namespace bh_fuzz

#include "benchhost/error.hpp"

template <class F>
void bh_fuzz::refused_or_read(F&& f) {
  try {
    f();
  } catch (const benchhost::Error&) {
  }
}

/// The harness: one input. Returns 0 (libFuzzer's convention).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
