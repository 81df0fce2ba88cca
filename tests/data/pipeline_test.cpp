// The oneTBB loader: determinism across thread counts, resume, errors, shutdown; synthetic data.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "benchhost/data/pipeline.hpp"
#include "benchhost/data/synthetic.hpp"
#include "data/internal.hpp"
#include "data_test_util.hpp"

using namespace benchhost;
using namespace benchhost::data;

namespace {

// An augmenting dataset: "x" is 8 numbers from the sample's augmentation stream, "index" the
// index. Optionally fails on one index, like a corrupt file would.
class AugDataset : public Dataset {
 public:
  explicit AugDataset(std::int64_t n, std::int64_t bad = -1) : n_(n), bad_(bad) {}
  std::int64_t size() const override { return n_; }
  Sample get(const SampleContext& ctx) const override {
    check_index(ctx.index, n_);
    gets_.fetch_add(1);
    if (ctx.index == bad_) BH_THROW(DataError, "{}: unexpected end of data", source(ctx.index));
    Rng rng = ctx.rng();
    std::vector<float> x(8);
    for (auto& v : x) v = rng.uniform();
    Sample s;
    s.set("x", Tensor::from_vector(x, {8}));
    s.set("index", Tensor::from_vector_i64({ctx.index}, {}));
    return s;
  }
  using Dataset::get;
  std::string source(std::int64_t index) const override { return "shard/" + std::to_string(index) + ".bin"; }
  std::int64_t gets() const { return gets_.load(); }

 private:
  std::int64_t n_, bad_;
  mutable std::atomic<std::int64_t> gets_{0};
};

std::vector<Batch> run_epoch(std::shared_ptr<const Dataset> ds, int threads, std::int64_t epoch, std::int64_t batch,
                             bool drop_last = false, std::int64_t position = 0) {
  DataLoader loader(ds, Sampler({ds->size(), 0, 1, true, 99}), {batch, threads, 2, 0, drop_last, Device::cpu(), 5});
  loader.start_epoch(epoch, position);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

std::vector<float> flat(const std::vector<Batch>& bs, const char* field) {
  std::vector<float> v;
  for (const auto& b : bs) {
    auto f = b[field].to_float_vector();
    v.insert(v.end(), f.begin(), f.end());
  }
  return v;
}

}  // namespace

TEST(Loader, SameBatchesWithOneAndFourThreads) {
  auto ds = std::make_shared<AugDataset>(203);
  const auto one = run_epoch(ds, 1, 3, 16);
  const auto four = run_epoch(ds, 4, 3, 16);
  ASSERT_EQ(one.size(), 13u);  // 12 full + 1 of 11
  ASSERT_EQ(four.size(), one.size());
  EXPECT_EQ(one.back().size(), 11);
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].indices, four[i].indices);
    EXPECT_EQ(one[i]["x"].shape(), (Shape{one[i].size(), 8}));
  }
  EXPECT_EQ(flat(one, "x"), flat(four, "x"));
  // The batches follow the sampler's order, and the "index" field matches the indices.
  const auto order = Sampler({203, 0, 1, true, 99}).indices(3);
  std::vector<std::int64_t> seen;
  for (const auto& b : one) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  EXPECT_EQ(seen, order);
  const auto idx = flat(one, "index");
  for (std::size_t i = 0; i < idx.size(); ++i) EXPECT_EQ(static_cast<std::int64_t>(idx[i]), order[i]);
  // Another epoch: another order and other augmentations of the same sample.
  const auto other = run_epoch(ds, 2, 4, 16);
  EXPECT_NE(other[0].indices, one[0].indices);
}

TEST(Loader, AugmentationDependsOnSeedEpochAndIndexOnly) {
  AugDataset ds(10);
  auto a = ds.get(SampleContext{3, 1, 5})["x"].to_float_vector();
  EXPECT_EQ(a, ds.get(SampleContext{3, 1, 5})["x"].to_float_vector());
  EXPECT_NE(a, ds.get(SampleContext{3, 2, 5})["x"].to_float_vector());
  EXPECT_NE(a, ds.get(SampleContext{4, 1, 5})["x"].to_float_vector());
  EXPECT_NE(a, ds.get(SampleContext{3, 1, 6})["x"].to_float_vector());
}

