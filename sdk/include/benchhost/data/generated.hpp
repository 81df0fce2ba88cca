#pragma once
/// @file data/generated.hpp  A data set our own generator writes on first use, made once
/// however many ranks ask for it.
///
/// Note [Generated once across ranks]
/// The mini configurations generate their data at first use (KiTS19 volumes, OpenImages-layout
/// shapes, LibriSpeech-layout speech). Under a launcher every rank asks at once, so:
///   - only rank 0 (or the single process) looks and, if the data is missing or was made with
///     other options, generates it; generators write into a staging directory and rename it into
///     place, so a reader never sees half a data set;
///   - another process (a second job sharing the directory) may rename its copy into place
///     first: the rename fails, and the copy that is there is checked and used;
///   - every rank meets at one barrier, also when rank 0 failed (a rank that skipped the barrier
///     would hang the others), then rank 0 rethrows its error and the other ranks check the data
///     rank 0 left, refusing with a DataError naming the directory if it is not there.
/// `check_existing(report)` says whether a complete data set made with these options is there
/// (filling `report`), `generate()` makes it and returns its report.
///
/// Threading: called once per process; collective over `comm` when it has more than one rank.

#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"

namespace benchhost::data {

/// Whether `dir` holds a generated data set: false when it does not exist; true when it does and
/// its marker file (`marker_name`, the generator's options as text, written last into the staging
/// directory) says `options_text` or is absent; a DataError naming the directory, both option
/// texts and the remedy when the marker says other options (a silently reused data set of another
/// size or seed would change what the mini measures).
inline bool generated_with(const std::string& what, const std::string& dir, const std::string& marker_name,
                           const std::string& options_text) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return false;
  const std::filesystem::path marker = std::filesystem::path(dir) / marker_name;
  if (std::filesystem::exists(marker, ec)) {
    std::ifstream in(marker);
    std::stringstream found;
    found << in.rdbuf();
    BH_CHECK_AS(DataError, found.str() == options_text,
                "{}: {} was generated with other options ({}); remove it to regenerate with {}", what, dir, found.str(),
                options_text);
  }
  return true;
}

template <class Report, class Check, class Generate>
Report ensure_generated(Communicator* comm, const std::string& what, const std::string& dir, Check&& check_existing,
                        Generate&& generate) {
  const bool many = comm != nullptr && comm->size() > 1;
  const bool generator = !many || comm->rank() == 0;
  Report r;
  std::exception_ptr failure;
  if (generator) {
    try {
      if (!check_existing(r)) {
        try {
          r = generate();
        } catch (const Error&) {
          // Another process renamed its copy into place first: use it.
          if (!check_existing(r)) throw;
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (many) comm->barrier();  // every rank reaches the barrier, also when rank 0 failed
  if (failure) std::rethrow_exception(failure);
  if (!generator) BH_CHECK_AS(DataError, check_existing(r), "{}: rank 0 did not produce {}", what, dir);
  return r;
}

}  // namespace benchhost::data
