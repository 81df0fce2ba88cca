// read_bert_hdf5 on one shard: median of N reads (each a fresh call; the reader child is kept).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include "text/bert_hdf5.hpp"
using namespace benchhost::text;
int main(int argc, char** argv) {
  const std::string path = argv[1];
  if (argc > 3) {  // write a shard of N samples, seq_len 512, 76 predictions
    BertSamples s; s.seq_len = 512; s.max_predictions = 76;
    const long n = std::atol(argv[3]);
    for (long i = 0; i < n; ++i) {
      for (int t = 0; t < 512; ++t) { s.input_ids.push_back((i * 7 + t) % 30000); s.input_mask.push_back(t < 400); s.segment_ids.push_back(t > 200); }
      for (int p = 0; p < 76; ++p) { s.masked_lm_positions.push_back(1 + p * 5); s.masked_lm_ids.push_back((i + p) % 30000); }
      s.next_sentence_labels.push_back(i & 1); ++s.count;
    }
    write_bert_hdf5(path, s);
    return 0;
  }
  const int reps = std::atoi(argv[2]);
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const BertSamples s = read_bert_hdf5(path, 30522);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (s.count <= 0) return 1;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("median %.1f ms (min %.1f, max %.1f) over %d reads\n", ms[ms.size() / 2], ms.front(), ms.back(), reps);
}