TEST(Loader, DropLastBatchAndBatchCount) {
  auto ds = std::make_shared<AugDataset>(50);
  auto kept = run_epoch(ds, 2, 0, 8, /*drop_last=*/true);
  EXPECT_EQ(kept.size(), 6u);
  for (auto& b : kept) EXPECT_EQ(b.size(), 8);
  DataLoader l(ds, Sampler({50}), {8, 1, 2, 0, true});
  EXPECT_EQ(l.batches_per_epoch(), 6);
  DataLoader l2(ds, Sampler({50}), {8, 1, 2, 0, false});
  EXPECT_EQ(l2.batches_per_epoch(), 7);
}

TEST(Loader, ResumeFromBatchPosition) {
  auto ds = std::make_shared<AugDataset>(90);
  const auto full = run_epoch(ds, 2, 2, 10);
  ASSERT_EQ(full.size(), 9u);
  EXPECT_EQ(full[3].position, 40);
  const auto rest = run_epoch(ds, 3, 2, 10, false, full[3].position);
  ASSERT_EQ(rest.size(), 5u);
  for (std::size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].indices, full[i + 4].indices);
    EXPECT_EQ(rest[i]["x"].to_float_vector(), full[i + 4]["x"].to_float_vector());
    EXPECT_EQ(rest[i].position, full[i + 4].position);
  }
}

TEST(Loader, WorkerErrorReachesCallerWithFileAndIndex) {
  auto ds = std::make_shared<AugDataset>(64, /*bad=*/37);
  for (int threads : {1, 3}) {
    DataLoader loader(ds, Sampler({64, 0, 1, false}), {8, threads});
    loader.start_epoch(0);
    int good = 0;
    try {
      while (loader.next()) ++good;
      ADD_FAILURE() << "no error surfaced";
    } catch (const DataError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("sample 37"), std::string::npos) << msg;
      EXPECT_NE(msg.find("shard/37.bin"), std::string::npos) << msg;
      EXPECT_NE(msg.find("unexpected end of data"), std::string::npos) << msg;
    }
    EXPECT_EQ(good, 4);  // batches 0..3 (indices 0..31) are complete before the bad sample
    EXPECT_FALSE(loader.next().has_value());  // the epoch is over after the error
    loader.start_epoch(1);                    // and the loader is usable again
    EXPECT_TRUE(loader.next().has_value());
  }
}

TEST(Loader, CancelAndDestroyMidEpochDoNotHang) {
  auto ds = std::make_shared<AugDataset>(5000);
  {
    DataLoader loader(ds, Sampler({5000}), {4, 2, 1, 4});
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next().has_value());
    loader.cancel();
    EXPECT_FALSE(loader.next().has_value());
    loader.cancel();  // idempotent
    loader.start_epoch(1);
    ASSERT_TRUE(loader.next().has_value());
    loader.start_epoch(2);  // restart while the pipeline is blocked on a full queue
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->epoch, 2);
  }  // destructor with the pipeline blocked on its full queue
  EXPECT_LT(ds->gets(), 5000);  // bounded prefetch: the loader did not run ahead through the epoch
  {
    DataLoader loader(ds, Sampler({5000}), {4, 2});
    loader.start_epoch(0);
  }  // destroyed before any next()
}

TEST(Loader, RejectsBadOptionsAndMisuse) {
  auto ds = std::make_shared<AugDataset>(10);
  EXPECT_THROW(DataLoader(ds, Sampler({10}), {0}), InvalidArgument);
  EXPECT_THROW(DataLoader(ds, Sampler({10}), {1, 0}), InvalidArgument);
  EXPECT_THROW(DataLoader(ds, Sampler({11}), {1}), InvalidArgument);
  EXPECT_THROW(DataLoader(nullptr, Sampler({10}), {1}), InvalidArgument);
  // A grouped sampler is built for one batch size (Note [Grouped batches]).
  SamplerOptions grouped{10};
  grouped.group_ids.assign(10, 0);
  grouped.group_batch_size = 2;
  EXPECT_THROW(DataLoader(ds, Sampler(grouped), {3}), InvalidArgument);
  DataLoader ok(ds, Sampler(grouped), {2});
  EXPECT_EQ(ok.batches_per_epoch(), 5);
  DataLoader l(ds, Sampler({10}), {1});
  EXPECT_THROW(l.next(), InvalidArgument);
  EXPECT_THROW(l.start_epoch(0, 11), InvalidArgument);
}

TEST(Loader, ShapeMismatchIsADataError) {
  class Ragged : public Dataset {
   public:
    std::int64_t size() const override { return 6; }
    Sample get(const SampleContext& c) const override {
      return Sample{{"tokens", Tensor::zeros({c.index < 3 ? 4 : 5}, DType::i32)}};
    }
    using Dataset::get;
  };
  DataLoader l(std::make_shared<Ragged>(), Sampler({6, 0, 1, false}), {6});
  l.start_epoch(0);
  EXPECT_DATA_ERROR(l.next(), "field 'tokens' of sample 3");
}

