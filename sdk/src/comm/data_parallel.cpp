#include "benchhost/comm/data_parallel.hpp"

#include <set>

namespace benchhost {

DataParallel::DataParallel(std::vector<nn::Parameter*> params, Communicator& comm,
                           std::size_t bucket_bytes)
    : comm_(comm) {
  BH_CHECK_AS(InvalidArgument, bucket_bytes > 0, "DataParallel: bucket size must be positive");
  std::set<nn::Parameter*> seen;
  for (std::size_t i = 0; i < params.size(); ++i) {
    nn::Parameter* p = params[i];
    BH_CHECK_AS(InvalidArgument, p != nullptr, "DataParallel: parameter {} is null", i);
    BH_CHECK_AS(InvalidArgument, seen.insert(p).second,
                "DataParallel: parameter '{}' appears twice in the list", p->name);
    BH_CHECK_AS(InvalidArgument, p->grad.defined() && p->grad.shape() == p->value.shape() &&
                                     p->grad.dtype() == p->value.dtype(),
                "DataParallel: parameter '{}' has no gradient of its shape and dtype ({} vs {})",
                p->name, p->value.describe(), p->grad.defined() ? p->grad.describe() : "none");
    BH_CHECK_AS(InvalidArgument, !p->grad_ready_hook,
                "DataParallel: parameter '{}' already has a grad_ready_hook (is it wrapped by "
                "another DataParallel?)", p->name);
  }

  // Buckets in reverse registration order (Note [Gradient buckets]).
  slots_.resize(params.size());
  std::size_t bucket_fill = 0;
  std::vector<std::int64_t> bucket_elems;
  for (std::size_t k = params.size(); k-- > 0;) {
    nn::Parameter* p = params[k];
    std::size_t bytes = p->grad.nbytes();
    bool new_bucket = buckets_.empty();
    if (!new_bucket) {
      const Tensor& first = slots_[buckets_.back().slots.front()].param->grad;
      new_bucket = first.dtype() != p->grad.dtype() || first.device() != p->grad.device() ||
                   bucket_fill + bytes > bucket_bytes;
    }
    if (new_bucket) {
      buckets_.emplace_back();
      bucket_elems.push_back(0);
      bucket_fill = 0;
    }
    Slot& s = slots_[k];
    s.param = p;
    s.bucket = buckets_.size() - 1;
    s.offset = bucket_elems.back();
    bucket_elems.back() += p->grad.numel();
    bucket_fill += bytes;
    buckets_.back().slots.push_back(k);
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& g = slots_[buckets_[b].slots.front()].param->grad;
    if (comm_.size() > 1) buckets_[b].buffer = Tensor::zeros({bucket_elems[b]}, g.dtype(), g.device());
    buckets_[b].pending = buckets_[b].slots.size();
  }

  broadcast_parameters();

  for (std::size_t k = 0; k < slots_.size(); ++k) {
    slots_[k].param->grad_ready_hook = [this, k](nn::Parameter&) { on_ready(k); };
  }
}

DataParallel::~DataParallel() {
  for (Slot& s : slots_) s.param->grad_ready_hook = nullptr;
}

std::vector<std::size_t> DataParallel::bucket_parameters(std::size_t b) const {
  BH_CHECK_AS(InvalidArgument, b < buckets_.size(), "bucket {} out of range ({} buckets)", b,
              buckets_.size());
  return buckets_[b].slots;
}

void DataParallel::broadcast_parameters() {
  if (comm_.size() == 1) return;
  std::vector<Work> works;
  works.reserve(slots_.size());
  for (Slot& s : slots_) works.push_back(comm_.broadcast(s.param->value, 0));
  for (Work& w : works) w.wait();
}

void DataParallel::on_ready(std::size_t k) {
  Slot& s = slots_[k];
  Bucket& b = buckets_[s.bucket];
  if (s.ready) {
    // Marked twice in one step (a tied weight marked after each use): the later gradient is the
    // complete one, as long as its bucket has not been sent yet.
    BH_CHECK(!b.issued, "gradient of '{}' was marked ready again after its bucket's allreduce "
             "started; mark a shared parameter once, after its last gradient accumulation",
             s.param->name);
  }
  if (comm_.size() > 1) {
    std::int64_t n = s.param->grad.numel();
    b.buffer.slice(0, s.offset, s.offset + n).copy_(s.param->grad.reshape({n}));
  }
  if (!s.ready) {
    s.ready = true;
    if (--b.pending == 0) issue_ready_buckets();
  }
}

void DataParallel::issue_ready_buckets() {
  while (next_to_issue_ < buckets_.size() && buckets_[next_to_issue_].pending == 0) {
    Bucket& b = buckets_[next_to_issue_++];
    if (comm_.size() > 1) b.work = comm_.allreduce(b.buffer, ReduceOp::avg);
    b.issued = true;
    if (!in_finish_) ++overlapped_;
  }
}

void DataParallel::finish() {
  in_finish_ = true;
  std::size_t unmarked = 0;
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    if (!slots_[k].ready) {
      ++unmarked;
      on_ready(k);
    }
  }
  issue_ready_buckets();
  for (Bucket& b : buckets_) b.work.wait();
  if (comm_.size() > 1) {
    for (Slot& s : slots_) {
      std::int64_t n = s.param->grad.numel();
      s.param->grad.copy_(buckets_[s.bucket].buffer.slice(0, s.offset, s.offset + n)
                              .view(s.param->grad.shape()));
    }
  }
  for (Slot& s : slots_) s.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = b.slots.size();
    b.issued = false;
    b.work = Work();
  }
  next_to_issue_ = 0;
  last_overlapped_ = overlapped_;
  last_unmarked_ = unmarked;
  overlapped_ = 0;
  in_finish_ = false;
}

}  // namespace benchhost
