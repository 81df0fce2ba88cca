#pragma once
/// @file comm/data_parallel.hpp  Data parallelism: bucketed gradient averaging that overlaps backward.
///
/// Usage, per training step on every rank:
///
///   DataParallel dp(model.parameters(), comm, 25 << 20);   // once: broadcasts rank 0's weights
///   ...
///   model.zero_grad();
///   loss = model.forward(batch);                 // this rank's shard of the global batch
///   model.backward(dloss);                       // layers call p.mark_grad_ready() -> buckets start
///   dp.finish();                                 // wait; every grad is now the mean over ranks
///   optimizer.step();
///
/// Contract with workloads and the host: each rank consumes a per-rank batch of its own shard
/// (the data sampler shards by rank); the global batch is per-rank batch x world size, and the
/// loss is a mean over the per-rank batch, so the averaged gradient equals the gradient of the
/// mean loss over the global batch.
///
/// Note [Gradient buckets]
/// Parameters are grouped, in reverse registration order (the order backward produces their
/// gradients), into buckets of at most bucket_bytes of gradient (a larger parameter gets a bucket
/// of its own), one dtype and device per bucket. Each bucket owns a flat buffer. The constructor
/// installs Parameter::grad_ready_hook: when a parameter is marked ready its gradient is copied
/// into its bucket's buffer, and when a bucket is complete its allreduce(avg) is issued at once,
/// while backward continues (overlap). Buckets are issued strictly in bucket order, because
/// collectives must be issued in the same order on every rank: a bucket that completes early
/// waits for the ones before it. finish() marks every parameter that was never marked (a layer
/// that does not call mark_grad_ready, an unused branch) and issues what is left, waits, and
/// copies the averaged gradients back into Parameter::grad. Sparse gradients (sparse_rows) are
/// reduced densely.
///
/// Threading: hooks run on the training thread that runs backward; finish() on the same thread.
/// Ownership: the parameters and the communicator must outlive the DataParallel; the destructor
/// removes the hooks it installed.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/nn/module.hpp"

namespace benchhost {

class DataParallel {
 public:
  /// Broadcasts every parameter's value from rank 0 (blocking), builds the buckets and installs
  /// the hooks. bucket_bytes > 0. Parameters must be distinct and have gradients allocated.
  DataParallel(std::vector<nn::Parameter*> params, Communicator& comm,
               std::size_t bucket_bytes = std::size_t{25} << 20);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Complete the step's reduction (see Note [Gradient buckets]); resets for the next step.
  /// Throws CommError on timeout or a failed peer.
  void finish();
  /// Broadcast rank 0's parameter values again (e.g. after loading a checkpoint on rank 0).
  void broadcast_parameters();

  std::size_t num_buckets() const { return buckets_.size(); }
  /// Parameter indices (into the constructor's list) of bucket b, in the order they fill it.
  std::vector<std::size_t> bucket_parameters(std::size_t b) const;
  /// Statistics of the last finished step: buckets issued from hooks before finish() was called
  /// (the overlapped ones), and parameters finish() had to mark because nobody did.
  std::size_t last_overlapped_buckets() const { return last_overlapped_; }
  std::size_t last_unmarked_parameters() const { return last_unmarked_; }
  Communicator& communicator() { return comm_; }

 private:
  struct Slot {
    nn::Parameter* param = nullptr;
    std::size_t bucket = 0;
    std::int64_t offset = 0;  // elements into the bucket buffer
    bool ready = false;
  };
  struct Bucket {
    Tensor buffer;                   // flat, one dtype, one device
    std::vector<std::size_t> slots;  // indices into slots_
    std::size_t pending = 0;         // slots not yet ready this step
    bool issued = false;
    Work work;
  };

  void on_ready(std::size_t slot);
  void issue_ready_buckets();

  Communicator& comm_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::size_t next_to_issue_ = 0;
  bool in_finish_ = false;
  std::size_t overlapped_ = 0, last_overlapped_ = 0, last_unmarked_ = 0;
};

}  // namespace benchhost