TEST(Loader, CustomCollate) {
  auto ds = std::make_shared<AugDataset>(12);
  LoaderOptions o{4};
  o.collate = [](const std::vector<Sample>& s) {
    return TensorDict{{"count", Tensor::from_vector_i64({static_cast<std::int64_t>(s.size())}, {1})}};
  };
  DataLoader l(ds, Sampler({12}), o);
  l.start_epoch(0);
  int n = 0;
  while (auto b = l.next()) {
    EXPECT_EQ(b->tensors.at("count").item({0}), 4);
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_EQ(l.stats().batches, 3);
  EXPECT_EQ(l.stats().samples, 12);
}

TEST(Loader, CudaDeviceCopiesFromPinnedMemory) {
  std::string why;
  if (!device_available(Device::cuda(), &why)) GTEST_SKIP() << "no CUDA device here: " << why;
  auto ds = std::make_shared<AugDataset>(40);
  const auto cpu = run_epoch(ds, 2, 0, 8);
  DataLoader l(ds, Sampler({40, 0, 1, true, 99}), {8, 2, 2, 0, false, Device::cuda(), 5});
  l.start_epoch(0);
  std::size_t i = 0;
  while (auto b = l.next()) {
    EXPECT_TRUE(b->tensors.at("x").device().is_cuda());
    EXPECT_EQ(b->tensors.at("x").to_float_vector(), cpu[i++]["x"].to_float_vector());
  }
  EXPECT_EQ(i, cpu.size());
}

TEST(Collate, StacksFieldsAndTensorDataset) {
  Tensor xs = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {3, 2});
  TensorDataset ds(TensorDict{{"x", xs}, {"y", Tensor::from_vector_i64({7, 8, 9}, {3})}});
  EXPECT_EQ(ds.size(), 3);
  auto b = collate({ds.get(2), ds.get(0)});
  EXPECT_EQ(b["x"].shape(), (Shape{2, 2}));
  EXPECT_EQ(b["x"].to_float_vector(), (std::vector<float>{4, 5, 0, 1}));
  EXPECT_EQ(b["y"].to_float_vector(), (std::vector<float>{9, 7}));
  EXPECT_THROW(ds.get(3), InvalidArgument);
  EXPECT_THROW(b.at("z"), InvalidArgument);
  // A non-contiguous sample (a transposed view) is copied correctly.
  Sample t{{"m", Tensor::from_vector({1, 2, 3, 4}, {2, 2}).transpose(0, 1)}};
  EXPECT_EQ(collate({t})["m"].to_float_vector(), (std::vector<float>{1, 3, 2, 4}));
}

// The allocator path of collation (pinned host memory for a CUDA pipeline; the CPU backend's own
// allocator here) checks the batch's shape as Tensor::empty does: n samples of a huge, empty shape
// overflow the element count and are refused, not sized from a wrapped product.
TEST(Collate, ABatchTooLargeForAnyMemoryIsRefusedOnTheAllocatorPathToo) {
  const Sample s{{"x", Tensor::empty({0, std::int64_t{1} << 40})}};
  const std::vector<Sample> batch(std::size_t{1} << 17, s);
  EXPECT_THROW(collate(batch), InvalidArgument);
  EXPECT_THROW(collate_into(batch, &allocator_for(Device::cpu())), InvalidArgument);
  const std::vector<Sample> fine(4, s);
  EXPECT_EQ(collate_into(fine, &allocator_for(Device::cpu()))["x"].shape(), (Shape{4, 0, std::int64_t{1} << 40}));
}

