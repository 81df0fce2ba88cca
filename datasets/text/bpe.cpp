#include "bpe.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <sstream>

#include "benchhost/error.hpp"

namespace benchhost::text {
namespace {

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}
bool is_letter(unsigned char c) { return std::isalpha(c) || c >= 0x80; }
bool is_digit(unsigned char c) { return std::isdigit(c); }
bool is_space(unsigned char c) { return std::isspace(c); }

}  // namespace

ByteBpe::ByteBpe(std::vector<std::pair<std::int32_t, std::int32_t>> merges) : merges_(std::move(merges)) {
  bytes_of_.resize(256 + merges_.size());
  for (int i = 0; i < 256; ++i) bytes_of_[i] = std::string(1, static_cast<char>(i));
  for (std::size_t m = 0; m < merges_.size(); ++m) {
    const auto [a, b] = merges_[m];
    const auto id = static_cast<std::int32_t>(256 + m);
    BH_CHECK_AS(InvalidArgument, a >= 0 && b >= 0 && a < id && b < id,
                "BPE merge {} ({} {}) refers to an id not defined before it", m, a, b);
    rank_.emplace(pair_key(a, b), static_cast<std::int32_t>(m));
    bytes_of_[id] = bytes_of_[a] + bytes_of_[b];
  }
}

std::vector<std::string> ByteBpe::pretokenize(std::string_view t) {
  std::vector<std::string> out;
  std::size_t i = 0;
  const std::size_t n = t.size();
  auto u = [&](std::size_t k) { return static_cast<unsigned char>(t[k]); };
  while (i < n) {
    const std::size_t start = i;
    if (t[i] == '\'' && i + 1 < n) {  // contractions
      static const char* kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
      bool matched = false;
      for (const char* s : kSuffixes) {
        std::size_t len = std::char_traits<char>::length(s);
        if (t.substr(i + 1, len) == s) {
          out.emplace_back(t.substr(i, len + 1));
          i += len + 1;
          matched = true;
          break;
        }
      }
      if (matched) continue;
    }
    std::size_t j = i;
    if (u(j) == ' ' && j + 1 < n && !is_space(u(j + 1))) ++j;  // optional leading space
    if (j < n && !is_space(u(j))) {
      if (is_letter(u(j))) {
        while (j < n && is_letter(u(j))) ++j;
      } else if (is_digit(u(j))) {
        while (j < n && is_digit(u(j))) ++j;
      } else {
        while (j < n && !is_space(u(j)) && !is_letter(u(j)) && !is_digit(u(j))) ++j;
      }
      out.emplace_back(t.substr(start, j - start));
      i = j;
      continue;
    }
    // Whitespace run; if a non-space follows, leave the last space (when it is ' ') to it.
    while (j < n && is_space(u(j))) ++j;
    if (j < n && j - start > 1 && t[j - 1] == ' ') --j;
    out.emplace_back(t.substr(start, j - start));
    i = j;
  }
  return out;
}

ByteBpe ByteBpe::train(const std::vector<Document>& docs, std::int32_t num_merges) {
  BH_CHECK_AS(InvalidArgument, num_merges >= 0 && num_merges < (1 << 20), "BPE merges {} out of range", num_merges);
  std::unordered_map<std::string, std::int64_t> counts;
  for (const auto& d : docs)
    for (std::size_t s = 0; s < d.sentences.size(); ++s)
      for (auto& p : pretokenize((s ? " " : "") + d.sentences[s])) ++counts[std::move(p)];
  // Sorted word list so that training is independent of hash order.
  std::vector<std::pair<std::string, std::int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<std::int32_t>> words(sorted.size());
  std::vector<std::int64_t> freq(sorted.size());
  for (std::size_t w = 0; w < sorted.size(); ++w) {
    for (unsigned char c : sorted[w].first) words[w].push_back(c);
    freq[w] = sorted[w].second;
  }
  std::unordered_map<std::uint64_t, std::int64_t> pair_counts;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> where;  // pair -> words (may repeat)
  auto add_pairs = [&](std::size_t w, std::int64_t sign) {
    const auto& s = words[w];
    for (std::size_t k = 0; k + 1 < s.size(); ++k) {
      const auto key = pair_key(s[k], s[k + 1]);
      pair_counts[key] += sign * freq[w];
      if (sign > 0) where[key].push_back(static_cast<std::int32_t>(w));
    }
  };
  for (std::size_t w = 0; w < words.size(); ++w) add_pairs(w, +1);

  std::vector<std::pair<std::int32_t, std::int32_t>> merges;
  for (std::int32_t m = 0; m < num_merges; ++m) {
    std::uint64_t best = 0;
    std::int64_t best_count = 0;
    for (const auto& [key, c] : pair_counts)
      if (c > best_count || (c == best_count && c > 0 && key < best)) best = key, best_count = c;
    if (best_count < 2) break;
    const auto a = static_cast<std::int32_t>(best >> 32), b = static_cast<std::int32_t>(best & 0xffffffffu);
    const std::int32_t id = 256 + m;
    merges.emplace_back(a, b);
    std::vector<std::int32_t> touched = std::move(where[best]);
    where.erase(best);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (std::int32_t w : touched) {
      auto& s = words[w];
      add_pairs(w, -1);
      std::vector<std::int32_t> merged;
      merged.reserve(s.size());
      for (std::size_t k = 0; k < s.size(); ++k) {
        if (k + 1 < s.size() && s[k] == a && s[k + 1] == b) {
          merged.push_back(id);
          ++k;
        } else {
          merged.push_back(s[k]);
        }
      }
      s = std::move(merged);
      add_pairs(w, +1);
    }
    for (auto it = pair_counts.begin(); it != pair_counts.end();)
      it = it->second == 0 ? pair_counts.erase(it) : std::next(it);
  }
  return ByteBpe(std::move(merges));
}

