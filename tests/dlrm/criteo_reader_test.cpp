// The Criteo multi-hot reader: round trip of known values through the MLPerf layout, the split
// into train / validation / test, id reduction modulo table size, batches across day boundaries,
// rejection of truncated, compressed and incomplete files; and the generator's determinism.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "benchhost/data/npy.hpp"
#include "criteo.hpp"
#include "model.hpp"
#include "synthetic.hpp"

using namespace benchhost;
using namespace benchhost::criteo;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / fmt::format("bh_criteo_{}_{}", tag, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Day d, row i: dense[j] = d * 1000 + i + j / 100, label = (i + d) % 3 == 0,
// sparse k position h = 7 * i + 13 * k + h + d (values exceed small tables: modulo is exercised).
void write_known_day(const std::string& dir, int day, std::int64_t rows,
                     const std::vector<std::int64_t>& hotness, bool compress = false) {
  Tensor dense = Tensor::empty({rows, kNumDense});
  Tensor labels = Tensor::empty({rows, 1}, DType::i32);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (int j = 0; j < kNumDense; ++j)
      dense.data<float>()[i * kNumDense + j] = static_cast<float>(day * 1000 + i) + j / 100.0f;
    labels.data<std::int32_t>()[i] = (i + day) % 3 == 0;
  }
  std::vector<std::pair<std::string, Tensor>> members;
  for (int k = 0; k < kNumSparse; ++k) {
    Tensor t = Tensor::empty({rows, hotness[k]}, DType::i32);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t h = 0; h < hotness[k]; ++h)
        t.data<std::int32_t>()[i * hotness[k] + h] = static_cast<std::int32_t>(7 * i + 13 * k + h + day);
    members.emplace_back(std::to_string(k), t);
  }
  const DayFiles f = day_files(dir, day);
  data::write_npy(f.dense, dense);
  data::write_npy(f.labels, labels);
  data::write_npz(f.sparse, members, compress);
}

std::vector<std::int64_t> small_hotness() {
  std::vector<std::int64_t> h(kNumSparse, 1);
  h[3] = 3;
  h[20] = 5;
  return h;
}

std::vector<std::int64_t> small_tables() {
  std::vector<std::int64_t> t(kNumSparse, 1000000);
  t[3] = 10;
  t[20] = 17;
  return t;
}

}  // namespace

TEST(CriteoReader, RoundTripAcrossDaysAndSplits) {
  TempDir tmp("roundtrip");
  const auto hot = small_hotness();
  write_known_day(tmp.path.string(), 0, 10, hot);
  write_known_day(tmp.path.string(), 1, 6, hot);
  write_known_day(tmp.path.string(), 2, 7, hot);  // evaluation day: 4 validation + 3 test rows
  const auto tables = small_tables();
  CriteoMultiHot train(tmp.path.string(), 3, CriteoMultiHot::Split::train, tables);
  CriteoMultiHot val(tmp.path.string(), 3, CriteoMultiHot::Split::validation, tables);
  CriteoMultiHot test(tmp.path.string(), 3, CriteoMultiHot::Split::test, tables);
  EXPECT_EQ(train.size(), 16);
  EXPECT_EQ(val.size(), 4);
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(train.hotness(), hot);

  Batch b = make_batch(5, hot);
  train.read_rows(8, 5, b);  // day 0 rows 8, 9 then day 1 rows 0, 1, 2
  const std::int64_t day_of[5] = {0, 0, 1, 1, 1}, row_of[5] = {8, 9, 0, 1, 2};
  for (int s = 0; s < 5; ++s) {
    const auto d = day_of[s], i = row_of[s];
    EXPECT_FLOAT_EQ(b.dense.data<float>()[s * kNumDense + 2], static_cast<float>(d * 1000 + i) + 0.02f);
    EXPECT_EQ(b.labels.data<float>()[s], (i + d) % 3 == 0 ? 1.0f : 0.0f);
    for (int k = 0; k < kNumSparse; ++k)
      for (std::int64_t h = 0; h < hot[k]; ++h)
        ASSERT_EQ(b.sparse[k].data<std::int32_t>()[s * hot[k] + h], (7 * i + 13 * k + h + d) % tables[k])
            << "sample " << s << " feature " << k;
  }
  Batch t = make_batch(3, hot);
  test.read_rows(0, 3, t);  // test = day 2 rows 4..6
  EXPECT_FLOAT_EQ(t.dense.data<float>()[0], 2004.0f);
  EXPECT_THROW(val.read_rows(2, 3, b), InvalidArgument);  // past the validation half
}

// A non-finite dense feature or a label other than 0/1 is a data error naming the file and row
// (the run used to PASS on them with a meaningless loss).
TEST(CriteoReader, BadValuesAreDataErrorsNamingFileAndRow) {
  TempDir tmp("values");
  const auto hot = small_hotness();
  const std::string dir = tmp.path.string();
  for (int d = 0; d < 2; ++d) write_known_day(dir, d, 8, hot);
  const DayFiles f = day_files(dir, 0);
  Tensor dense = data::read_npy(f.dense);
  dense.data<float>()[5 * kNumDense + 3] = std::numeric_limits<float>::quiet_NaN();
  data::write_npy(f.dense, dense);
  Batch b = make_batch(8, hot);
  {
    CriteoMultiHot train(dir, 2, CriteoMultiHot::Split::train, small_tables());
    try {
      train.read_rows(0, 8, b);
      FAIL() << "a NaN dense feature was read";
    } catch (const DataError& e) {
      EXPECT_NE(e.message().find(f.dense), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("row 5: dense feature 3 is nan"), std::string::npos) << e.message();
    }
  }
  write_known_day(dir, 0, 8, hot);
  Tensor labels = data::read_npy(f.labels);
  labels.data<std::int32_t>()[6] = 5;
  data::write_npy(f.labels, labels);
  CriteoMultiHot train(dir, 2, CriteoMultiHot::Split::train, small_tables());
  try {
    train.read_rows(0, 8, b);
    FAIL() << "a label of 5 was read";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("row 6: label 5 is not 0 or 1"), std::string::npos) << e.message();
  }
}

