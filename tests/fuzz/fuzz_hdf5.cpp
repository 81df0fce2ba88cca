// BERT's MLPerf HDF5 shards (datasets/text/bert_hdf5.cpp): the sizes each dataset declares held
// against the bytes the file stores, then the read itself, which runs first in a child process
// (Note [HDF5 files read twice]) so that a file crashing libhdf5 is a DataError. One child serves
// every input (Note [One reader process for many files]), but an input that ends it costs two
// forks, and each input is read twice: this harness is slow per input, hence its own binary apart
// from fuzz_datasets.
#include <hdf5.h>

#include "fuzz.hpp"
#include "text/bert_hdf5.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  benchhost::text::BertSamples s;
  s.seq_len = 8;
  s.max_predictions = 2;
  for (int r = 0; r < 2; ++r) {
    s.input_ids.insert(s.input_ids.end(), {2, 7, 8, 3, 9, 10, 3, 0});
    s.segment_ids.insert(s.segment_ids.end(), {0, 0, 0, 0, 1, 1, 1, 0});
    s.input_mask.insert(s.input_mask.end(), {1, 1, 1, 1, 1, 1, 1, 0});
    s.masked_lm_positions.insert(s.masked_lm_positions.end(), {1, 5});
    s.masked_lm_ids.insert(s.masked_lm_ids.end(), {7, 10});
    s.next_sentence_labels.push_back(r);
    ++s.count;
  }
  const std::string h5 = write_scratch("seed.hdf5", {});
  benchhost::text::write_bert_hdf5(h5, s);
  return {read_bytes(h5)};
}
}  // namespace bh_fuzz

namespace {
// Every file libhdf5 opens gets a metadata cache whose struct (H5C_t, about 512 KB with its hash
// table) comes from libhdf5's free lists; past their default 64 KB per list it goes back to malloc
// at close, and ASan serves each new one from fresh mmapped pages that fault in and are zeroed:
// that was half of this fuzzer's time. With no limit on the free lists every open after the first
// reuses one; the reader under test is the same (measured: 568 -> 986 executions/s, medians of
// three alternated 20 s runs, results/fuzz/2026-11-27/hdf5-free-lists). Set before the reader's
// child is forked, so the child keeps them too.
const herr_t free_lists_unlimited = H5set_free_list_limits(-1, -1, -1, -1, -1, -1);
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = bh_fuzz::write_scratch("fuzz.hdf5", {data, size});
  bh_fuzz::refused_or_read([&] { benchhost::text::read_bert_hdf5(path, 16); });
  return 0;
}
