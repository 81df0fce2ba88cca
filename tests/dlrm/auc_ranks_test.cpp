// The exact AUC reduced across ranks (Note [Cross-rank AUC]) equals the one-process AUC of the
// union, with uneven per-rank counts and a rank holding one class only. The ranks are threads
// over an in-process communicator whose allgather copies every rank's chunk in rank order.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <thread>

#include "benchhost/comm/communicator.hpp"
#include "benchhost/metrics/auc.hpp"
#include "benchhost/random.hpp"
#include "common/thread_comm.hpp"

using namespace benchhost;
using test_support::Group;
using test_support::ThreadComm;

TEST(AucAcrossRanks, EqualsTheAucOfTheUnion) {
  const int ranks = 3;
  const std::vector<int> counts = {700, 123, 40};
  std::vector<std::vector<float>> scores(ranks), labels(ranks);
  std::vector<float> all_s, all_y;
  Rng rng(21);
  for (int r = 0; r < ranks; ++r)
    for (int i = 0; i < counts[r]; ++i) {
      const float y = r == 2 ? 1.0f : (rng.uniform() < 0.4f ? 1.0f : 0.0f);  // rank 2: positives only
      const float s = std::round((rng.normal() + y) * 4.0f) / 4.0f;           // ties across ranks
      scores[r].push_back(s);
      labels[r].push_back(y);
      all_s.push_back(s);
      all_y.push_back(y);
    }
  const double want = metrics::roc_auc(all_s, all_y);
  Group g(ranks);
  std::vector<double> got(ranks), sizes(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ThreadComm comm(g, r);
      metrics::AucAccumulator acc;
      acc.add(scores[r], labels[r]);
      got[r] = acc.compute(&comm);
      sizes[r] = static_cast<double>(acc.total_size(&comm));
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) {
    EXPECT_DOUBLE_EQ(got[r], want) << "rank " << r;
    EXPECT_EQ(sizes[r], 863) << "rank " << r;
  }
}
