#pragma once
/// @file datasets/text/corpus.hpp  Plain English text for the language-model workloads.
///
/// Note [Local English corpus]
/// The mini BERT and GPT-3 configurations train on text that a fresh Debian machine installs:
/// the King James Bible of the bible-kjv-text package (/usr/lib/bible.data, 4.4 MB of text,
/// 31,102 verses). The package stores it in the "EC02" compressed format of the `bible`
/// program: a 0x54-byte header ("EC02Compressed Data File", zero padded), then big-endian u32
/// fields: uncompressed segment size (65536), segment count n, and n+1 file offsets; segment i
/// is the byte range [offset[i], offset[i+1]) holding one Unix compress(1) LZW stream (16-bit
/// codes, block mode) without its 3-byte magic, which appears once, before segment 0. Each
/// segment decompresses to exactly `segment size` bytes except the last. Lines look like
/// "Ge1:1 In the beginning God created the heaven and the earth."; we strip the reference,
/// make each verse a sentence and each chapter a document.
/// Any other UTF-8/ASCII file is read as plain text: one sentence per line, documents separated
/// by blank lines (the layout of BERT's pretraining text files).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace benchhost::text {

/// One document: a list of sentences (no line breaks inside).
struct Document {
  std::string title;  ///< "Ge1" for a KJV chapter; "" for plain text
  std::vector<std::string> sentences;
};

/// Where the KJV text of bible-kjv-text lives on Debian ("" when not installed).
std::string default_kjv_path();

/// Decompress one Unix compress(1) LZW stream (no magic header) with codes of at most
/// `max_bits` bits in block mode. Throws DataError (with `what` in the message) on a corrupt
/// stream or when the output would exceed `max_output` bytes.
std::string lzw_decompress(std::span<const std::uint8_t> src, int max_bits, std::size_t max_output,
                           const std::string& what);

/// The full text of an EC02 file (the bible-kjv-text data). Throws DataError naming the file on
/// a missing, truncated or corrupt file.
std::string read_ec02_file(const std::string& path);

/// Load a corpus: EC02 files by their magic, anything else as plain text. Throws DataError.
std::vector<Document> load_corpus(const std::string& path);

/// Split a KJV text ("Ge1:1 verse...\n") into chapters. Lines without a reference are skipped.
std::vector<Document> split_kjv(const std::string& text);
/// Split plain text: one sentence per non-empty line, blank lines end a document.
std::vector<Document> split_plain(const std::string& text);

}  // namespace benchhost::text
