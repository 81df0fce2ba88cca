// Planted-teacher Criteo generator (Note [Planted teacher] in synthetic.hpp).
#include "synthetic.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "benchhost/data/npy.hpp"
#include "benchhost/error.hpp"
#include "benchhost/metrics/auc.hpp"
#include "benchhost/random.hpp"
#include "criteo.hpp"

namespace benchhost::criteo {

namespace fs = std::filesystem;

std::vector<std::int64_t> mini_table_sizes() {
  std::vector<std::int64_t> s;
  for (std::int64_t n : mlperf_table_sizes()) s.push_back(std::min<std::int64_t>(n, 1000));
  return s;
}

namespace {

constexpr int kHidden = 4;  // width of the hidden interaction vectors
constexpr int kPairs = 8;

float to_unit(std::uint32_t u) { return (static_cast<float>(u >> 8) + 0.5f) * (1.0f / 16777216.0f); }

// Two standard normals from two uniforms (Box-Muller).
void box_muller(std::uint32_t a, std::uint32_t b, float& z0, float& z1) {
  const float r = std::sqrt(-2.0f * std::log(to_unit(a)));
  const float t = 6.28318530717958647692f * to_unit(b);
  z0 = r * std::cos(t);
  z1 = r * std::sin(t);
}

struct Teacher {
  std::uint64_t key;
  std::vector<std::int64_t> rows, hot;
  float bias = 0;
  float a[kNumDense], m[kNumDense], mu[kNumDense];
  float alpha[kNumSparse];
  int pairs[kPairs][2];

  Teacher(std::uint64_t seed, std::vector<std::int64_t> table_sizes, std::vector<std::int64_t> hotness)
      : key(mix64(seed ^ 0x7EAC4E5ull)), rows(std::move(table_sizes)), hot(std::move(hotness)) {
    Rng rng(seed, 0xC0EFull);
    for (int j = 0; j < kNumDense; ++j) {
      mu[j] = 0.5f + 0.25f * static_cast<float>(j % 7);
      a[j] = 0.2f * rng.normal();
      m[j] = std::log(std::exp(mu[j]) + 3.0f);  // rough centre; the bias absorbs the rest
    }
    // A feature's weight grows with how often each of its rows is seen per sample
    // (hotness / rows): signal sits where a model can learn it from a few hundred thousand samples,
    // as in the real data, where frequent ids carry most of the information.
    for (int k = 0; k < kNumSparse; ++k) {
      const float visits = 1000.0f * static_cast<float>(hot[k]) / static_cast<float>(rows[k]);
      const float learnable = std::sqrt(std::min(1.0f, visits / 20.0f));
      const float mag = 0.6f * learnable * (0.5f + rng.uniform());
      alpha[k] = rng.uniform() < 0.5f ? -mag : mag;
    }
    for (auto& p : pairs) {
      p[0] = static_cast<int>(rng.below(kNumSparse));
      do p[1] = static_cast<int>(rng.below(kNumSparse));
      while (p[1] == p[0]);
    }
  }

  // Hidden effect and vector of row r of table k: a pure function of (seed, k, r).
  void hidden(int k, std::int64_t r, float& e, float* v) const {
    const auto x = philox4x32(key, static_cast<std::uint64_t>(k) * 2, static_cast<std::uint64_t>(r));
    const auto y = philox4x32(key, static_cast<std::uint64_t>(k) * 2 + 1, static_cast<std::uint64_t>(r));
    float spare;
    box_muller(x[0], x[1], v[0], v[1]);
    box_muller(x[2], x[3], v[2], v[3]);
    box_muller(y[0], y[1], e, spare);
  }

