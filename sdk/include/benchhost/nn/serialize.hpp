#pragma once
/// @file nn/serialize.hpp  Weight files (docs/weights-format.md) and parameter summaries.
///
/// A weight file is a list of named tensors: a model's parameters and buffers (batch-norm running
/// statistics) by their full dotted names, or any other named tensors (optimizer state). Every
/// tensor's bytes carry a CRC-32; sizes are validated against the file size before anything is
/// allocated, so a truncated or corrupt file is a DataError naming the file, the tensor and the
/// byte offset, never a crash or a huge allocation. Python reads and writes the same format with
/// tools/peers/weights.py.
///
/// Threading: plain functions, no shared state. Files are written to "<path>.tmp" and renamed,
/// so a crash never leaves a half-written file under the final name.

#include <cstdint>
#include <string>
#include <vector>

#include "benchhost/nn/module.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

/// Write tensors (any device, any strides; copied to contiguous CPU) to `path`.
/// InvalidArgument for an empty or duplicate name; DataError if the file cannot be written.
void save_tensors(const std::string& path, const std::vector<NamedTensor>& tensors);
/// Read every tensor of `path` onto the CPU, in file order. DataError for missing, truncated or
/// corrupt files (bad magic, unknown version/dtype, size fields that do not fit the file,
/// checksum mismatch, trailing bytes).
std::vector<NamedTensor> load_tensors(const std::string& path);

/// Save module.parameters() (values) and module.buffers(), by full name.
void save_weights(Module& module, const std::string& path);

struct LoadWeightsResult {
  std::vector<std::string> loaded;      ///< names copied into the module
  std::vector<std::string> missing;     ///< module names absent from the file (strict: error)
  std::vector<std::string> unexpected;  ///< file names the module does not have (strict: error)
};
/// Load a file written by save_weights (or weights.py) into `module`. Everything is validated
/// before the first value is copied, so a failed load leaves the module unchanged. Shape or
/// dtype mismatches always throw InvalidArgument naming the tensor and both shapes; with
/// strict = true, missing and unexpected names also throw (listing them), otherwise they are
/// reported in the result.
LoadWeightsResult load_weights(Module& module, const std::string& path, bool strict = true);

/// Load the pretrained part of a model (an ImageNet backbone under "backbone.body."): every
/// parameter and buffer of `module` whose full name starts with `prefix` is read from `path` under
/// its name less the prefix; other tensors of the file (a classifier, num_batches_tracked) are
/// ignored. Each must be present with the module's shape and a floating dtype (converted):
/// otherwise DataError naming `what`, the file and the tensor, and nothing is changed. Returns the
/// number of tensors copied.
std::size_t load_pretrained_part(Module& module, const std::string& path, const std::string& prefix,
                                 const std::string& what);

/// Parameter counts of a module tree.
struct ParameterCounts {
  std::int64_t tensors = 0;         ///< number of parameter tensors
  std::int64_t total = 0;           ///< scalar weights (== Module::num_parameters())
  std::int64_t with_decay = 0;      ///< scalars in parameters with weight_decay == true
  std::int64_t without_decay = 0;   ///< scalars in the skip list (biases, norms)
  std::int64_t buffer_elements = 0; ///< scalars in buffers (not trained)
  std::int64_t bytes = 0;           ///< parameter bytes (values only, not grads or state)
};
ParameterCounts count_parameters(Module& module);

/// A table of parameters grouped by module prefix up to `depth` dotted components (depth 0:
/// one line per parameter), with shape, count and share of the total, and a totals line:
///   module                     params      %    tensors
///   encoder.layer.0            12,596,224  3.7  16
/// For logs and `benchhost describe`.
std::string parameter_summary(Module& module, int depth = 1);

}  // namespace benchhost::nn
