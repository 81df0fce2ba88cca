#pragma once
// Multi-tensor apply for the fused optimizer kernels (private to sdk/src/nn/cuda; used by
// optim_multi.cu and fp8_ops.cu).
//
// Note [Multi-tensor apply]
// An optimizer step touches a few hundred tensors of very different sizes. Launching one kernel
// per tensor costs more than the arithmetic for the small ones, so one launch covers many: the
// host cuts every tensor into chunks of kChunk elements and fills a Table, passed by value as a
// kernel argument (no host-to-device copy, so nothing waits): up to kMaxTensors tensors (K
// pointers each, plus rows, span, per-tensor scalars) and up to kMaxBlocks (tensor, chunk)
// pairs, one per block. When either fills, the table is launched and a new one started (a
// tensor whose chunks straddle two tables appears in both). This is apex's multi_tensor_apply.
//
// Sparse rows: a tensor with rows visits span = rows * row_len "virtual" elements; virtual
// element k lives at rows[k / row_len] * row_len + k % row_len.
//
// Deterministic reductions: every chunk has a fixed global slot (slot0 of its tensor + chunk
// index); a block writes its chunk's partial sums there (a fixed shared-memory tree, so the
// same bits on every run), and finalize_sums() adds each tensor's partials in slot order.
// Nothing depends on how the chunks were packed into launches or on block scheduling.
//
// Blocks have kThreads threads; kernels assume exactly that (the tree reduction does).

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "nn/cuda/cuda_common.hpp"

namespace benchhost::nn::cuda::mt {

constexpr int kThreads = 256;
constexpr std::int64_t kChunk = 16384;  // elements per block
constexpr int kMaxTensors = 24;
constexpr int kMaxBlocks = 320;

/// A kernel argument describing up to kMaxTensors tensors (K pointer lists) and the chunks of
/// them that this launch's blocks process. About 3.7 KiB for K = 4 (under the 4 KiB argument
/// limit of older toolkits).
template <int K>
struct Table {
  float* ptr[K][kMaxTensors];
  const std::int64_t* rows[kMaxTensors];  // null: dense
  std::int64_t span[kMaxTensors];         // elements to visit
  std::int64_t row_len[kMaxTensors];
  float wd[kMaxTensors];                  // weight decay for this tensor (0 on the skip list)
  int id[kMaxTensors];                    // index in the op call's tensor lists
  int slot0[kMaxTensors];                 // global reduction slot of this tensor's chunk 0
  unsigned char decay[kMaxTensors];       // Parameter::weight_decay
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};

/// One tensor of a multi-tensor call, host side.
template <int K>
struct Entry {
  std::array<float*, K> ptr{};
  const std::int64_t* rows = nullptr;
  std::int64_t span = 0;
  std::int64_t row_len = 1;
  float wd = 0.0f;
  bool decay = false;
};

inline std::int64_t chunks_of(std::int64_t span) { return (span + kChunk - 1) / kChunk; }

/// Total reduction slots of `entries` (the sum of their chunk counts).
template <int K>
std::int64_t total_slots(const std::vector<Entry<K>>& entries) {
  std::int64_t s = 0;
  for (const auto& e : entries) s += chunks_of(e.span);
  return s;
}

/// Pack `entries` into tables and call launch(table, blocks) for each (Note [Multi-tensor
/// apply]). Entries with span 0 are skipped (they own no slots).
template <int K, class Launch>
void apply(const std::vector<Entry<K>>& entries, Launch&& launch) {
  Table<K> t{};
  int nt = 0, nb = 0;
  std::int64_t slot = 0;
  auto put = [&](int at, const Entry<K>& e, std::size_t id, std::int64_t slot0) {
    for (int k = 0; k < K; ++k) t.ptr[k][at] = e.ptr[k];
    t.rows[at] = e.rows;
    t.span[at] = e.span;
    t.row_len[at] = e.row_len;
    t.wd[at] = e.wd;
    t.id[at] = static_cast<int>(id);
    t.slot0[at] = static_cast<int>(slot0);
    t.decay[at] = e.decay ? 1 : 0;
  };
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry<K>& e = entries[i];
    const std::int64_t chunks = chunks_of(e.span);
    if (chunks == 0) continue;
    put(nt, e, i, slot);
    for (std::int64_t c = 0; c < chunks; ++c) {
      t.block_tensor[nb] = static_cast<unsigned char>(nt);
      t.block_chunk[nb] = static_cast<int>(c);
      ++nb;
      if (nb == kMaxBlocks) {
        launch(t, nb);
        nb = 0;
        if (c + 1 < chunks) {
          put(0, e, i, slot);  // the rest of this tensor continues in the next table
          nt = 0;
        } else {
          nt = -1;  // tensor finished exactly at the launch: the next one starts at 0
        }
      }
    }
    ++nt;
    if (nt == kMaxTensors) {
      if (nb > 0) launch(t, nb);
      nb = 0;
      nt = 0;
    }
    slot += chunks;
  }
  if (nb > 0) launch(t, nb);
}

/// Per-tensor totals from per-chunk partials: totals[id * P + p] = sum over the tensor's chunks
/// (in slot order) of partial[slot * P + p], for every entry (0 for empty ones). Defined in
/// optim_multi.cu.
void finalize_sums(const std::vector<std::int64_t>& slot0, const std::vector<std::int64_t>& chunks,
                   int P, const double* partial, double* totals);

/// slot0 and chunk counts of `entries`, for finalize_sums().
template <int K>
void slot_layout(const std::vector<Entry<K>>& entries, std::vector<std::int64_t>* slot0,
                 std::vector<std::int64_t>* chunks) {
  std::int64_t s = 0;
  for (const auto& e : entries) {
    slot0->push_back(s);
    chunks->push_back(chunks_of(e.span));
    s += chunks->back();
  }
}

/// Writes max |x[i]| over n elements of an f32/f16/bf16 device tensor into *amax (f32 device
/// scalar; overwritten). Defined in fp8_ops.cu.
void launch_abs_max(const Tensor& x, float* amax);

}  // namespace benchhost::nn::cuda::mt
