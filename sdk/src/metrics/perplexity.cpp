// Log perplexity accumulator. See metrics/perplexity.hpp.
#include "benchhost/metrics/perplexity.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/error.hpp"

namespace benchhost::metrics {

void LogPerplexity::add(double nll_sum, std::int64_t tokens) {
  BH_CHECK_AS(InvalidArgument, tokens >= 0, "log perplexity: {} tokens is not a count", tokens);
  BH_CHECK_AS(Diverged, std::isfinite(nll_sum), "log perplexity: the negative log-likelihood sum of {} tokens is {}",
              tokens, nll_sum);
  nll_sum_ += nll_sum;
  tokens_ += tokens;
}

double LogPerplexity::compute(Communicator* comm) const {
  double nll = nll_sum_, tokens = static_cast<double>(tokens_);
  if (comm != nullptr && comm->size() > 1) {
    // Token counts stay exact as doubles up to 2^53.
    const auto sums = allreduce_values(*comm, std::vector<double>{nll, tokens}, ReduceOp::sum);
    nll = sums[0];
    tokens = sums[1];
  }
  if (tokens == 0) return std::numeric_limits<double>::quiet_NaN();
  return nll / tokens;
}

double LogPerplexity::perplexity(Communicator* comm) const { return std::exp(compute(comm)); }

}  // namespace benchhost::metrics
