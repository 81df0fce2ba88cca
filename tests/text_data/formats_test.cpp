// MLPerf BERT HDF5 shards and Megatron MMIDIDX indexed datasets: layout, round trips, and
// rejection of truncated or corrupt files.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "benchhost/error.hpp"
#include "text/bert_hdf5.hpp"
#include "text/bert_samples.hpp"
#include "text/bpe.hpp"
#include "text/indexed_dataset.hpp"
#include "text/prepare.hpp"
#include "text_test_util.hpp"

using namespace benchhost;
using namespace benchhost::text;
using namespace benchhost::text::test;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

std::vector<Document> docs_of(int n) {
  std::vector<Document> docs(static_cast<std::size_t>(n));
  const char* sentences[] = {"And God said, Let there be light: and there was light.",
                             "And God saw the light, that it was good.",
                             "And the evening and the morning were the first day.",
                             "And God called the firmament Heaven.",
                             "Let the waters under the heaven be gathered together unto one place."};
  for (int d = 0; d < n; ++d)
    for (int s = 0; s < 8; ++s) docs[d].sentences.push_back(std::string(sentences[(d + s) % 5]) + " " + std::to_string(d));
  return docs;
}


// The message of the DataError that reading `path` throws (a test failure, and "", where it reads).
std::string hdf5_data_error(const std::string& path, std::int64_t vocab_size = 0) {
  try {
    read_bert_hdf5(path, vocab_size);
  } catch (const DataError& e) {
    return e.message();
  }
  ADD_FAILURE() << path << " read without a DataError";
  return "";
}
}  // namespace

TEST(BertSamples, FollowTheCreatePretrainingDataRules) {
  const auto docs = docs_of(40);
  const WordPiece vocab = WordPiece::build(docs, 200);
  BertSampleOptions opt;
  opt.seq_len = 64;
  opt.max_predictions = 12;
  opt.dupe_factor = 3;
  const BertSamples s = make_bert_samples(docs, vocab, opt);
  ASSERT_GT(s.count, 100);
  std::int64_t random_next = 0, masked = 0, mask_token = 0, kept = 0, tokens = 0;
  for (std::int64_t i = 0; i < s.count; ++i) {
    const std::int32_t* ids = s.input_ids.data() + i * s.seq_len;
    const std::int32_t* mask = s.input_mask.data() + i * s.seq_len;
    const std::int32_t* seg = s.segment_ids.data() + i * s.seq_len;
    EXPECT_EQ(ids[0], WordPiece::kCls);
    std::int64_t len = 0;
    while (len < s.seq_len && mask[len]) ++len;
    for (std::int64_t t = len; t < s.seq_len; ++t) EXPECT_EQ(mask[t] + ids[t], 0);
    EXPECT_EQ(ids[len - 1], WordPiece::kSep);
    EXPECT_EQ(std::count(ids, ids + len, WordPiece::kSep), 2);
    EXPECT_EQ(seg[0], 0);
    EXPECT_EQ(seg[len - 1], 1);
    random_next += s.next_sentence_labels[i];
    const std::int64_t n = s.num_predictions(i);
    EXPECT_GE(n, 1);
    EXPECT_LE(n, s.max_predictions);
    EXPECT_EQ(n, std::min<std::int64_t>(s.max_predictions, std::max<std::int64_t>(1, std::llround(len * 0.15))));
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int32_t pos = s.masked_lm_positions[i * s.max_predictions + k];
      const std::int32_t label = s.masked_lm_ids[i * s.max_predictions + k];
      ASSERT_TRUE(pos > 0 && pos < len);
      if (k > 0) EXPECT_GT(pos, s.masked_lm_positions[i * s.max_predictions + k - 1]);
      EXPECT_NE(label, WordPiece::kCls);
      EXPECT_NE(label, WordPiece::kSep);
      mask_token += ids[pos] == WordPiece::kMask;
      kept += ids[pos] == label;
      ++masked;
    }
    tokens += len;
  }
  const double nsp = static_cast<double>(random_next) / static_cast<double>(s.count);
  EXPECT_NEAR(nsp, 0.5, 0.12);
  EXPECT_NEAR(static_cast<double>(mask_token) / static_cast<double>(masked), 0.8, 0.04);  // 80% [MASK]
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(masked), 0.1, 0.04);        // 10% unchanged (+ rare random hits)
}