TEST(CriteoReader, RejectsTruncatedCompressedAndIncompleteFiles) {
  TempDir tmp("bad");
  const auto hot = small_hotness();
  const std::string dir = tmp.path.string();
  for (int d = 0; d < 2; ++d) write_known_day(dir, d, 8, hot);
  const auto tables = small_tables();
  ASSERT_NO_THROW(CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables));

  const DayFiles f = day_files(dir, 0);
  auto truncate = [](const std::string& path, std::uintmax_t cut) {
    fs::resize_file(path, fs::file_size(path) - cut);
  };
  // Truncated sparse archive: the central directory is gone.
  fs::copy_file(f.sparse, f.sparse + ".orig");
  truncate(f.sparse, 100);
  EXPECT_THROW(CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables), DataError);
  fs::rename(f.sparse + ".orig", f.sparse);
  // Truncated dense file: the header promises more bytes than are there.
  fs::copy_file(f.dense, f.dense + ".orig");
  truncate(f.dense, 8);
  try {
    CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables);
    ADD_FAILURE() << "truncated dense file accepted";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("day_0_dense.npy"), std::string::npos) << e.message();
  }
  fs::rename(f.dense + ".orig", f.dense);
  // Labels with a different row count.
  data::write_npy(f.labels, Tensor::zeros({7, 1}, DType::i32));
  EXPECT_THROW(CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables), DataError);
  write_known_day(dir, 0, 8, hot);
  // Compressed members cannot be memory-mapped.
  write_known_day(dir, 0, 8, hot, /*compress=*/true);
  try {
    CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables);
    ADD_FAILURE() << "compressed npz accepted";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("savez"), std::string::npos) << e.message();
  }
  // A missing feature member.
  std::vector<std::pair<std::string, Tensor>> members;
  for (int k = 0; k < kNumSparse - 1; ++k) members.emplace_back(std::to_string(k), Tensor::zeros({8, hot[k]}, DType::i32));
  data::write_npz(f.sparse, members);
  EXPECT_THROW(CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables), DataError);
  // Missing files name the file.
  fs::remove(f.sparse);
  try {
    CriteoMultiHot(dir, 2, CriteoMultiHot::Split::train, tables);
    ADD_FAILURE() << "missing npz accepted";
  } catch (const DataError& e) {
    EXPECT_NE(e.message().find("day_0_sparse_multi_hot.npz"), std::string::npos) << e.message();
  }
}

TEST(CriteoSynthetic, SameSeedSameBytesAndReadableLayout) {
  TempDir a("gen_a"), b("gen_b");
  SyntheticOptions o;
  o.train_days = 1;
  o.rows_per_day = 300;
  o.eval_rows = 100;
  o.seed = 5;
  o.out_dir = a.path.string();
  const auto ra = generate_synthetic(o);
  o.out_dir = b.path.string();
  const auto rb = generate_synthetic(o);
  EXPECT_EQ(ra.teacher_auc_validation, rb.teacher_auc_validation);
  EXPECT_GT(ra.teacher_auc_validation, 0.75);  // the planted signal is strong
  EXPECT_EQ(ra.validation_samples, 50);
  for (const auto& name : {"day_0_sparse_multi_hot.npz", "day_1_dense.npy", "day_0_labels.npy"}) {
    std::ifstream fa(a.path / name, std::ios::binary), fb(b.path / name, std::ios::binary);
    std::string sa((std::istreambuf_iterator<char>(fa)), {}), sb((std::istreambuf_iterator<char>(fb)), {});
    EXPECT_FALSE(sa.empty());
    EXPECT_EQ(sa, sb) << name;
  }
  CriteoMultiHot train(a.path.string(), 2, CriteoMultiHot::Split::train, mini_table_sizes());
  EXPECT_EQ(train.size(), 300);
  EXPECT_EQ(train.hotness(), std::vector<std::int64_t>(mlperf_multi_hot_sizes().begin(), mlperf_multi_hot_sizes().end()));
  // ensure_synthetic finds the existing copy instead of regenerating.
  o.out_dir = a.path.string();
  EXPECT_FALSE(ensure_synthetic(o).generated);
  o.seed = 6;
  EXPECT_TRUE(ensure_synthetic(o).generated);
}

TEST(DlrmModel, MlperfMemoryNeedArithmetic) {
  dlrm::DlrmConfig c;
  c.table_sizes.assign(mlperf_table_sizes().begin(), mlperf_table_sizes().end());
  c.hotness.assign(mlperf_multi_hot_sizes().begin(), mlperf_multi_hot_sizes().end());
  std::int64_t rows = 0, hot = 0;
  for (auto r : c.table_sizes) rows += r;
  for (auto h : c.hotness) hot += h;
  EXPECT_EQ(rows, 204184588);
  EXPECT_EQ(hot, 214);
  EXPECT_EQ(c.interaction_dim(), 3456);
  const auto m = dlrm::memory_need(c, 65536, true);
  EXPECT_DOUBLE_EQ(m.table_bytes, 204184588.0 * 128 * 4);
  EXPECT_DOUBLE_EQ(m.table_state_bytes, m.table_bytes);
  EXPECT_GT(m.total(), 3 * m.table_bytes);
  EXPECT_NE(m.describe().find("GiB"), std::string::npos);
}
