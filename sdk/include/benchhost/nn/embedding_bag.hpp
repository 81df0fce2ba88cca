#pragma once
/// @file nn/embedding_bag.hpp  Multi-hot embedding bags: gather + pool forward, sparse backward.
///
/// A bag is the set of rows one sample looks up in one table (Criteo's multi-hot features: a
/// sample's feature k names `hotness_k` rows of table k). The forward pass gathers those rows and
/// pools them (sum, or mean); the backward pass scatters the pooled gradient back onto the rows
/// that were looked up, and only onto them.
///
/// Bag layouts (indices are i32 or i64, on the table's device; the touched rows that backward
/// returns are always a CPU tensor):
///   - fixed hotness: `indices` is [B, H], bag b is row b (MLPerf's materialised multi-hot .npz
///     arrays have exactly this shape); `offsets` is left undefined;
///   - ragged: `indices` is [N], `offsets` is i64 [B + 1] with offsets[0] = 0, offsets[B] = N and
///     bag b = indices[offsets[b] .. offsets[b+1]). An empty bag pools to zeros.
///
/// Note [Sparse embedding gradients]
/// A table can hold tens of millions of rows while one step touches a few hundred thousand, so the
/// gradient is sparse. Parameter::grad keeps the table's full shape, but when Parameter::sparse_rows
/// is defined only those rows are meaningful and optimizers update only them (optim/optimizer.hpp).
/// This file keeps one invariant on top of that contract: rows of `grad` that are not in
/// sparse_rows are zero. backward() therefore only ever adds (+=) into the rows it touches and
/// merges their ids into sparse_rows (kept sorted ascending, unique); zero_sparse_grad() zeroes
/// just the touched rows and clears sparse_rows, so a step costs O(rows touched), never O(table).
/// Module::zero_grad() (a full memset) also keeps the invariant, it is just slower on big tables.
///
/// Threading: the functions run oneTBB-parallel inside (over bags in forward, over unique rows in
/// backward); call them from one thread at a time per output tensor. Sums within a row are taken
/// in a fixed order (sorted by bag), so results do not depend on the thread count.

#include <cstdint>
#include <string>

#include "benchhost/nn/module.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

enum class BagPooling : std::uint8_t { sum, mean };

/// "sum" / "mean"; parse_bag_pooling throws InvalidArgument naming the choices.
const char* bag_pooling_name(BagPooling p) noexcept;
BagPooling parse_bag_pooling(const std::string& name);

/// Number of bags described by (indices, offsets) (see the layouts above). Validates the layout:
/// throws InvalidArgument naming the offending shape or offset.
std::int64_t embedding_bag_count(const Tensor& indices, const Tensor& offsets);

/// out[b, :] = pool_{i in bag b} weight[i, :].
/// @param out      f32 [B, D], contiguous, on the table's device; overwritten.
/// @param weight   f32 [R, D], contiguous rows (CPU or CUDA).
/// @param indices  i32/i64 row ids in [0, R); see the layouts above.
/// @param offsets  i64 [B + 1] for ragged bags, undefined for fixed hotness.
/// Throws InvalidArgument for a row id outside [0, R) (naming it and R) or mismatched shapes.
void embedding_bag_forward(Tensor& out, const Tensor& weight, const Tensor& indices,
                           const Tensor& offsets, BagPooling pooling);

/// grad_weight[i, :] += sum_{bags b containing i} scale_b * dout[b, :] for every looked-up row i,
/// where scale_b is 1 (sum) or 1 / |bag b| (mean); a row appearing twice in a bag counts twice.
/// @param grad_weight  f32 [R, D], contiguous, on the table's device; only the touched rows are written.
/// @returns the touched rows: i64 [U], unique, ascending.
Tensor embedding_bag_backward(const Tensor& dout, const Tensor& indices, const Tensor& offsets,
                              BagPooling pooling, Tensor& grad_weight);

/// Sorted union of two ascending unique i64 row lists (either may be undefined).
Tensor merge_sorted_rows(const Tensor& a, const Tensor& b);

/// Zero the rows of p.grad listed in p.sparse_rows and clear sparse_rows (see the Note). A
/// parameter without sparse_rows is left as it is.
void zero_sparse_grad(Parameter& p);

/// One embedding table looked up with bags: the module form of the functions above.
/// Parameter "weight" [num_rows, dim] (weight_decay = false: MLPerf uses none on tables).
/// Ownership: keeps a handle (not a copy) to the indices/offsets of the last forward() for
/// backward(); the caller must not overwrite them in between.
class EmbeddingBag : public Module {
 public:
  /// The table starts as zeros: initialise weight().value (nn/init.hpp or a weight file).
  /// `sparse_grad` = true: backward fills Parameter::sparse_rows (Note [Sparse embedding
  /// gradients]); false: a plain dense gradient (sparse_rows stays undefined).
  EmbeddingBag(std::int64_t num_rows, std::int64_t dim, BagPooling pooling = BagPooling::sum,
               bool sparse_grad = true, Device device = Device::cpu());

  /// Pooled embeddings [B, dim], pooled in f32 and stored in the precision policy's embedding
  /// type (f32 unless Module::set_precision() chose a half type).
  Tensor forward(const Tensor& indices, const Tensor& offsets = Tensor());
  /// Accumulate the table gradient for the last forward(); calls weight().mark_grad_ready().
  /// There is no input gradient (row ids are integers). dout may be f32, f16 or bf16.
  void backward(const Tensor& dout);
  /// zero_sparse_grad(weight()) when sparse, weight().grad.zero_() otherwise.
  void zero_grad_fast();

  Parameter& weight() { return *weight_; }
  std::int64_t num_rows() const { return num_rows_; }
  std::int64_t dim() const { return dim_; }
  BagPooling pooling() const { return pooling_; }
  bool sparse_grad() const { return sparse_grad_; }

 private:
  std::int64_t num_rows_, dim_;
  BagPooling pooling_;
  bool sparse_grad_;
  Parameter* weight_ = nullptr;
  Tensor last_indices_, last_offsets_;
};

}  // namespace benchhost::nn
