// Exact ROC AUC by one sort.
//
// Each (score, label) pair is packed into one u64 key: the score's bits mapped to an unsigned
// order-preserving code in the high 32 bits, the label in bit 0. Sorting the keys (oneTBB
// parallel sort) orders by score; equal high halves are exactly the tied groups. The walk keeps
// integer counts and accumulates 2 * U = sum over groups of pos_g * (2 * neg_below + neg_g) in
// 128-bit integers, so the result is exact up to the final division.
#include "benchhost/metrics/auc.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <tbb/parallel_sort.h>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"

namespace benchhost::metrics {

namespace {

// Order-preserving map float -> u32 (IEEE-754: flip all bits of negatives, the sign of positives).
std::uint32_t ordered_bits(float s) {
  if (s == 0.0f) s = 0.0f;  // -0 ties with +0
  const auto u = std::bit_cast<std::uint32_t>(s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void check_pairs(std::span<const float> scores, std::span<const float> labels, const char* who) {
  BH_CHECK_AS(InvalidArgument, scores.size() == labels.size(),
              "{}: {} scores but {} labels", who, scores.size(), labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i)
    BH_CHECK_AS(InvalidArgument, labels[i] == 0.0f || labels[i] == 1.0f,
                "{}: label {} at index {} is not 0 or 1", who, labels[i], i);
}

double auc_of_keys(std::vector<std::uint64_t>& keys) {
  tbb::parallel_sort(keys.begin(), keys.end());
  unsigned __int128 twice_u = 0;
  std::uint64_t neg_below = 0, pos_total = 0;
  std::size_t i = 0;
  const std::size_t n = keys.size();
  while (i < n) {
    const std::uint64_t score = keys[i] >> 32;
    std::uint64_t pos = 0, neg = 0;
    for (; i < n && (keys[i] >> 32) == score; ++i) (keys[i] & 1u) ? ++pos : ++neg;
    twice_u += static_cast<unsigned __int128>(pos) * (2 * neg_below + neg);
    neg_below += neg;
    pos_total += pos;
  }
  if (pos_total == 0 || neg_below == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(twice_u) /
         (2.0 * static_cast<double>(pos_total) * static_cast<double>(neg_below));
}

std::vector<std::uint64_t> pack(std::span<const float> scores, std::span<const float> labels) {
  std::vector<std::uint64_t> keys(scores.size());
  for (std::size_t i = 0; i < scores.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, !std::isnan(scores[i]),
                "roc_auc: score at index {} is NaN (the model output diverged?)", i);
    keys[i] = (static_cast<std::uint64_t>(ordered_bits(scores[i])) << 32) |
              static_cast<std::uint64_t>(labels[i] != 0.0f);
  }
  return keys;
}

}  // namespace

double roc_auc(std::span<const float> scores, std::span<const float> labels) {
  check_pairs(scores, labels, "roc_auc");
  auto keys = pack(scores, labels);
  return auc_of_keys(keys);
}

void AucAccumulator::reset() {
  scores_.clear();
  labels_.clear();
}

void AucAccumulator::add(std::span<const float> scores, std::span<const float> labels) {
  check_pairs(scores, labels, "AucAccumulator::add");
  scores_.insert(scores_.end(), scores.begin(), scores.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
}

namespace {

// Note [Cross-rank AUC]
// AUC is not a sum of per-rank values, so the pairs themselves are gathered: every rank packs
// its pairs as u64 keys (score code << 32 | valid << 1 | label), pads them to the largest rank's
// count with invalid keys, and one allgather gives every rank every key; each rank then sorts and
// walks the same keys and gets the same exact AUC. Cost: 8 bytes x (max count x ranks) per rank.
std::vector<std::int64_t> gather_counts(Communicator& comm, std::int64_t mine) {
  const int p = comm.size();
  Tensor in = Tensor::from_vector_i64({mine}, {1}).to(comm.device());
  Tensor out = Tensor::empty({p}, DType::i64, comm.device());
  comm.allgather(in, out).wait();
  out = out.to(Device::cpu());
  const std::int64_t* c = out.data<std::int64_t>();
  return std::vector<std::int64_t>(c, c + p);
}

}  // namespace

std::int64_t AucAccumulator::total_size(Communicator* comm) const {
  if (comm == nullptr || comm->size() == 1) return size();
  std::int64_t total = 0;
  for (std::int64_t c : gather_counts(*comm, size())) total += c;
  return total;
}

double AucAccumulator::compute(Communicator* comm) const {
  if (comm == nullptr || comm->size() == 1) return roc_auc(scores_, labels_);
  const auto counts = gather_counts(*comm, size());
  const std::int64_t max_count = *std::max_element(counts.begin(), counts.end());
  const int p = comm->size();
  Tensor mine = Tensor::zeros({max_count}, DType::i64);  // zero = invalid padding
  auto keys = pack(scores_, labels_);
  auto* m = mine.data<std::int64_t>();
  for (std::size_t i = 0; i < keys.size(); ++i) m[i] = static_cast<std::int64_t>(keys[i] | 2u);
  // The keys travel on the communicator's device (host memory for mpi, the GPU for nccl).
  Tensor all = Tensor::empty({max_count * p}, DType::i64, comm->device());
  comm->allgather(mine.to(comm->device()), all).wait();
  all = all.to(Device::cpu());
  std::vector<std::uint64_t> valid;
  valid.reserve(static_cast<std::size_t>(max_count * p));
  const auto* a = all.data<std::int64_t>();
  for (std::int64_t i = 0; i < max_count * p; ++i) {
    const auto k = static_cast<std::uint64_t>(a[i]);
    if (k & 2u) valid.push_back(k);
  }
  return auc_of_keys(valid);
}

}  // namespace benchhost::metrics