TEST(BertHdf5, RoundTripsAndKeepsTheMlperfLayout) {
  TempDir dir;
  const auto docs = docs_of(12);
  const WordPiece vocab = WordPiece::build(docs, 150);
  BertSampleOptions opt;
  opt.seq_len = 48;
  opt.max_predictions = 8;
  const BertSamples s = make_bert_samples(docs, vocab, opt);
  write_bert_hdf5(dir / "a.hdf5", s);
  const BertSamples r = read_bert_hdf5(dir / "a.hdf5", vocab.size());
  EXPECT_EQ(r.seq_len, 48);
  EXPECT_EQ(r.max_predictions, 8);
  expect_same_samples(r, s);
  // Ids beyond a smaller vocabulary are rejected with the file name.
  EXPECT_NE(hdf5_data_error(dir / "a.hdf5", 6).find("a.hdf5"), std::string::npos);
}

TEST(BertHdf5, RejectsTruncatedCorruptAndInconsistentFiles) {
  TempDir dir;
  const auto docs = docs_of(12);
  const WordPiece vocab = WordPiece::build(docs, 150);
  BertSampleOptions opt;
  opt.seq_len = 48;
  opt.max_predictions = 8;
  BertSamples s = make_bert_samples(docs, vocab, opt);
  write_bert_hdf5(dir / "good.hdf5", s);
  const std::string bytes = slurp(dir / "good.hdf5");
  spit(dir / "trunc.hdf5", bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(read_bert_hdf5(dir / "trunc.hdf5"), DataError);
  spit(dir / "tiny.hdf5", bytes.substr(0, 100));
  EXPECT_THROW(read_bert_hdf5(dir / "tiny.hdf5"), DataError);
  spit(dir / "text.hdf5", "this is not hdf5");
  EXPECT_THROW(read_bert_hdf5(dir / "text.hdf5"), DataError);
  EXPECT_THROW(read_bert_hdf5(dir / "missing.hdf5"), DataError);
  BertSamples bad = s;
  bad.masked_lm_positions.resize(static_cast<std::size_t>((s.count - 1) * s.max_predictions));
  bad.masked_lm_ids.resize(bad.masked_lm_positions.size());
  bad.count = s.count - 1;  // the writer takes count from here: masked arrays now have N-1 rows
  {
    // Write input arrays with N rows but masked arrays with N-1 rows.
    BertSamples mixed = s;
    mixed.masked_lm_positions = bad.masked_lm_positions;
    mixed.masked_lm_ids = bad.masked_lm_ids;
    mixed.next_sentence_labels.pop_back();
    write_bert_hdf5(dir / "mixed.hdf5", bad);  // consistent file with N-1 rows
    BertSamples back = read_bert_hdf5(dir / "mixed.hdf5");
    EXPECT_EQ(back.count, s.count - 1);
  }
  BertSamples positions = s;
  positions.masked_lm_positions[0] = static_cast<std::int32_t>(s.seq_len + 3);
  write_bert_hdf5(dir / "pos.hdf5", positions);
  EXPECT_THROW(read_bert_hdf5(dir / "pos.hdf5"), DataError);
  BertSamples labels = s;
  labels.next_sentence_labels[0] = 7;
  write_bert_hdf5(dir / "nsp.hdf5", labels);
  EXPECT_THROW(read_bert_hdf5(dir / "nsp.hdf5"), DataError);
}

TEST(IndexedDataset, WritesMegatronsExactLayout) {
  TempDir dir;
  IndexedDatasetWriter w(dir / "d", 1000);
  const std::vector<std::int32_t> a{1, 2, 3}, b{999}, c{7, 8};
  w.add_sequence(a);
  w.add_sequence(b);
  w.end_document();
  w.add_sequence(c);
  w.end_document();
  w.finish();
  const std::string idx = slurp(dir / "d.idx"), bin = slurp(dir / "d.bin");
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 3 * 8);
  EXPECT_EQ(idx.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  auto u64 = [&](std::size_t off) {
    std::uint64_t v;
    std::memcpy(&v, idx.data() + off, 8);
    return v;
  };
  EXPECT_EQ(u64(9), 1u);               // version
  EXPECT_EQ(idx[17], 8);               // uint16 tokens (vocabulary <= 65535)
  EXPECT_EQ(u64(18), 3u);              // sequences
  EXPECT_EQ(u64(26), 3u);              // document indices: 0, 2, 3
  std::int32_t lens[3];
  std::memcpy(lens, idx.data() + 34, 12);
  EXPECT_EQ(lens[0], 3);
  EXPECT_EQ(lens[2], 2);
  EXPECT_EQ(u64(34 + 12 + 8), 6u);     // pointer of sequence 1: 3 tokens x 2 bytes
  EXPECT_EQ(u64(34 + 12 + 24 + 8), 2u);
  EXPECT_EQ(bin.size(), 12u);

  const IndexedDataset ds(dir / "d");
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 2);
  EXPECT_EQ(ds.num_tokens(), 6);
  EXPECT_EQ(ds.all_tokens(), (std::vector<std::int32_t>{1, 2, 3, 999, 7, 8}));
  std::vector<std::int32_t> part;
  ds.read(0, 1, 2, part);
  EXPECT_EQ(part, (std::vector<std::int32_t>{2, 3}));
  EXPECT_THROW(ds.read(0, 2, 2, part), InvalidArgument);
}