  // Draw sample `index` of stream `stream`: dense (log-transformed), ids, and the teacher logit
  // without the bias.
  float draw(std::uint64_t stream, float* dense, std::vector<std::int32_t*>& ids) const {
    Rng rng(key, stream);
    float logit = 0;
    for (int j = 0; j < kNumDense; ++j) {
      const bool missing = rng.uniform() < 0.2f;
      const float z = rng.normal();
      const float count = missing ? 0.0f : std::floor(std::exp(mu[j] + 1.2f * z));
      dense[j] = std::log(count + 3.0f);
      logit += a[j] * (dense[j] - m[j]);
    }
    logit += 0.6f * std::max(0.0f, dense[0] - m[0]);
    float w[kNumSparse][kHidden] = {};
    for (int k = 0; k < kNumSparse; ++k) {
      float s = 0;
      for (std::int64_t h = 0; h < hot[k]; ++h) {
        const float u = rng.uniform();
        const auto id = std::min<std::int64_t>(rows[k] - 1, static_cast<std::int64_t>(
                                                                static_cast<double>(rows[k]) * u * u));
        ids[k][h] = static_cast<std::int32_t>(id);
        float e, v[kHidden];
        hidden(k, id, e, v);
        s += e;
        for (int c = 0; c < kHidden; ++c) w[k][c] += v[c];
      }
      const float norm = 1.0f / std::sqrt(static_cast<float>(hot[k]));
      logit += alpha[k] * s * norm;
      for (int c = 0; c < kHidden; ++c) w[k][c] *= norm;
    }
    for (const auto& p : pairs) {
      float dot = 0;
      for (int c = 0; c < kHidden; ++c) dot += w[p[0]][c] * w[p[1]][c];
      logit += 0.125f * dot;
    }
    return logit;
  }

