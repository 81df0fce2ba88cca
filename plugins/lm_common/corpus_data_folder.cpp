#include "corpus_data_folder.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "benchhost/error.hpp"
#include "text/corpus.hpp"

namespace benchhost::lm {
namespace fs = std::filesystem;
namespace {

constexpr const char* kRecipeFile = "/benchhost-recipe.txt";

std::string corpus_file(const CorpusDataFolder& f) {
  if (f.corpus != "kjv") return f.corpus;
  const std::string path = text::default_kjv_path();
  if (path.empty())
    BH_THROW(Unsupported, "{}.corpus = kjv needs the bible-kjv-text package (apt-get install bible-kjv-text)", f.plugin);
  return path;
}

std::string without_newline(const std::string& line) { return line.empty() ? line : line.substr(0, line.size() - 1); }

}  // namespace

void ensure_corpus_data_folder(const CorpusDataFolder& f, const std::function<bool(const std::string&)>& holds_data,
                               const std::function<void(const std::string&, const std::string&)>& build) {
  // The options the folder was built with, and the version of the builder, so that a folder
  // built with other options or by an older builder is never silently reused for a config that
  // asks for different data.
  const std::string recipe =
      f.corpus.empty() ? std::string() : fmt::format("{} corpus={} {}\n", f.plugin, f.corpus, f.build_options);
  if (holds_data(f.dir)) {
    std::ifstream in(f.dir + kRecipeFile);
    const std::string had((std::istreambuf_iterator<char>(in)), {});
    BH_CHECK_AS(InvalidArgument, recipe.empty() || !in || had == recipe,
                "{}.data-dir '{}' was built as '{}' but this config asks for '{}': choose another {}.data-dir", f.plugin,
                f.dir, without_newline(had), without_newline(recipe), f.plugin);
    return;
  }
  BH_CHECK_AS(InvalidArgument, !f.corpus.empty(), "{}.data-dir '{}' has no {}; give {}.corpus to build them or run {}",
              f.plugin, f.dir, f.contents, f.plugin, f.prepare_tool);
  const std::string out_dir = fmt::format("{}.tmp.{}", f.dir, ::getpid());
  build(corpus_file(f), out_dir);
  std::ofstream(out_dir + kRecipeFile) << recipe;
  std::error_code ec;
  fs::create_directories(fs::path(f.dir).parent_path(), ec);
  fs::rename(out_dir, f.dir, ec);
  if (ec) fs::remove_all(out_dir);  // another process won the race: use its files
  BH_CHECK_AS(DataError, holds_data(f.dir), "building {}.data-dir '{}' from '{}' left no {}", f.plugin, f.dir, f.corpus,
              f.contents);
}

std::string size_text(double bytes) {
  constexpr double KiB = 1024.0, MiB = KiB * 1024.0, GiB = MiB * 1024.0;
  if (bytes >= GiB) return fmt::format("{:.2f} GiB", bytes / GiB);
  if (bytes >= MiB) return fmt::format("{:.1f} MiB", bytes / MiB);
  return fmt::format("{:.0f} KiB", bytes / KiB);
}

void check_data_fits(const std::string& plugin, const std::string& dir, double bytes, const std::string& what,
                     const MemoryBudget& budget) {
  const double usable = 0.75 * budget.available_bytes;
  if (budget.available_bytes <= 0 || bytes <= usable) return;
  throw OutOfMemory(fmt::format("{}: the data in '{}' takes about {} in memory ({}), and {} holds every sample in host "
                                "memory, but three quarters of the {} available is {} ({}); use a machine with more "
                                "memory, or a data folder with a part of the data",
                                plugin, dir, size_text(bytes), what, plugin, size_text(budget.available_bytes),
                                size_text(usable), budget.source),
                    static_cast<std::size_t>(bytes), __FILE__, __LINE__);
}

}  // namespace benchhost::lm
