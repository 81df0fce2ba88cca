#pragma once
/// @file plugins/rnnt/data.hpp  The rnnt workload's data: LibriSpeech utterances (datasets/
/// librispeech) through the reference's feature pipeline (data/audio_features.hpp), padded into
/// batches; synthetic batches of the same shapes for throughput.
///
/// Note [RNN-T batches]
/// A batch holds "features" f32 [B, T, F] (each utterance's spliced frames, zero-padded to the
/// batch's longest rounded up to a multiple of 16 frames: fewer distinct lengths, fewer LSTM
/// primitives to create), "feature_lengths" i32 [B] (frames before padding), "labels" i32 [B, U]
/// (token ids, padded with 0 as the reference pads) and "label_lengths" i32 [B]. The model wants
/// time-major [T, B, F]; the workload permutes on the device. Training features are augmented
/// (speed perturbation, SpecAugment) from the sample's own random stream (SampleContext::rng),
/// evaluation features are not (dither only, as the reference).

#include <cstdint>
#include <memory>
#include <string>

#include "benchhost/data/audio_features.hpp"
#include "benchhost/data/pipeline.hpp"
#include "benchhost/workload.hpp"
#include "librispeech.hpp"

namespace benchhost::rnnt {

/// Utterances as feature frames and token ids (Note [RNN-T batches]).
class RnntFeatureDataset final : public data::Dataset {
 public:
  RnntFeatureDataset(std::shared_ptr<const librispeech::LibriSpeechDataset> utterances,
                     std::shared_ptr<const data::RnntFeaturePipeline> features, bool train);
  std::int64_t size() const override { return utterances_->size(); }
  /// {"features": f32 [frames, F], "tokens": i32 [n]}.
  data::Sample get(const data::SampleContext& ctx) const override;
  using Dataset::get;
  std::string source(std::int64_t index) const override { return utterances_->source(index); }

 private:
  std::shared_ptr<const librispeech::LibriSpeechDataset> utterances_;
  std::shared_ptr<const data::RnntFeaturePipeline> features_;
  bool train_;
};

/// Pad a batch of RnntFeatureDataset samples (Note [RNN-T batches]).
data::TensorDict collate_utterances(const std::vector<data::Sample>& samples);

struct DataSources {
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> eval;  ///< null for synthetic data
  std::shared_ptr<const librispeech::Tokenizer> tokenizer;  ///< null for synthetic data
  std::int64_t vocab_size = 0;       ///< token ids (the model adds the blank)
  std::int64_t samples_per_epoch = 0;  ///< all ranks
  std::int64_t train_utterances = 0;
  std::int64_t eval_samples = 0;       ///< all ranks
};

/// The sources of a run: the dataset of rnnt.data-dir (generated first when rnnt.generate), or
/// synthetic batches (--synthetic, infer mode) of rnnt.synthetic-frames frames and
/// rnnt.synthetic-labels labels.
DataSources build_data_sources(const RunContext& ctx, std::int64_t batch_size);

/// The feature pipeline the options describe.
data::RnntFeatureConfig feature_config(const Options& options);

}  // namespace benchhost::rnnt
