#pragma once
/// @file datasets/librispeech/tokenizer.hpp  Transcript tokenizers of the MLPerf RNN-T reference:
/// the sentencepiece model (Debian's libsentencepiece) and the 28-label character fallback.
///
/// Note [Reference tokenizer]
/// The reference (rnn_speech_recognition/pytorch/common/text/tokenizer.py) has one Tokenizer
/// class with two modes:
///   - sentencepiece (`sentpiece_model` given, librispeech1023.model in MLPerf): encode with the
///     model, vocabulary size = the model's piece count (1023; blank is the extra class 1023,
///     added by the model, not here). A transcript that encodes to <unk> is refused (the
///     reference asserts `0 not in inds`, "OOV?").
///   - characters (no model): the labels " abcdefghijklmnopqrstuvwxyz'" (28), id = position;
///     characters outside the labels are dropped silently, as the reference's
///     `[label2ind[x] for x in transcript if x in label2ind]` does.
/// Decoding is the model's decode (pieces joined, "▁" back to spaces) or the labels joined.
///
/// Threading: both tokenizers are immutable after construction; encode() and decode() may be
/// called from several threads at once.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace benchhost::librispeech {

/// Transcript text <-> token ids. Ids are in [0, vocab_size()).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids of `text`. The sentencepiece tokenizer throws DataError when the text needs
  /// <unk> (a character the model never saw), naming the model and the text.
  virtual std::vector<std::int32_t> encode(const std::string& text) const = 0;
  /// Text of `ids`. Throws InvalidArgument for an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;
  /// Number of token ids (the model's classes without the transducer's blank).
  virtual std::int32_t vocab_size() const = 0;
  /// "sentencepiece DIR/librispeech1023.model (1023 pieces)" or "characters (28 labels)".
  virtual std::string describe() const = 0;
};

/// A sentencepiece model file (ModelProto, as spm_train writes it).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  /// Load `model_path`. A missing, unreadable or corrupt file is a DataError naming it.
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int32_t vocab_size() const override;
  std::string describe() const override;
  /// The piece of id `id` ("▁seven"); throws InvalidArgument when out of range.
  std::string piece(std::int32_t id) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

/// The reference's character labels: space, a..z, apostrophe (Note [Reference tokenizer]).
class CharTokenizer final : public Tokenizer {
 public:
  /// The 28 reference labels, in id order.
  static const std::string& reference_labels();
  explicit CharTokenizer(std::string labels = reference_labels());
  std::vector<std::int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(labels_.size()); }
  std::string describe() const override;

 private:
  std::string labels_;
  std::int32_t index_[256];  // byte -> id, -1 when not a label
};

/// The reference's choice: a SentencePieceTokenizer for a non-empty `model_path`, else the
/// CharTokenizer.
std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& model_path);

}  // namespace benchhost::librispeech
