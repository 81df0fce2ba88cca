#pragma once
/// @file datasets/text/bert_hdf5.hpp  BERT pretraining samples in MLPerf's prepared HDF5 layout.
///
/// Note [MLPerf BERT HDF5 layout]
/// One file ("shard") holds N samples as six datasets: input_ids, input_mask, segment_ids
/// [N, seq_len]; masked_lm_positions, masked_lm_ids [N, max_predictions] (zero padded: a
/// position of 0 after the first entry ends the list, since position 0 is always [CLS]); and
/// next_sentence_labels [N] (0 = B follows A, 1 = B is a random sentence). The writer uses int32
/// (int8 for the labels) like MLPerf's preparation scripts; the reader accepts any integer type,
/// checks every shape against the others and every value against its range, and loads the
/// whole shard into memory (shards are ~100 MB in MLPerf; ours are a few MB).

#include <cstdint>
#include <string>
#include <vector>


namespace benchhost::text {

/// Samples of one shard, row-major flat arrays.
struct BertSamples {
  std::int64_t count = 0;
  std::int64_t seq_len = 0;
  std::int64_t max_predictions = 0;
  std::vector<std::int32_t> input_ids, input_mask, segment_ids;  // [count * seq_len]
  std::vector<std::int32_t> masked_lm_positions, masked_lm_ids;  // [count * max_predictions]
  std::vector<std::int32_t> next_sentence_labels;                // [count]

  void reserve(std::int64_t n);
  /// Copy sample i of `src` to the end of this set (same shapes).
  void append(const BertSamples& src, std::int64_t i);
  /// Number of real (non-padding) predictions of sample i.
  std::int64_t num_predictions(std::int64_t i) const;
};

/// Write a shard; throws DataError naming the file on failure.
void write_bert_hdf5(const std::string& path, const BertSamples& samples);
/// Read and validate a shard. vocab_size > 0 checks every id against it. Throws DataError
/// naming the file and the dataset on a missing, truncated or inconsistent file. libhdf5 parses
/// the file only in a separate reader process, within a memory limit (Note [HDF5 files read in a
/// child process] in bert_hdf5.cpp): a file that crashes it, hangs it or makes it allocate what
/// the file's size cannot justify is a DataError and costs this process nothing.
BertSamples read_bert_hdf5(const std::string& path, std::int64_t vocab_size = 0);

namespace detail {
/// For tests: how many child processes have read files first (Note [One reader process for many
/// files] in bert_hdf5.cpp), and the current one's pid (-1 when there is none).
std::int64_t hdf5_reader_processes_started();
int hdf5_reader_process_id();
/// For fuzz_hdf5: whether the last read_bert_hdf5's verdict came from the reader process's own
/// read (samples or a DataError it sent) rather than its death, a deadline or no process.
bool hdf5_last_verdict_was_a_read();
/// For fuzz_hdf5: the same read in this process, without a reader process. Only for a file a
/// reader process has read without dying: libhdf5 may crash on others.
BertSamples read_bert_hdf5_in_this_process(const std::string& path, std::int64_t vocab_size);
/// For fuzz_hdf5: what the reader process may grow by to parse a file's structure, before 64 times
/// the file's size (256 MiB unless set). A harness whose files are small lowers it so that a file
/// libhdf5 cannot parse within it gets its verdict sooner. Ends the current reader process; the next
/// read starts one with it.
void set_hdf5_reader_base_allowance(std::int64_t bytes);
}  // namespace detail

}  // namespace benchhost::text
