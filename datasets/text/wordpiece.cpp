#include "wordpiece.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>

#include "benchhost/error.hpp"

namespace benchhost::text {
namespace {

const char* const kSpecialTokens[WordPiece::kNumSpecial] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
constexpr std::size_t kMaxWordChars = 100;  // longer "words" become [UNK], as in BERT

bool is_punct(unsigned char c) { return c < 128 && std::ispunct(c); }

// (count desc, string asc): the one order used for every "most frequent" choice.
template <class Map>
std::vector<std::pair<std::string, std::int64_t>> by_frequency(const Map& counts) {
  std::vector<std::pair<std::string, std::int64_t>> v(counts.begin(), counts.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return v;
}

}  // namespace

WordPiece::WordPiece(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, !tokens_[i].empty(), "WordPiece vocabulary: token {} is empty", i);
    auto [it, inserted] = ids_.emplace(tokens_[i], static_cast<std::int32_t>(i));
    BH_CHECK_AS(InvalidArgument, inserted, "WordPiece vocabulary: token '{}' appears twice (ids {} and {})",
                tokens_[i], it->second, i);
    max_token_chars_ = std::max(max_token_chars_, tokens_[i].size());
  }
  for (std::int32_t i = 0; i < kNumSpecial; ++i)
    BH_CHECK_AS(InvalidArgument, find(kSpecialTokens[i]) == i,
                "WordPiece vocabulary: special token {} must have id {}", kSpecialTokens[i], i);
}

std::int32_t WordPiece::find(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<std::string> WordPiece::basic_tokenize(std::string_view text) {
  std::vector<std::string> words;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
  };
  for (unsigned char c : text) {
    if (std::isspace(c) || c == 0) {
      flush();
    } else if (is_punct(c)) {
      flush();
      words.emplace_back(1, static_cast<char>(c));
    } else {
      cur.push_back(static_cast<char>(c < 128 ? std::tolower(c) : c));
    }
  }
  flush();
  return words;
}

void WordPiece::encode_word(const std::string& word, std::vector<std::int32_t>& out) const {
  if (word.size() > kMaxWordChars) {
    out.push_back(kUnk);
    return;
  }
  const std::size_t first = out.size();
  std::size_t start = 0;
  std::string piece;
  while (start < word.size()) {
    std::size_t end = std::min(word.size(), start + max_token_chars_);
    std::int32_t id = -1;
    for (; end > start; --end) {
      piece.assign(start > 0 ? "##" : "");
      piece.append(word, start, end - start);
      id = find(piece);
      if (id >= 0) break;
    }
    if (id < 0) {
      out.resize(first);
      out.push_back(kUnk);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

std::vector<std::int32_t> WordPiece::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  for (const auto& w : basic_tokenize(text)) encode_word(w, ids);
  return ids;
}

std::string WordPiece::decode(const std::vector<std::int32_t>& ids) const {
  std::string s;
  for (std::int32_t id : ids) {
    const std::string& t = token(id);
    if (t.rfind("##", 0) == 0) {
      s += t.substr(2);
    } else {
      if (!s.empty()) s += ' ';
      s += t;
    }
  }
  return s;
}

WordPiece WordPiece::build(const std::vector<Document>& docs, std::int32_t vocab_size) {
  BH_CHECK_AS(InvalidArgument, vocab_size > kNumSpecial, "WordPiece vocabulary size {} must exceed {}",
              vocab_size, kNumSpecial);
  std::unordered_map<std::string, std::int64_t> word_counts;
  for (const auto& d : docs)
    for (const auto& s : d.sentences)
      for (auto& w : basic_tokenize(s)) ++word_counts[std::move(w)];

  std::vector<std::string> tokens(kSpecialTokens, kSpecialTokens + kNumSpecial);
  std::set<std::string> have(tokens.begin(), tokens.end());
  auto add = [&](const std::string& t) {
    if (static_cast<std::int32_t>(tokens.size()) < vocab_size && have.insert(t).second) tokens.push_back(t);
  };
  std::set<char> chars;
  for (const auto& [w, n] : word_counts) chars.insert(w.begin(), w.end());
  for (char c : chars) add(std::string(1, c));
  for (char c : chars) add("##" + std::string(1, c));
  BH_CHECK_AS(InvalidArgument, static_cast<std::int32_t>(tokens.size()) < vocab_size,
              "WordPiece vocabulary size {} is too small for the {} characters of the corpus",
              vocab_size, chars.size());

  // Whole words take ~85% of the remaining budget; pieces of the words left out take the rest.
  const auto words = by_frequency(word_counts);
  const std::size_t word_budget = tokens.size() + (vocab_size - tokens.size()) * 85 / 100;
  std::size_t next_word = 0;
  for (; next_word < words.size() && tokens.size() < word_budget; ++next_word) add(words[next_word].first);
  std::map<std::string, std::int64_t> piece_counts;
  for (std::size_t i = next_word; i < words.size(); ++i) {
    const auto& [w, n] = words[i];
    for (std::size_t len = 2; len <= std::min<std::size_t>(w.size() - 1, 8); ++len) piece_counts[w.substr(0, len)] += n;
    for (std::size_t start = 1; start + 1 < w.size(); ++start)
      for (std::size_t len = 2; len <= std::min<std::size_t>(w.size() - start, 8); ++len)
        piece_counts["##" + w.substr(start, len)] += n;
  }
  for (const auto& [piece, n] : by_frequency(piece_counts)) {
    if (static_cast<std::int32_t>(tokens.size()) >= vocab_size) break;
    add(piece);
  }
  for (; next_word < words.size() && static_cast<std::int32_t>(tokens.size()) < vocab_size; ++next_word)
    add(words[next_word].first);
  return WordPiece(std::move(tokens));
}

WordPiece WordPiece::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) BH_THROW(DataError, "cannot open WordPiece vocabulary '{}'", path);
  std::vector<std::string> tokens;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(line);
  }
  try {
    return WordPiece(std::move(tokens));
  } catch (const InvalidArgument& e) {
    BH_THROW(DataError, "'{}' is not a valid vocab.txt: {}", path, e.message());
  }
}

void WordPiece::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) BH_THROW(DataError, "cannot write WordPiece vocabulary '{}'", path);
  for (const auto& t : tokens_) out << t << '\n';
  if (!out) BH_THROW(DataError, "error writing '{}'", path);
}

}  // namespace benchhost::text