void ByteBpe::encode_pretoken(std::string_view piece, std::vector<std::int32_t>& out) const {
  auto it = cache_.find(std::string(piece));
  if (it != cache_.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  std::vector<std::int32_t> s;
  for (unsigned char c : piece) s.push_back(c);
  for (;;) {
    std::int32_t best_rank = std::numeric_limits<std::int32_t>::max();
    std::size_t best_pos = 0;
    for (std::size_t k = 0; k + 1 < s.size(); ++k) {
      auto r = rank_.find(pair_key(s[k], s[k + 1]));
      if (r != rank_.end() && r->second < best_rank) best_rank = r->second, best_pos = k;
    }
    if (best_rank == std::numeric_limits<std::int32_t>::max()) break;
    const auto [a, b] = merges_[best_rank];
    std::vector<std::int32_t> merged;
    for (std::size_t k = 0; k < s.size(); ++k) {
      if (k >= best_pos && k + 1 < s.size() && s[k] == a && s[k + 1] == b) {
        merged.push_back(256 + best_rank);
        ++k;
      } else {
        merged.push_back(s[k]);
      }
    }
    s = std::move(merged);
  }
  out.insert(out.end(), s.begin(), s.end());
  if (cache_.size() < (1u << 20)) cache_.emplace(std::string(piece), std::move(s));
}

std::vector<std::int32_t> ByteBpe::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  for (const auto& p : pretokenize(text)) encode_pretoken(p, ids);
  return ids;
}

std::string ByteBpe::decode(const std::vector<std::int32_t>& ids) const {
  std::string s;
  for (std::int32_t id : ids) {
    if (id == eod()) continue;
    BH_CHECK_AS(InvalidArgument, id >= 0 && id < eod(), "BPE id {} outside the vocabulary of {}", id, vocab_size());
    s += bytes_of_[static_cast<std::size_t>(id)];
  }
  return s;
}

ByteBpe ByteBpe::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) BH_THROW(DataError, "cannot open BPE tokenizer '{}'", path);
  std::string magic;
  int version = 0;
  std::int64_t n = -1;
  in >> magic >> version >> n;
  BH_CHECK_AS(DataError, in && magic == "benchhost-bpe" && version == 1 && n >= 0 && n < (1 << 20),
              "'{}' is not a benchhost-bpe version 1 tokenizer file", path);
  std::vector<std::pair<std::int32_t, std::int32_t>> merges(static_cast<std::size_t>(n));
  for (auto& [a, b] : merges) {
    in >> a >> b;
    BH_CHECK_AS(DataError, static_cast<bool>(in), "'{}' is truncated: expected {} merges", path, n);
  }
  try {
    return ByteBpe(std::move(merges));
  } catch (const InvalidArgument& e) {
    BH_THROW(DataError, "'{}' is corrupt: {}", path, e.message());
  }
}

void ByteBpe::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) BH_THROW(DataError, "cannot write BPE tokenizer '{}'", path);
  out << "benchhost-bpe 1 " << merges_.size() << '\n';
  for (const auto& [a, b] : merges_) out << a << ' ' << b << '\n';
  if (!out) BH_THROW(DataError, "error writing '{}'", path);
}

}  // namespace benchhost::text