// fuzz_text, 2026-11-27 (results/fuzz/2026-11-27/campaign/text-s38): an index of no sequences
// passed a null pointer to memcpy, which UBSan reports (this fails under tools/sanitize.sh).
TEST(IndexedDataset, AnIndexOfNoSequencesIsAnEmptyDataset) {
  TempDir dir;
  IndexedDatasetWriter w(dir / "e", 1000);
  w.finish();
  const IndexedDataset ds(dir / "e");
  EXPECT_EQ(ds.num_sequences(), 0);
  EXPECT_EQ(ds.num_documents(), 0);
  EXPECT_EQ(ds.num_tokens(), 0);
  EXPECT_TRUE(ds.all_tokens().empty());
}

TEST(IndexedDataset, Int32TokensForLargeVocabularies) {
  TempDir dir;
  IndexedDatasetWriter w(dir / "big", 100000);
  const std::vector<std::int32_t> a{70000, 5, 99999};
  w.add_sequence(a);
  w.finish();
  const IndexedDataset ds(dir / "big");
  EXPECT_EQ(ds.dtype_code(), 4);
  EXPECT_EQ(ds.all_tokens(), a);
}

TEST(IndexedDataset, RejectsTruncatedAndCorruptPairs) {
  TempDir dir;
  IndexedDatasetWriter w(dir / "d", 1000);
  std::vector<std::int32_t> seq(100);
  for (int i = 0; i < 100; ++i) seq[i] = i;
  for (int d = 0; d < 5; ++d) {
    w.add_sequence(seq);
    w.end_document();
  }
  w.finish();
  const std::string idx = slurp(dir / "d.idx"), bin = slurp(dir / "d.bin");
  auto expect_bad = [&](const std::string& name, const std::string& new_idx, const std::string& new_bin) {
    spit(dir / (name + ".idx"), new_idx);
    spit(dir / (name + ".bin"), new_bin);
    EXPECT_THROW(IndexedDataset(dir / name), DataError) << name;
  };
  expect_bad("short_bin", idx, bin.substr(0, bin.size() - 2));
  expect_bad("short_idx", idx.substr(0, idx.size() - 4), bin);
  expect_bad("header_only", idx.substr(0, 20), bin);
  std::string magic = idx;
  magic[0] = 'X';
  expect_bad("magic", magic, bin);
  std::string version = idx;
  version[9] = 2;
  expect_bad("version", version, bin);
  std::string dtype = idx;
  dtype[17] = 7;  // float32 tokens
  expect_bad("dtype", dtype, bin);
  std::string huge = idx;
  const std::uint64_t n = 1ull << 60;  // would be an enormous allocation
  std::memcpy(huge.data() + 18, &n, 8);
  expect_bad("huge", huge, bin);
  std::string ptr = idx;
  const std::int64_t far = 1 << 20;
  std::memcpy(ptr.data() + 34 + 5 * 4 + 8, &far, 8);  // pointer of sequence 1
  expect_bad("pointer", ptr, bin);
  std::string overflow = idx;  // ptr + len * item_size overflowed the old bound check
  const std::int64_t near_max = INT64_MAX - 50;
  std::memcpy(overflow.data() + 34 + 5 * 4 + 8, &near_max, 8);
  expect_bad("pointer_near_int64_max", overflow, bin);
  std::string narrower = idx;  // uint16 tokens relabelled uint8: the byte counts no longer add up
  narrower[17] = 1;
  expect_bad("dtype_uint8", narrower, bin);
  std::string docs = idx;
  const std::int64_t back = 9;
  std::memcpy(docs.data() + 34 + 5 * 12 + 8 * 5, &back, 8);  // last document index != sequence count
  expect_bad("docs", docs, bin);
  EXPECT_THROW(IndexedDataset(dir / "absent"), DataError);
}

