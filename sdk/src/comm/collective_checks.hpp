#pragma once
// Internal: argument checks shared by every communicator backend, so each backend rejects the
// same misuse with the same message.

#include <cstdint>
#include <vector>

#include "benchhost/comm/communicator.hpp"

namespace benchhost::detail {

/// Reductions accept f32, f64, f16, bf16, i32, i64, u8; data movement accepts any dtype.
void check_dtype_supported(const Tensor& t, const char* op, bool reduction);
void check_defined(const Tensor& t, const char* op, const char* which);

/// For allgather (chunk = in, full = out) and reduce_scatter (chunk = out, full = in): same dtype
/// and chunk.numel() == chunk_count(full.numel(), world, rank) (Note [Uneven chunks]).
inline void check_chunked(const Tensor& chunk, const Tensor& full, int world, int rank,
                          const char* op, bool reduction) {
  check_defined(chunk, op, reduction ? "output" : "input");
  check_defined(full, op, reduction ? "input" : "output");
  check_dtype_supported(full, op, reduction);
  if (chunk.dtype() != full.dtype()) {
    BH_THROW(InvalidArgument, "{}: input and output dtypes differ ({} vs {})", op,
             reduction ? full.describe() : chunk.describe(),
             reduction ? chunk.describe() : full.describe());
  }
  std::int64_t want = chunk_count(full.numel(), world, rank);
  if (chunk.numel() != want) {
    BH_THROW(InvalidArgument,
             "{}: rank {} of {} owns {} of the {} elements (N / P, plus one for the first N % P "
             "ranks), but its {} tensor has {} ({})", op, rank, world, want, full.numel(),
             reduction ? "output" : "input", chunk.numel(), chunk.describe());
  }
}

/// For alltoall (Note [All-to-all blocks]): both tensors defined, contiguous and of one dtype;
/// `world` non-negative counts each; in.numel() == sum(send_counts), out.numel() ==
/// sum(recv_counts). Throws InvalidArgument naming the numbers.
void check_alltoall(const Tensor& in, const Tensor& out, const std::vector<std::int64_t>& send_counts,
                    const std::vector<std::int64_t>& recv_counts, int world);

/// The counts of the equal-block alltoall: in.numel() == out.numel() == N, N divisible by
/// `world`; returns `world` counts of N / world. Throws InvalidArgument otherwise.
std::vector<std::int64_t> equal_alltoall_counts(const Tensor& in, const Tensor& out, int world);

}  // namespace benchhost::detail
