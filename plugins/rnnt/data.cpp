// The rnnt workload's data sources (see data.hpp).

#include "data.hpp"

#include <algorithm>
#include <cstring>

#include "benchhost/data/file.hpp"
#include "benchhost/data/sampler.hpp"
#include "benchhost/data/synthetic.hpp"
#include "benchhost/error.hpp"
#include "synthetic.hpp"

namespace benchhost::rnnt {

RnntFeatureDataset::RnntFeatureDataset(std::shared_ptr<const librispeech::LibriSpeechDataset> utterances,
                                       std::shared_ptr<const data::RnntFeaturePipeline> features, bool train)
    : utterances_(std::move(utterances)), features_(std::move(features)), train_(train) {}

data::Sample RnntFeatureDataset::get(const data::SampleContext& ctx) const {
  const data::Sample s = utterances_->get(ctx);
  const Tensor audio = s["audio"].contiguous();
  const double rate = s["sample_rate"].item();
  Rng rng = ctx.rng();
  const data::RnntFeatures f = features_->compute(audio.data<float>(), audio.numel(), rate, rng, train_);
  return {{"features", f.features}, {"tokens", s["tokens"]}};
}

data::TensorDict collate_utterances(const std::vector<data::Sample>& samples) {
  const auto b = static_cast<std::int64_t>(samples.size());
  BH_CHECK_AS(InvalidArgument, b > 0, "rnnt collate: empty batch");
  std::int64_t t_max = 0, u_max = 0, feat = samples[0]["features"].size(1);
  for (const auto& s : samples) {
    t_max = std::max(t_max, s["features"].size(0));
    u_max = std::max(u_max, s["tokens"].numel());
  }
  // Frames padded up to a multiple of 16 (see to_model_batch in workload.cpp: fewer distinct
  // sequence lengths, fewer LSTM primitives; the padding is masked by the lengths).
  t_max = (t_max + 15) / 16 * 16;
  Tensor features = Tensor::zeros({b, t_max, feat});
  Tensor labels = Tensor::zeros({b, u_max}, DType::i32);
  std::vector<std::int32_t> flen(static_cast<std::size_t>(b)), llen(static_cast<std::size_t>(b));
  for (std::int64_t i = 0; i < b; ++i) {
    const Tensor f = samples[static_cast<std::size_t>(i)]["features"].contiguous();
    const Tensor y = samples[static_cast<std::size_t>(i)]["tokens"].contiguous();
    std::memcpy(features.data<float>() + i * t_max * feat, f.data<float>(), sizeof(float) * static_cast<std::size_t>(f.numel()));
    std::memcpy(labels.data<std::int32_t>() + i * u_max, y.data<std::int32_t>(), sizeof(std::int32_t) * static_cast<std::size_t>(y.numel()));
    flen[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(f.size(0));
    llen[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(y.numel());
  }
  return {{"features", features},
          {"feature_lengths", Tensor::from_vector_i32(flen, {b})},
          {"labels", labels},
          {"label_lengths", Tensor::from_vector_i32(llen, {b})}};
}

data::RnntFeatureConfig feature_config(const Options& o) {
  data::RnntFeatureConfig c;
  c.n_mels = static_cast<int>(o.get_int("n-mels"));
  c.frame_stack = static_cast<int>(o.get_int("frame-splicing"));
  c.frame_subsample = static_cast<int>(o.get_int("frame-splicing"));
  c.speed_min = o.get_float("speed-min");
  c.speed_max = o.get_float("speed-max");
  c.speed_perturbation = c.speed_min != 1.0 || c.speed_max != 1.0;
  c.dither = static_cast<float>(o.get_float("dither"));
  c.spec_augment_config.freq_masks = static_cast<int>(o.get_int("freq-masks"));
  c.spec_augment_config.min_freq = static_cast<int>(o.get_int("min-freq"));
  c.spec_augment_config.max_freq = static_cast<int>(o.get_int("max-freq"));
  c.spec_augment_config.time_masks = static_cast<double>(o.get_int("time-masks"));
  c.spec_augment_config.min_time = static_cast<int>(o.get_int("min-time"));
  c.spec_augment_config.max_time = o.get_float("max-time");
  c.spec_augment = c.spec_augment_config.freq_masks > 0 || c.spec_augment_config.time_masks > 0;
  return c;
}

namespace {

// "a.json,b.json" -> {"a.json", "b.json"} (empty items dropped).
std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Note [Synthetic data]: the same batch every step: measures the model, not the input pipeline.
DataSources synthetic_sources(const RunContext& ctx, std::int64_t batch_size) {
  const Options& o = ctx.options;
  const std::int64_t frames = o.get_int("synthetic-frames"), labels = o.get_int("synthetic-labels");
  const std::int64_t vocab = o.get_int("vocab-size") > 0 ? o.get_int("vocab-size") : 1023;
  const std::int64_t feat = o.get_int("n-mels") * o.get_int("frame-splicing");
  const std::int64_t batches = 100;
  DataSources out;
  out.train = std::make_unique<data::SyntheticSource>(
      std::vector<data::FieldSpec>{{"features", {frames, feat}, DType::f32, -2.0, 2.0},
                                   {"feature_lengths", {}, DType::i32, static_cast<double>(frames), static_cast<double>(frames)},
                                   {"labels", {labels}, DType::i32, 0.0, static_cast<double>(vocab)},
                                   {"label_lengths", {}, DType::i32, static_cast<double>(labels), static_cast<double>(labels)}},
      batch_size, batches, ctx.device, ctx.seed);
  out.vocab_size = vocab;
  out.samples_per_epoch = batches * batch_size * ctx.world_size;
  out.train_utterances = out.samples_per_epoch;
  return out;
}

// Note [Training and evaluation loaders] (data/pipeline.hpp).
data::RunLoaderOptions loader_options(const RunContext& ctx) {
  data::RunLoaderOptions lo;
  lo.rank = ctx.rank;
  lo.world_size = ctx.world_size;
  lo.seed = ctx.seed;
  const std::int64_t threads = ctx.options.get_int("loader-threads") > 0 ? ctx.options.get_int("loader-threads") : ctx.num_threads;
  lo.num_threads = static_cast<int>(std::max<std::int64_t>(1, threads));
  lo.device = ctx.device;
  lo.collate = collate_utterances;
  return lo;
}

}  // namespace

DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size) {
  const Options& o = ctx.options;
  if (ctx.synthetic_data || ctx.mode == "infer") return synthetic_sources(ctx, batch_size);
  const std::string dir = data::resolve_data_dir(o.get_string("data-dir"));
  BH_CHECK_AS(InvalidArgument, !dir.empty(),
              "rnnt needs rnnt.data-dir: LibriSpeech as MLPerf's convert_librispeech.py leaves it "
              "(librispeech-<split>-wav.json, <split>-wav/, sentencepieces/librispeech1023.model; see docs), or --synthetic");
  std::string tokenizer_model = o.get_string("tokenizer");
  if (o.get_bool("generate")) {
    librispeech::LibriSpeechSyntheticOptions g;
    g.train_utterances = static_cast<int>(o.get_int("gen-train-utterances"));
    g.eval_utterances = static_cast<int>(o.get_int("gen-eval-utterances"));
    g.seed = static_cast<std::uint64_t>(o.get_int("gen-seed"));
    g.vocab_size = static_cast<int>(o.get_int("gen-vocab-size"));
    g.jobs = ctx.num_threads;
    librispeech::ensure_librispeech_synthetic(dir, g, ctx.communicator);  // rank 0 writes, the others wait
    if (tokenizer_model.empty()) tokenizer_model = librispeech::synthetic_tokenizer_model(g);
  }
  BH_CHECK_AS(InvalidArgument, !tokenizer_model.empty(), "rnnt.tokenizer is empty: name the sentencepiece model (relative to rnnt.data-dir)");
  if (tokenizer_model.front() != '/') tokenizer_model = dir + "/" + tokenizer_model;
  DataSources out;
  out.tokenizer = librispeech::make_tokenizer(tokenizer_model);
  out.vocab_size = out.tokenizer->vocab_size();
  const std::int64_t want_vocab = o.get_int("vocab-size");
  BH_CHECK_AS(InvalidArgument, want_vocab == 0 || want_vocab == out.vocab_size,
              "rnnt.vocab-size = {} but the tokenizer {} has {} pieces", want_vocab, tokenizer_model, out.vocab_size);
  librispeech::ManifestOptions train_mo;
  train_mo.max_duration = o.get_float("max-duration");
  auto train_utts = std::make_shared<const librispeech::LibriSpeechDataset>(
      librispeech::read_manifests(dir, comma_list(o.get_string("train-manifests")), train_mo), out.tokenizer);
  auto eval_utts = std::make_shared<const librispeech::LibriSpeechDataset>(
      librispeech::read_manifests(dir, comma_list(o.get_string("val-manifests")), librispeech::ManifestOptions{}), out.tokenizer);
  auto features = std::make_shared<const data::RnntFeaturePipeline>(feature_config(o));
  auto train = std::make_shared<const RnntFeatureDataset>(train_utts, features, true);
  auto eval = std::make_shared<const RnntFeatureDataset>(eval_utts, features, false);
  out.train = data::training_loader(train, batch_size, loader_options(ctx));
  out.eval = data::evaluation_loader(eval, o.get_int("eval-batch-size"), loader_options(ctx));
  out.samples_per_epoch = out.train->batches_per_epoch() * batch_size * ctx.world_size;
  out.train_utterances = train->size();
  out.eval_samples = eval->size();
  return out;
}

}  // namespace benchhost::rnnt