TEST(Prepare, GptDatasetFromTheBibleDecodesBackToTheHeldOutText) {
  const std::string kjv = default_kjv_path();
  if (kjv.empty()) GTEST_SKIP() << "bible-kjv-text is not installed";
  TempDir dir;
  GptPrepareOptions opt;
  opt.corpus = kjv;
  opt.out_dir = dir / "gpt";
  opt.merges = 300;
  const GptPrepared p = prepare_gpt_data(opt);
  EXPECT_EQ(p.vocab_size, 557);
  const IndexedDataset valid(p.valid_prefix);
  EXPECT_EQ(valid.num_documents(), 60);  // chapters 0, 20, 40, ... of 1189
  const ByteBpe bpe = ByteBpe::load(p.tokenizer_file);
  std::vector<std::int32_t> first;
  valid.read(0, 0, valid.sequence_length(0), first);
  EXPECT_EQ(first.back(), bpe.eod());
  EXPECT_EQ(bpe.decode(first).rfind("In the beginning God created the heaven and the earth. And the earth", 0), 0u);
  EXPECT_GT(IndexedDataset(p.train_prefix).num_tokens(), 10 * valid.num_tokens());
}

TEST(Prepare, BertShardsFromTheBible) {
  const std::string kjv = default_kjv_path();
  if (kjv.empty()) GTEST_SKIP() << "bible-kjv-text is not installed";
  TempDir dir;
  BertPrepareOptions opt;
  opt.corpus = kjv;
  opt.out_dir = dir / "bert";
  opt.vocab_size = 1000;
  opt.train_shards = 2;
  opt.samples.seq_len = 64;
  opt.samples.max_predictions = 10;
  const BertPrepared p = prepare_bert_data(opt);
  ASSERT_EQ(p.train_files.size(), 2u);
  const auto again = find_bert_data(opt.out_dir);
  EXPECT_EQ(again.train_files, p.train_files);
  const WordPiece vocab = WordPiece::load(p.vocab_file);
  EXPECT_EQ(vocab.size(), 1000);
  const BertSamples eval = read_bert_hdf5(p.eval_file, vocab.size());
  EXPECT_EQ(eval.count, p.eval_samples);
  EXPECT_GT(p.train_samples, 10 * p.eval_samples);
  std::int64_t total = 0;
  for (const auto& f : p.train_files) total += read_bert_hdf5(f, vocab.size()).count;
  EXPECT_EQ(total, p.train_samples);
  EXPECT_EQ(p.train_nsp.is_next + p.train_nsp.random_next, p.train_samples);
  EXPECT_EQ(p.eval_nsp.is_next + p.eval_nsp.random_next, p.eval_samples);
  EXPECT_NEAR(p.train_nsp.is_next_fraction(), 0.5, 0.1);  // Note [BERT sentence pairs]
}

// Note [HDF5 files read in a child process]: a file that crashes libhdf5 itself (found by fuzz_datasets: a
// null read in H5F__accum_read under H5G__stab_lookup) is a DataError naming it, and this process
// survives it.
// Note [HDF5 sizes against the bytes stored]: a fuzzed 5 KB shard whose header declares about 800
// million elements made libhdf5 allocate 3.3 GB; now the declaration is held against the bytes the
// file stores before anything is allocated.
TEST(BertHdf5, ADeclaredSizeTheFileCannotHoldIsADataError) {
  const std::string path = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_declares_800m_elements.hdf5";
  const std::string message = hdf5_data_error(path);
  EXPECT_NE(message.find("hdf5_declares_800m_elements.hdf5"), std::string::npos) << message;
  std::printf("%s\n", message.c_str());
}

// A shard whose metadata makes libhdf5 ask malloc for about 2^59 bytes (found by fuzz_hdf5): a
// DataError naming it. Under a sanitizer the forked child ends on that request; the death callback
// this process set (a fuzzer's: it records the input as a crash) must not run in the child.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, std::size_t),
                                                         void (*free_hook)(const volatile void*))
    __attribute__((weak));
