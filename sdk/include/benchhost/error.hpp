#pragma once
/// @file error.hpp  Typed exceptions used everywhere inside C++ code.
///
/// Every error carries the file and line that raised it and a message a person can act on. At the
/// plugin boundary (see workload.hpp) each type maps to one bh_status, so the host can record the
/// right run status (INVALID_ARGUMENTS, OOM, SKIPPED, DIVERGED, FAILED).

#include <cstddef>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace benchhost {

/// Base of every benchhost error. what() is "message (file:line)".
class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line)
      : std::runtime_error(fmt::format("{} ({}:{})", message, file, line)),
        message_(std::move(message)), file_(file), line_(line) {}
  /// The message without the location suffix.
  const std::string& message() const noexcept { return message_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

/// A bad option, config value, shape or argument supplied by the user or the caller.
class InvalidArgument : public Error { using Error::Error; };
/// The request cannot run here (no GPU, precision not supported on this device, ...): SKIPPED.
class Unsupported : public Error { using Error::Error; };
/// A dataset file is missing, truncated or corrupt. The message names the file (and index).
class DataError : public Error { using Error::Error; };
/// Loss or a metric became NaN/Inf: the run DIVERGED.
class Diverged : public Error { using Error::Error; };
/// A collective timed out or a peer rank failed.
class CommError : public Error { using Error::Error; };
/// A device or host allocation failed. requested_bytes says how much was asked for.
class OutOfMemory : public Error {
 public:
  OutOfMemory(std::string message, std::size_t requested_bytes, const char* file, int line)
      : Error(std::move(message), file, line), requested_bytes_(requested_bytes) {}
  std::size_t requested_bytes() const noexcept { return requested_bytes_; }

 private:
  std::size_t requested_bytes_;
};

}  // namespace benchhost

/// Throw `Type` with a fmt-formatted message: BH_THROW(InvalidArgument, "bad batch {}", b).
#define BH_THROW(Type, ...) throw ::benchhost::Type(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

/// Check a condition; on failure throw benchhost::Error (or a named type with BH_CHECK_AS).
#define BH_CHECK(cond, ...)                                                                    \
  do {                                                                                         \
    if (!(cond)) [[unlikely]]                                                                  \
      throw ::benchhost::Error(::fmt::format("check failed: {}: {}", #cond,                    \
                                             ::fmt::format(__VA_ARGS__)), __FILE__, __LINE__); \
  } while (0)

#define BH_CHECK_AS(Type, cond, ...)                                                          \
  do {                                                                                        \
    if (!(cond)) [[unlikely]]                                                                 \
      throw ::benchhost::Type(::fmt::format(__VA_ARGS__), __FILE__, __LINE__);                \
  } while (0)
