// BERT's MLPerf HDF5 shards (datasets/text/bert_hdf5.cpp): the sizes each dataset declares held
// against the bytes the file stores, then the read itself, which runs in a child process that
// sends the samples back (Note [HDF5 files read in a child process]) so that a file crashing
// libhdf5 is a DataError. One child serves every input (Note [One reader process for many files]),
// but an input that ends it costs two forks: this harness is slow per input, hence its own binary
// apart from fuzz_datasets.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

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

// A file on which libhdf5 grows its heap without end is refused when the reader process has grown
// by 256 MiB plus 64 times the file (Note [HDF5 files read in a child process]); under ASan that
// took 1.9-3.9 s an input, and once the corpus held such files this fuzzer ran 17 inputs a second
// instead of 600-900 (results/fuzz/2026-11-27/campaign/hdf5-s41c/NOTE.txt). Its inputs are at most
// 256 KB and the seed reads within 4 MiB, so 16 MiB here: the same verdict on the same files in a
// tenth of the time (the corpus's five such files and the seed: 9.0 s at 256 MiB, 0.86 s at 16).
const bool small_allowance = (benchhost::text::detail::set_hdf5_reader_base_allowance(std::int64_t{16} << 20), true);
}  // namespace

// The reader process's read is invisible to libFuzzer's coverage (it runs in another process), so a
// file the reader process read without dying is read again here, which guides the fuzzer through
// the checks, and the two reads must agree: both refuse it, or both give the same samples.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace text = benchhost::text;
  const std::string path = bh_fuzz::write_scratch("fuzz.hdf5", {data, size});
  std::optional<text::BertSamples> from_child;
  try {
    from_child = text::read_bert_hdf5(path, 16);
  } catch (const benchhost::DataError& e) {
    // A file that needs more memory than its size justifies was refused within the reader
    // process's limit; this process has no such limit (and 1.8 GB for a 6 KB file is slow).
    if (e.message().find("needed more memory than a file of its size can justify") != std::string::npos) return 0;
  }
  if (!text::detail::hdf5_last_verdict_was_a_read()) return 0;  // the reader process died on it
  std::optional<text::BertSamples> here;
  bh_fuzz::refused_or_read([&] { here = text::detail::read_bert_hdf5_in_this_process(path, 16); });
  if (from_child.has_value() != here.has_value()) {
    std::fprintf(stderr, "fuzz_hdf5: the reader process %s this file and this process %s it\n",
                 from_child ? "read" : "refused", here ? "read" : "refused");
    std::abort();
  }
  if (here && (here->count != from_child->count || here->seq_len != from_child->seq_len ||
               here->max_predictions != from_child->max_predictions || here->input_ids != from_child->input_ids ||
               here->input_mask != from_child->input_mask || here->segment_ids != from_child->segment_ids ||
               here->masked_lm_positions != from_child->masked_lm_positions ||
               here->masked_lm_ids != from_child->masked_lm_ids ||
               here->next_sentence_labels != from_child->next_sentence_labels)) {
    std::fprintf(stderr, "fuzz_hdf5: the reader process and this process read different samples\n");
    std::abort();
  }
  return 0;
}
