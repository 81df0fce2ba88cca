// The text formats of the language models (datasets/text): the EC02 (compress(1) LZW) corpus of
// bible-kjv-text, plain and KJV text splitting, WordPiece and byte-BPE vocabulary files, and a
// Megatron .idx/.bin pair.
#include <fstream>

#include "fuzz.hpp"
#include "text/bpe.hpp"
#include "text/corpus.hpp"
#include "text/indexed_dataset.hpp"
#include "text/wordpiece.hpp"

namespace bh_fuzz {

// The first byte picks the reader; the rest is its input (a join_parts pair for Megatron).
enum Kind : std::uint8_t { kCorpus, kWordPiece, kBpe, kMegatron, kKinds };

std::vector<Bytes> seeds() {
  using namespace benchhost::text;
  std::vector<Bytes> out;
  auto with = [&](Kind k, Bytes b) {
    b.insert(b.begin(), k);
    out.push_back(std::move(b));
  };
  // The real EC02 file of bible-kjv-text when installed (its first 64 KiB: the header and the
  // start of the LZW stream), and plain / KJV-referenced text.
  if (const std::string kjv = default_kjv_path(); !kjv.empty()) {
    Bytes b = read_bytes(kjv);
    b.resize(std::min<std::size_t>(b.size(), 65536));
    with(kCorpus, b);
  }
  with(kCorpus, to_bytes("Ge1:1 In the beginning God created the heaven and the earth.\nGe1:2 And the earth was "
                         "without form.\nEx1:1 Now these are the names.\n"));
  with(kCorpus, to_bytes("One sentence here.\nAnother one.\n\nA second document.\n"));
  const WordPiece wp({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "walk", "##eth", "##ed", "a"});
  const std::string wp_path = write_scratch("seed_vocab.txt", {});
  wp.save(wp_path);
  with(kWordPiece, read_bytes(wp_path));
  const ByteBpe bpe({{116, 104}, {256, 101}, {32, 257}});
  const std::string bpe_path = write_scratch("seed_bpe.txt", {});
  bpe.save(bpe_path);
  with(kBpe, read_bytes(bpe_path));
  for (std::int64_t vocab : {1000, 100000}) {  // uint16 and int32 tokens
    IndexedDatasetWriter w((scratch_dir() / "seed_d").string(), vocab);
    const std::vector<std::int32_t> seq = {5, 9, 2, 7, 1};
    for (int d = 0; d < 3; ++d) {
      w.add_sequence(seq);
      w.end_document();
    }
    w.finish();
    with(kMegatron, join_parts({read_bytes(scratch_dir() / "seed_d.idx"), read_bytes(scratch_dir() / "seed_d.bin")}));
  }
  return out;
}

}  // namespace bh_fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace benchhost::text;
  if (size == 0) return 0;
  const std::span<const std::uint8_t> in(data + 1, size - 1);
  switch (data[0] % bh_fuzz::kKinds) {
    case bh_fuzz::kCorpus: {
      const std::string path = bh_fuzz::write_scratch("corpus.txt", in);
      bh_fuzz::refused_or_read([&] { load_corpus(path); });
      bh_fuzz::refused_or_read([&] { lzw_decompress(in, 16, 1 << 20, "fuzz stream"); });
      break;
    }
    case bh_fuzz::kWordPiece: {
      const std::string path = bh_fuzz::write_scratch("vocab.txt", in);
      bh_fuzz::refused_or_read([&] { WordPiece::load(path).encode("the walketh a walked unknown"); });
      break;
    }
    case bh_fuzz::kBpe: {
      const std::string path = bh_fuzz::write_scratch("bpe.txt", in);
      bh_fuzz::refused_or_read([&] {
        const ByteBpe b = ByteBpe::load(path);
        b.decode(b.encode("the thee then"));
      });
      break;
    }
    default: {
      const auto parts = bh_fuzz::split_parts(in, 2);
      bh_fuzz::write_scratch("d.idx", parts[0]);
      bh_fuzz::write_scratch("d.bin", parts[1]);
      bh_fuzz::refused_or_read([&] {
        IndexedDataset ds((bh_fuzz::scratch_dir() / "d").string());
        ds.all_tokens();
      });
    }
  }
  return 0;
}