TEST(BertHdf5, AFileThatMakesLibhdf5AskForAnAbsurdAllocationIsADataError) {
  const std::string path = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_libhdf5_mallocs_2p59.hdf5";
  TempDir dir;
  const std::string marker = dir / "death_callback_ran";
  static std::string marker_path;  // the callback takes no argument
  marker_path = marker;
  // The child ends on the request only where ASan may not return null (tools/fuzz.sh's setting;
  // tools/sanitize.sh lets malloc fail as it would without ASan).
  const char* asan = std::getenv("ASAN_OPTIONS");
  const bool child_dies = __sanitizer_set_death_callback != nullptr &&
                         !(asan != nullptr && std::strstr(asan, "allocator_may_return_null=1") != nullptr);
  // The callback runs in the child, so it leaves a file where the parent can see it.
  if (child_dies) __sanitizer_set_death_callback([] { std::ofstream(marker_path) << "ran\n"; });
  const std::string message = hdf5_data_error(path);
  EXPECT_NE(message.find("hdf5_libhdf5_mallocs_2p59.hdf5"), std::string::npos) << message;
  if (child_dies) __sanitizer_set_death_callback(nullptr);
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the death callback ran in the child";
  if (!child_dies)
    GTEST_SKIP() << "the death-callback half needs an ASan build where malloc may not return null (tools/fuzz.sh's "
                    "ASAN_OPTIONS); the DataError half ran";
}

TEST(BertHdf5, AFileThatCrashesTheHdf5LibraryIsADataError) {
  const std::string path = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_crashes_libhdf5.hdf5";
  const std::string message = hdf5_data_error(path);
  EXPECT_NE(message.find("hdf5_crashes_libhdf5.hdf5"), std::string::npos) << message;
  EXPECT_NE(message.find("is corrupt: the HDF5 library"), std::string::npos) << message;
}

// Note [HDF5 files read in a child process]: a 6 KB shard whose superblock makes libhdf5 allocate
// and zero 1.8 GB (found by fuzz_hdf5: 2 s and 1.8 GB for this process, which read every file again
// after the child). Now only the child parses it, within an address-space limit: a DataError that
// says why, and this process's memory does not move.
TEST(BertHdf5, AFileThatMakesLibhdf5AllocateGigabytesCostsThisProcessNothing) {
  const std::string path = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_superblock_claims_1p8gb.hdf5";
  auto peak_kb = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
  };
  const long before = peak_kb();
  const std::string message = hdf5_data_error(path);
  EXPECT_NE(message.find("hdf5_superblock_claims_1p8gb.hdf5"), std::string::npos) << message;
  // Under AddressSanitizer the child counts its heap (Note [The reader process's heap under a sanitizer]).
  if (__sanitizer_set_death_callback == nullptr || __sanitizer_install_malloc_and_free_hooks != nullptr)
    EXPECT_NE(message.find("more memory than a file of its size can justify"), std::string::npos) << message;
  EXPECT_LT(peak_kb() - before, 200 * 1024) << "this process's peak grew";
}

// Note [The reader process's heap under a sanitizer]: a 5 KB shard on which libhdf5's symbol-table
// lookups grow the heap without end (found by fuzz_hdf5 under ASan, where the child has no
// address-space limit: 230 MB/s for the parent's whole 30 s deadline). The address-space limit of an
// ordinary build and the heap count of an ASan build (tools/sanitize.sh) both stop it: the verdict
// is that it needs more memory than its size can justify, not that the library took 30 s.
TEST(BertHdf5, AFileWhoseLookupsGrowTheHeapIsRefusedForItsMemory) {
  const std::string path = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_lookups_grow_the_heap.hdf5";
  if (__sanitizer_set_death_callback != nullptr && __sanitizer_install_malloc_and_free_hooks == nullptr)
    GTEST_SKIP() << "a sanitizer without AddressSanitizer's allocator hooks: the child has no bound";
  const std::string message = hdf5_data_error(path);
  EXPECT_NE(message.find("hdf5_lookups_grow_the_heap.hdf5"), std::string::npos) << message;
  EXPECT_NE(message.find("more memory than a file of its size can justify"), std::string::npos) << message;
}