  float label_uniform(std::uint64_t stream) const {
    return Rng(key ^ 0x1AB31ull, stream).uniform();
  }
};

std::uint64_t stream_of(int day, std::int64_t row) {
  return (static_cast<std::uint64_t>(day) << 40) | static_cast<std::uint64_t>(row);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Bias giving a ~25% click rate on a pilot sample (bisection on the mean probability).
float calibrate_bias(const Teacher& t) {
  const int n = 4000;
  std::vector<float> logits(n);
  std::vector<float> dense(kNumDense);
  std::vector<std::vector<std::int32_t>> store(kNumSparse);
  std::vector<std::int32_t*> ids(kNumSparse);
  for (int k = 0; k < kNumSparse; ++k) store[k].resize(t.hot[k]), ids[k] = store[k].data();
  for (int i = 0; i < n; ++i) logits[i] = t.draw(stream_of(1023, i), dense.data(), ids);
  float lo = -20, hi = 20;
  for (int it = 0; it < 60; ++it) {
    const float mid = 0.5f * (lo + hi);
    double mean = 0;
    for (float l : logits) mean += sigmoid(l + mid);
    (mean / n < 0.25 ? lo : hi) = mid;
  }
  return 0.5f * (lo + hi);
}

nlohmann::json options_json(const SyntheticOptions& o) {
  return {{"generator", "benchhost make_criteo_synthetic v2"},
          {"train_days", o.train_days},
          {"rows_per_day", o.rows_per_day},
          {"eval_rows", o.eval_rows},
          {"table_sizes", o.table_sizes},
          {"multi_hot_sizes", o.hotness},
          {"seed", o.seed}};
}

SyntheticOptions resolved(SyntheticOptions o) {
  if (o.table_sizes.empty()) o.table_sizes = mini_table_sizes();
  if (o.hotness.empty()) o.hotness.assign(mlperf_multi_hot_sizes().begin(), mlperf_multi_hot_sizes().end());
  BH_CHECK_AS(InvalidArgument, !o.out_dir.empty(), "make_criteo_synthetic: no output directory given");
  BH_CHECK_AS(InvalidArgument, o.table_sizes.size() == kNumSparse && o.hotness.size() == kNumSparse,
              "make_criteo_synthetic: need {} table sizes and {} multi-hot sizes, got {} and {}",
              kNumSparse, kNumSparse, o.table_sizes.size(), o.hotness.size());
  for (int k = 0; k < kNumSparse; ++k) {
    BH_CHECK_AS(InvalidArgument, o.table_sizes[k] >= 1 && o.table_sizes[k] <= (std::int64_t{1} << 31),
                "make_criteo_synthetic: table size {} of feature {} must be in [1, 2^31]",
                o.table_sizes[k], k);
    BH_CHECK_AS(InvalidArgument, o.hotness[k] >= 1 && o.hotness[k] <= 4096,
                "make_criteo_synthetic: multi-hot size {} of feature {} must be in [1, 4096]",
                o.hotness[k], k);
  }
  BH_CHECK_AS(InvalidArgument, o.train_days >= 1 && o.train_days <= 64,
              "make_criteo_synthetic: --days must be in [1, 64], got {}", o.train_days);
  BH_CHECK_AS(InvalidArgument, o.rows_per_day >= 1 && o.eval_rows >= 2,
              "make_criteo_synthetic: need rows per day >= 1 and eval rows >= 2");
  std::int64_t hot_total = 0;
  for (auto h : o.hotness) hot_total += h;
  const double day_bytes = static_cast<double>(std::max(o.rows_per_day, o.eval_rows)) *
                           static_cast<double>(4 * (hot_total + kNumDense + 1));
  BH_CHECK_AS(InvalidArgument, day_bytes < 3.5e9,
              "make_criteo_synthetic: one day would take {:.1f} GB (this generator writes days of "
              "under 3.5 GB, one .npz without zip64); use more days with fewer rows",
              day_bytes / 1e9);
  return o;
}

struct DayResult {
  std::vector<float> probs, labels;
};

DayResult write_day(const Teacher& t, const std::string& dir, int day, std::int64_t n) {
  Tensor dense = Tensor::empty({n, kNumDense}, DType::f32);
  Tensor labels = Tensor::empty({n, 1}, DType::i32);
  std::vector<Tensor> sparse;
  for (int k = 0; k < kNumSparse; ++k) sparse.push_back(Tensor::empty({n, t.hot[k]}, DType::i32));
  DayResult r;
  r.probs.resize(n);
  r.labels.resize(n);
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, 512),
                    [&](const tbb::blocked_range<std::int64_t>& range) {
    std::vector<std::int32_t*> ids(kNumSparse);
    for (std::int64_t i = range.begin(); i != range.end(); ++i) {
      for (int k = 0; k < kNumSparse; ++k) ids[k] = sparse[k].data<std::int32_t>() + i * t.hot[k];
      const float logit = t.draw(stream_of(day, i), dense.data<float>() + i * kNumDense, ids) + t.bias;
      const float p = sigmoid(logit);
      const bool click = t.label_uniform(stream_of(day, i)) < p;
      labels.data<std::int32_t>()[i] = click ? 1 : 0;
      r.probs[i] = p;
      r.labels[i] = click ? 1.0f : 0.0f;
    }
  });
  const DayFiles f = day_files(dir, day);
  data::write_npy(f.dense, dense);
  data::write_npy(f.labels, labels);
  std::vector<std::pair<std::string, Tensor>> members;
  for (int k = 0; k < kNumSparse; ++k) members.emplace_back(std::to_string(k), sparse[k]);
  data::write_npz(f.sparse, members, /*compress=*/false);
  return r;
}

}  // namespace

