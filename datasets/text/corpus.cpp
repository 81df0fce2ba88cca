#include "corpus.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

#include "benchhost/error.hpp"

namespace benchhost::text {
namespace {

constexpr std::size_t kEc02HeaderBytes = 0x54;
constexpr std::uint32_t kMaxSegmentBytes = 1u << 24;

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) BH_THROW(DataError, "cannot open corpus file '{}' (for the KJV text: apt-get install bible-kjv-text)", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::string default_kjv_path() {
  struct stat st {};
  return ::stat("/usr/lib/bible.data", &st) == 0 ? "/usr/lib/bible.data" : "";
}

// Note [compress(1) LZW]
// Codes are packed LSB first, starting at 9 bits. Block mode reserves code 256 for CLEAR, so
// the first free code is 257. The encoder writes codes in groups of 8 (n_bits bytes); when the
// code width grows or a CLEAR arrives, the rest of the current group is padding, so the reader
// skips to the next multiple of 8*n_bits bits counted from where the current width began. After
// a CLEAR the next code creates a dummy entry at 256, which keeps width changes in step with
// the encoder.
std::string lzw_decompress(std::span<const std::uint8_t> src, int max_bits, std::size_t max_output,
                           const std::string& what) {
  BH_CHECK_AS(DataError, max_bits >= 9 && max_bits <= 16, "{}: LZW max code width {} not in [9, 16]",
              what, max_bits);
  const std::uint32_t max_max_code = 1u << max_bits;
  std::vector<std::uint16_t> prefix(max_max_code);
  std::vector<std::uint8_t> suffix(max_max_code);
  for (std::uint32_t i = 0; i < 256; ++i) suffix[i] = static_cast<std::uint8_t>(i);
  std::vector<std::uint8_t> stack;
  stack.reserve(max_max_code);

  std::string out;
  const std::uint64_t total_bits = static_cast<std::uint64_t>(src.size()) * 8;
  std::uint64_t pos = 0, run_start = 0;
  int n_bits = 9;
  std::uint32_t max_code = (1u << n_bits) - 1;
  std::uint32_t free_ent = 257;
  std::int64_t old_code = -1;
  std::uint8_t fin_char = 0;

  auto align = [&] {
    const std::uint64_t group = static_cast<std::uint64_t>(n_bits) * 8;
    pos = run_start + (pos - run_start + group - 1) / group * group;
    run_start = pos;
  };
  for (;;) {
    if (free_ent > max_code) {
      align();
      ++n_bits;
      max_code = n_bits == max_bits ? max_max_code : (1u << n_bits) - 1;
    }
    if (pos + static_cast<std::uint64_t>(n_bits) > total_bits) break;  // end of stream
    std::uint32_t code = 0;
    for (int b = 0; b < n_bits; ++b, ++pos)
      code |= static_cast<std::uint32_t>((src[pos >> 3] >> (pos & 7)) & 1u) << b;

    if (old_code == -1) {
      BH_CHECK_AS(DataError, code < 256, "{}: corrupt LZW stream: first code {} is not a literal", what, code);
      fin_char = static_cast<std::uint8_t>(code);
      old_code = code;
      out.push_back(static_cast<char>(fin_char));
      continue;
    }
    if (code == 256) {  // CLEAR
      align();
      free_ent = 256;
      n_bits = 9;
      max_code = (1u << n_bits) - 1;
      continue;
    }
    const std::uint32_t in_code = code;
    stack.clear();
    if (code >= free_ent) {  // the KwKwK case: the code being defined right now
      BH_CHECK_AS(DataError, code == free_ent,
                  "{}: corrupt LZW stream at bit {}: code {} beyond the next free code {}", what,
                  pos, code, free_ent);
      stack.push_back(fin_char);
      code = static_cast<std::uint32_t>(old_code);
    }
    while (code >= 256) {
      stack.push_back(suffix[code]);
      code = prefix[code];
    }
    fin_char = suffix[code];
    stack.push_back(fin_char);
    BH_CHECK_AS(DataError, out.size() + stack.size() <= max_output,
                "{}: LZW output exceeds the declared size of {} bytes", what, max_output);
    out.append(stack.rbegin(), stack.rend());
    if (free_ent < max_max_code) {
      prefix[free_ent] = static_cast<std::uint16_t>(old_code);
      suffix[free_ent] = fin_char;
      ++free_ent;
    }
    old_code = in_code;
  }
  return out;
}

std::string read_ec02_file(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  BH_CHECK_AS(DataError, bytes.size() >= kEc02HeaderBytes + 8 && bytes.compare(0, 4, "EC02") == 0,
              "'{}' is not an EC02 compressed text file (bad magic or shorter than its header)", path);
  const std::uint32_t segment_bytes = read_be32(p + kEc02HeaderBytes);
  const std::uint32_t segments = read_be32(p + kEc02HeaderBytes + 4);
  BH_CHECK_AS(DataError, segment_bytes > 0 && segment_bytes <= kMaxSegmentBytes && segments > 0 &&
                             segments < 1u << 16,
              "'{}': implausible EC02 header (segment size {}, {} segments)", path, segment_bytes, segments);
  const std::size_t table = kEc02HeaderBytes + 8;
  BH_CHECK_AS(DataError, table + 4 * (std::size_t{segments} + 1) <= bytes.size(),
              "'{}' is truncated: its offset table ({} entries) runs past the end of the file ({} bytes)",
              path, segments + 1, bytes.size());
  std::string text;
  // Reserve what the header declares only as far as the file's size can back it (LZW text rarely
  // expands past 10x): a 40-byte file that claims 65535 full segments reserves kilobytes.
  text.reserve(std::min(static_cast<std::size_t>(segment_bytes) * segments, 16 * bytes.size()));
  for (std::uint32_t s = 0; s < segments; ++s) {
    const std::uint32_t begin = read_be32(p + table + 4 * s), end = read_be32(p + table + 4 * (s + 1));
    BH_CHECK_AS(DataError, begin >= table + 4 * (std::size_t{segments} + 1) && begin <= end && end <= bytes.size(),
                "'{}' is truncated or corrupt: segment {} spans bytes [{}, {}) of a {}-byte file", path,
                s, begin, end, bytes.size());
    std::string part = lzw_decompress({p + begin, end - begin}, 16, segment_bytes,
                                      fmt::format("'{}' segment {}", path, s));
    BH_CHECK_AS(DataError, part.size() == segment_bytes || (s + 1 == segments && !part.empty()),
                "'{}' is corrupt: segment {} decompressed to {} bytes, expected {}", path, s,
                part.size(), segment_bytes);
    text += part;
  }
  return text;
}

std::vector<Document> split_kjv(const std::string& text) {
  std::vector<Document> docs;
  std::size_t line_start = 0;
  while (line_start < text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    std::string_view line(text.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    // "Ge1:1 text": book letters, chapter digits, ':', verse digits, ' '.
    // Book names may start with a digit ("1Co").
    std::size_t j = 0;
    if (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
    while (j < line.size() && std::isalpha(static_cast<unsigned char>(line[j]))) ++j;
    const std::size_t book_end = j;
    while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
    const std::size_t chapter_end = j;
    if (book_end == 0 || chapter_end == book_end || j >= line.size() || line[j] != ':') continue;
    ++j;
    const std::size_t verse_start = j;
    while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
    if (j == verse_start || j >= line.size() || line[j] != ' ') continue;
    std::string_view body = line.substr(j + 1);
    while (!body.empty() && (body.back() == ' ' || body.back() == '\r')) body.remove_suffix(1);
    if (body.empty()) continue;
    std::string_view chapter = line.substr(0, chapter_end);
    if (docs.empty() || docs.back().title != chapter) docs.push_back({std::string(chapter), {}});
    docs.back().sentences.emplace_back(body);
  }
  return docs;
}

std::vector<Document> split_plain(const std::string& text) {
  std::vector<Document> docs(1);
  std::size_t line_start = 0;
  while (line_start < text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    std::string_view line(text.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
    if (line.empty()) {
      if (!docs.back().sentences.empty()) docs.emplace_back();
      continue;
    }
    docs.back().sentences.emplace_back(line);
  }
  if (docs.back().sentences.empty()) docs.pop_back();
  return docs;
}

std::vector<Document> load_corpus(const std::string& path) {
  std::vector<Document> docs;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) BH_THROW(DataError, "cannot open corpus file '{}' (for the KJV text: apt-get install bible-kjv-text)", path);
    char magic[4] = {};
    in.read(magic, 4);
    if (in.gcount() == 4 && std::string_view(magic, 4) == "EC02") {
      in.close();
      docs = split_kjv(read_ec02_file(path));
    } else {
      in.close();
      docs = split_plain(read_file_bytes(path));
    }
  }
  BH_CHECK_AS(DataError, !docs.empty(), "corpus '{}' contains no text", path);
  return docs;
}

}  // namespace benchhost::text
