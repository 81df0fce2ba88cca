// The RNN-T reference tokenizers (Note [Reference tokenizer]).
#include "tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "benchhost/error.hpp"

namespace benchhost::librispeech {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  std::error_code ec;
  // The library's own message for a missing file is "<path>: No such file or directory" without
  // saying what the file was for; say it here.
  BH_CHECK_AS(DataError, std::filesystem::is_regular_file(model_path, ec),
              "{}: sentencepiece model not found (MLPerf writes it to <dataset>/sentencepieces/"
              "librispeech1023.model with scripts/create_sentencepieces.sh)",
              model_path);
  const auto status = processor_->Load(model_path);
  BH_CHECK_AS(DataError, status.ok(), "{}: not a sentencepiece model: {}", model_path, status.ToString());
  BH_CHECK_AS(DataError, processor_->GetPieceSize() > 0, "{}: sentencepiece model has no pieces", model_path);
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<std::int32_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  BH_CHECK_AS(DataError, status.ok(), "{}: cannot encode \"{}\": {}", path_, text, status.ToString());
  const int unk = processor_->unk_id();
  for (int id : ids)
    BH_CHECK_AS(DataError, id != unk,
                "{}: \"{}\" encodes to <unk> (a character the model was not trained on; the reference "
                "refuses such transcripts too)",
                path_, text);
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  const std::int32_t n = vocab_size();
  for (std::int32_t id : ids)
    BH_CHECK_AS(InvalidArgument, id >= 0 && id < n, "{}: token id {} out of range [0, {})", path_, id, n);
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  BH_CHECK_AS(DataError, status.ok(), "{}: cannot decode: {}", path_, status.ToString());
  return text;
}

std::int32_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::string SentencePieceTokenizer::piece(std::int32_t id) const {
  BH_CHECK_AS(InvalidArgument, id >= 0 && id < vocab_size(), "{}: token id {} out of range [0, {})", path_, id,
              vocab_size());
  return processor_->IdToPiece(id);
}

std::string SentencePieceTokenizer::describe() const {
  return fmt::format("sentencepiece {} ({} pieces)", path_, vocab_size());
}

const std::string& CharTokenizer::reference_labels() {
  static const std::string labels = " abcdefghijklmnopqrstuvwxyz'";
  return labels;
}

CharTokenizer::CharTokenizer(std::string labels) : labels_(std::move(labels)) {
  BH_CHECK_AS(InvalidArgument, !labels_.empty(), "CharTokenizer: no labels");
  for (auto& v : index_) v = -1;
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    auto& slot = index_[static_cast<unsigned char>(labels_[i])];
    BH_CHECK_AS(InvalidArgument, slot < 0, "CharTokenizer: label '{}' appears twice in \"{}\"", labels_[i], labels_);
    slot = static_cast<std::int32_t>(i);
  }
}

std::vector<std::int32_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) {
    const std::int32_t id = index_[static_cast<unsigned char>(c)];
    if (id >= 0) ids.push_back(id);  // others dropped, as the reference does
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::int32_t id : ids) {
    BH_CHECK_AS(InvalidArgument, id >= 0 && id < vocab_size(), "characters: token id {} out of range [0, {})", id,
                vocab_size());
    text.push_back(labels_[static_cast<std::size_t>(id)]);
  }
  return text;
}

std::string CharTokenizer::describe() const { return fmt::format("characters ({} labels)", labels_.size()); }

std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& model_path) {
  if (model_path.empty()) return std::make_shared<CharTokenizer>();
  return std::make_shared<SentencePieceTokenizer>(model_path);
}

}  // namespace benchhost::librispeech