SyntheticReport generate_synthetic(const SyntheticOptions& options) {
  const SyntheticOptions o = resolved(options);
  Teacher t(o.seed, o.table_sizes, o.hotness);
  t.bias = calibrate_bias(t);

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  BH_CHECK_AS(DataError, !ec, "make_criteo_synthetic: cannot create {}: {}", o.out_dir, ec.message());
  // Write into a private staging directory next to the target, then rename file by file.
  const std::string stage = fmt::format("{}/.staging-{}-{}", o.out_dir, ::getpid(), mix64(o.seed) % 100000);
  fs::create_directories(stage, ec);
  BH_CHECK_AS(DataError, !ec, "make_criteo_synthetic: cannot create {}: {}", stage, ec.message());
  fs::remove(fs::path(o.out_dir) / "dataset_info.json", ec);

  SyntheticReport rep;
  std::vector<float> train_probs, train_labels;
  double positives = 0, total = 0;
  for (int d = 0; d <= o.train_days; ++d) {
    const bool eval_day = d == o.train_days;
    DayResult r = write_day(t, stage, d, eval_day ? o.eval_rows : o.rows_per_day);
    for (float y : r.labels) positives += y;
    total += static_cast<double>(r.labels.size());
    if (eval_day) {
      const std::size_t half = (r.probs.size() + 1) / 2;
      rep.teacher_auc_validation = metrics::roc_auc(std::span<const float>(r.probs).first(half),
                                                    std::span<const float>(r.labels).first(half));
      rep.validation_samples = static_cast<std::int64_t>(half);
    } else {
      train_probs.insert(train_probs.end(), r.probs.begin(), r.probs.end());
      train_labels.insert(train_labels.end(), r.labels.begin(), r.labels.end());
    }
    const DayFiles staged = day_files(stage, d), final_files = day_files(o.out_dir, d);
    fs::rename(staged.dense, final_files.dense, ec);
    if (!ec) fs::rename(staged.labels, final_files.labels, ec);
    if (!ec) fs::rename(staged.sparse, final_files.sparse, ec);
    BH_CHECK_AS(DataError, !ec, "make_criteo_synthetic: cannot move day {} into {}: {}", d,
                o.out_dir, ec.message());
  }
  fs::remove_all(stage, ec);
  rep.teacher_auc_train = metrics::roc_auc(train_probs, train_labels);
  rep.train_samples = static_cast<std::int64_t>(train_probs.size());
  rep.positive_rate = positives / total;
  rep.generated = true;

  nlohmann::json info = options_json(o);
  info["teacher_auc_validation"] = rep.teacher_auc_validation;
  info["teacher_auc_train"] = rep.teacher_auc_train;
  info["positive_rate"] = rep.positive_rate;
  info["train_samples"] = rep.train_samples;
  info["validation_samples"] = rep.validation_samples;
  const std::string tmp = fmt::format("{}/.dataset_info.json.{}", o.out_dir, ::getpid());
  {
    std::ofstream out(tmp);
    out << info.dump(2) << "\n";
    BH_CHECK_AS(DataError, out.good(), "make_criteo_synthetic: cannot write {}", tmp);
  }
  fs::rename(tmp, fs::path(o.out_dir) / "dataset_info.json", ec);
  BH_CHECK_AS(DataError, !ec, "make_criteo_synthetic: cannot write {}/dataset_info.json: {}",
              o.out_dir, ec.message());
  return rep;
}

SyntheticReport ensure_synthetic(const SyntheticOptions& options) {
  const SyntheticOptions o = resolved(options);
  const fs::path info_path = fs::path(o.out_dir) / "dataset_info.json";
  std::ifstream in(info_path);
  if (in) {
    try {
      nlohmann::json info = nlohmann::json::parse(in);
      nlohmann::json want = options_json(o);
      bool same = true;
      for (auto it = want.begin(); it != want.end(); ++it)
        if (!info.contains(it.key()) || info[it.key()] != it.value()) same = false;
      for (int d = 0; same && d <= o.train_days; ++d) {
        const DayFiles f = day_files(o.out_dir, d);
        same = fs::exists(f.dense) && fs::exists(f.labels) && fs::exists(f.sparse);
      }
      if (same) {
        SyntheticReport r;
        r.teacher_auc_validation = info.at("teacher_auc_validation").get<double>();
        r.teacher_auc_train = info.at("teacher_auc_train").get<double>();
        r.positive_rate = info.at("positive_rate").get<double>();
        r.train_samples = info.at("train_samples").get<std::int64_t>();
        r.validation_samples = info.at("validation_samples").get<std::int64_t>();
        r.generated = false;
        return r;
      }
    } catch (const nlohmann::json::exception&) {
      // unreadable info: regenerate
    }
  }
  return generate_synthetic(o);
}

}  // namespace benchhost::criteo
