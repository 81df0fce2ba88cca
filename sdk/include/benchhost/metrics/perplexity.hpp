#pragma once
/// @file metrics/perplexity.hpp  Log perplexity (GPT-3's metric) as an accumulator that merges
/// across ranks.
///
/// log perplexity = (sum over evaluated tokens of -log p(token | context)) / tokens, the mean
/// token cross-entropy in nats; perplexity = exp of it. Each rank adds the negative
/// log-likelihood sums and token counts of its share; compute() sums both over the ranks before
/// dividing, so the value is the mean over all tokens, not a mean of per-rank means.
///
/// Threading: an accumulator is used by one thread at a time.

#include <cstdint>

namespace benchhost {

class Communicator;  // comm/communicator.hpp

namespace metrics {

class LogPerplexity {
 public:
  void reset() { nll_sum_ = 0, tokens_ = 0; }
  /// Add `tokens` tokens whose negative log-likelihoods sum to `nll_sum` (nats). Throws
  /// InvalidArgument for a negative count, and Diverged for a NaN or infinite sum.
  void add(double nll_sum, std::int64_t tokens);
  double nll_sum() const { return nll_sum_; }     ///< on this rank
  std::int64_t tokens() const { return tokens_; }  ///< on this rank
  /// Mean negative log-likelihood per token over this rank, or (comm with more than one rank) over
  /// all ranks: a collective call. NaN when no token was added anywhere.
  double compute(Communicator* comm = nullptr) const;
  /// exp(compute(comm)).
  double perplexity(Communicator* comm = nullptr) const;

 private:
  double nll_sum_ = 0;
  std::int64_t tokens_ = 0;
};

}  // namespace metrics
}  // namespace benchhost