namespace {
// A small shard of six documents' samples (ids below the vocabulary's size, returned in `vocab_size`).
BertSamples small_shard(std::int64_t* vocab_size = nullptr) {
  const auto docs = docs_of(6);
  const WordPiece vocab = WordPiece::build(docs, 150);
  if (vocab_size != nullptr) *vocab_size = vocab.size();
  BertSampleOptions opt;
  opt.seq_len = 32;
  opt.max_predictions = 4;
  return make_bert_samples(docs, vocab, opt);
}
}  // namespace

// A harness whose files are small lowers the reader process's base allowance (fuzz_hdf5: 16 MiB):
// a shard still reads within it, the file above gets the same verdict, and the allowance applies
// to the reader process started after it is set, not only to the next fork by chance.
TEST(BertHdf5, ALowerBaseAllowanceStillReadsAShardAndRefusesTheSameFile) {
  if (__sanitizer_set_death_callback != nullptr && __sanitizer_install_malloc_and_free_hooks == nullptr)
    GTEST_SKIP() << "a sanitizer without AddressSanitizer's allocator hooks: the child has no bound";
  TempDir dir;
  const BertSamples s = small_shard();
  ASSERT_GT(s.count, 0);
  write_bert_hdf5(dir / "good.hdf5", s);
  using benchhost::text::detail::hdf5_reader_process_id;
  using benchhost::text::detail::set_hdf5_reader_base_allowance;
  read_bert_hdf5(dir / "good.hdf5");  // a reader process with the default allowance
  const int before = hdf5_reader_process_id();
  set_hdf5_reader_base_allowance(std::int64_t{16} << 20);
  struct Restore {
    ~Restore() { set_hdf5_reader_base_allowance(std::int64_t{256} << 20); }
  } restore;
  EXPECT_EQ(hdf5_reader_process_id(), -1) << "the reader process started before the allowance was set is ended";
  const BertSamples back = read_bert_hdf5(dir / "good.hdf5");
  EXPECT_NE(hdf5_reader_process_id(), before);
  EXPECT_EQ(back.input_ids, s.input_ids);
  const std::string grows = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_lookups_grow_the_heap.hdf5";
  const std::string message = hdf5_data_error(grows);
  EXPECT_NE(message.find("more memory than a file of its size can justify"), std::string::npos) << message;
  EXPECT_THROW(set_hdf5_reader_base_allowance(0), InvalidArgument);
}

// Note [One reader process for many files]: one child reads every file first; a crash on one file
// costs no other file anything, a child that dies between files is replaced, and the verdict on a
// file comes from a child that has read nothing else.
TEST(BertHdf5, OneReaderProcessServesManyFilesAndAFailureCostsNoOtherFile) {
  TempDir dir;
  std::int64_t vocab_size = 0;
  const BertSamples s = small_shard(&vocab_size);
  ASSERT_GT(s.count, 0);
  write_bert_hdf5(dir / "good.hdf5", s);
  const std::string good = dir / "good.hdf5";
  const std::string crashes = std::string(BENCHHOST_TEXT_TEST_FILES) + "/hdf5_crashes_libhdf5.hdf5";
  using benchhost::text::detail::hdf5_reader_process_id;
  using benchhost::text::detail::hdf5_reader_processes_started;

  EXPECT_EQ(read_bert_hdf5(good, vocab_size).count, s.count);
  const int first = hdf5_reader_process_id();
  ASSERT_GT(first, 0);
  const std::int64_t started = hdf5_reader_processes_started();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(read_bert_hdf5(good, vocab_size).count, s.count);
  EXPECT_EQ(hdf5_reader_process_id(), first) << "a new child for each file";
  EXPECT_EQ(hdf5_reader_processes_started(), started);

  // The used child dies on this file; a fresh one reads it again and dies too: a DataError.
  EXPECT_THROW(read_bert_hdf5(crashes), DataError);
  EXPECT_EQ(hdf5_reader_processes_started(), started + 1) << "the verdict must come from a fresh child";
  EXPECT_EQ(read_bert_hdf5(good, vocab_size).count, s.count);
  EXPECT_EQ(hdf5_reader_processes_started(), started + 2);

  // A child that died between files (killed here) costs the next file nothing.
  const int child = hdf5_reader_process_id();
  ASSERT_GT(child, 0);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  EXPECT_EQ(read_bert_hdf5(good, vocab_size).count, s.count);
  EXPECT_EQ(hdf5_reader_processes_started(), started + 3);
  EXPECT_NE(hdf5_reader_process_id(), child);
}