TEST(Synthetic, SourceReusesItsBuffers) {
  SyntheticSource src({{"image", {3, 8, 8}, DType::f32, -1, 1},
                       {"label", {}, DType::i64, 0, 10},
                       {"mask", {5}, DType::boolean},
                       {"half", {2}, DType::bf16}},
                      4, 3);
  src.start_epoch(0);
  auto a = src.next();
  auto b = src.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)["image"].shape(), (Shape{4, 3, 8, 8}));
  EXPECT_EQ((*a)["label"].dtype(), DType::i64);
  EXPECT_EQ((*a)["image"].raw_data(), (*b)["image"].raw_data());  // generated once
  for (float v : (*a)["image"].to_float_vector()) {
    EXPECT_GE(v, -1.f);
    EXPECT_LT(v, 1.f);
  }
  std::set<float> labels;
  for (float v : (*a)["label"].to_float_vector()) {
    EXPECT_GE(v, 0);
    EXPECT_LT(v, 10);
    labels.insert(v);
  }
  EXPECT_TRUE(src.next().has_value());
  EXPECT_FALSE(src.next().has_value());  // 3 batches per epoch
  EXPECT_EQ(src.stats().samples, 12);
  src.start_epoch(1);
  EXPECT_TRUE(src.next().has_value());
  EXPECT_THROW(SyntheticSource({}, 4), InvalidArgument);
  EXPECT_THROW(SyntheticSource({{"x", {2}}}, 0), InvalidArgument);
}

TEST(Synthetic, DatasetIsAPureFunctionOfSeedAndIndex) {
  auto ds = std::make_shared<SyntheticDataset>(std::vector<FieldSpec>{{"x", {16}}, {"y", {}, DType::i32, 0, 3}}, 100, 3);
  EXPECT_EQ(ds->get(7)["x"].to_float_vector(), ds->get(SampleContext{7, 5, 1})["x"].to_float_vector());
  EXPECT_NE(ds->get(7)["x"].to_float_vector(), ds->get(8)["x"].to_float_vector());
  EXPECT_EQ(flat(run_epoch(ds, 1, 0, 32), "x"), flat(run_epoch(ds, 4, 0, 32), "x"));
}

TEST(Loader, NonDataErrorsAreWrappedWithTheSource) {
  class Throws : public Dataset {
   public:
    std::int64_t size() const override { return 10; }
    Sample get(const SampleContext& c) const override {
      if (c.index == 5) throw std::out_of_range("vector index");
      return Sample{{"x", Tensor::zeros({2})}};
    }
    using Dataset::get;
    std::string source(std::int64_t i) const override { return "rec/" + std::to_string(i); }
  };
  DataLoader l(std::make_shared<Throws>(), Sampler({10, 0, 1, false}), {2, 2});
  l.start_epoch(3);
  EXPECT_DATA_ERROR(while (l.next()) {}, "sample 5 (epoch 3) from rec/5: vector index");
}

// Note [Training and evaluation loaders]: the training loaders of the ranks share out a shuffled
// order in full batches of equal count (the tail dropped); the evaluation loaders cover every
// sample once, in order, the short last batch kept.
TEST(Loader, TrainingAndEvaluationLoadersOfARun) {
  auto ds = std::make_shared<AugDataset>(23);
  std::set<std::int64_t> trained, evaluated;
  std::vector<std::int64_t> eval_order;
  for (int r = 0; r < 2; ++r) {
    RunLoaderOptions o;
    o.rank = r;
    o.world_size = 2;
    o.seed = 7;
    auto train = training_loader(ds, 4, o);
    EXPECT_EQ(train->batches_per_epoch(), 2);  // 11 samples per rank: two full batches of 4
    train->start_epoch(0);
    int batches = 0;
    while (auto b = train->next()) {
      EXPECT_EQ(b->size(), 4);
      for (std::int64_t i : b->indices) EXPECT_TRUE(trained.insert(i).second) << "index " << i << " twice";
      ++batches;
    }
    EXPECT_EQ(batches, 2);
    auto eval = evaluation_loader(ds, 5, o);
    eval->start_epoch(0);
    while (auto b = eval->next())
      for (std::int64_t i : b->indices) {
        EXPECT_TRUE(evaluated.insert(i).second);
        if (r == 0) eval_order.push_back(i);
      }
  }
  EXPECT_EQ(trained.size(), 16u);
  EXPECT_EQ(evaluated.size(), 23u);
  EXPECT_TRUE(std::is_sorted(eval_order.begin(), eval_order.end()));
  EXPECT_EQ(eval_order.size(), 12u);  // rank 0 of 2: 0, 2, ..., 22
  // With groups, every training batch is one group's.
  RunLoaderOptions g;
  for (std::int64_t i = 0; i < 23; ++i) g.group_ids.push_back(static_cast<std::int32_t>(i % 3 == 0));
  auto grouped = training_loader(ds, 2, g);
  grouped->start_epoch(1);
  while (auto b = grouped->next()) EXPECT_EQ(b->indices[0] % 3 == 0, b->indices[1] % 3 == 0);
  EXPECT_THROW(training_loader(nullptr, 2, g), InvalidArgument);
}
