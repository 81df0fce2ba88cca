#pragma once
/// @file plugins/lm_common/corpus_data_folder.hpp  A data folder built once from a text corpus:
/// how the bert and gpt3 mini configurations get their data on a fresh machine.
///
/// Note [A data folder built once from a corpus]
/// A configuration names a data folder (<plugin>.data-dir) in the layout MLPerf's preparation
/// leaves and, for a mini configuration, a corpus (<plugin>.corpus: a text file, or 'kjv' for the
/// King James Bible of Debian's bible-kjv-text) to build it from when it holds no data yet.
///   - The data is built in a private folder next to data-dir (".tmp.<pid>") and renamed into
///     place, so concurrent runs never see half-written files; a run that loses the race removes
///     its copy and uses the winner's.
///   - The folder records its recipe (benchhost-recipe.txt: the corpus, the options it was built
///     with and the builder's version). A folder built with another recipe is refused, never
///     silently reused for a configuration that asks for different data. Folders prepared by
///     hand have no recipe and are used as they are.

#include <functional>
#include <string>

#include "benchhost/memory_budget.hpp"

namespace benchhost::lm {

struct CorpusDataFolder {
  std::string plugin;        ///< the option prefix: messages name <plugin>.data-dir and <plugin>.corpus
  std::string dir;           ///< <plugin>.data-dir
  std::string corpus;        ///< <plugin>.corpus: a text file or "kjv"; "" = the folder must hold the data
  std::string build_options; ///< what else the data depends on, "key=value ..." (part of the recipe)
  std::string contents;      ///< what a complete folder holds, for messages ("part_*.hdf5 / eval.hdf5 / vocab.txt")
  std::string prepare_tool;  ///< the tool that prepares the folder by hand ("make_bert_shards")
};

/// Makes `folder.dir` hold data. When `holds_data(dir)` says it does, checks its recipe; else
/// builds it from the corpus with `build(corpus_file, out_dir)` (Note [A data folder built once
/// from a corpus]). Throws InvalidArgument for a folder of another recipe or an empty folder
/// without a corpus, Unsupported for 'kjv' without bible-kjv-text, and DataError when the build
/// left no data.
void ensure_corpus_data_folder(const CorpusDataFolder& folder,
                               const std::function<bool(const std::string& dir)>& holds_data,
                               const std::function<void(const std::string& corpus_file, const std::string& out_dir)>& build);

/// Note [Training data held in memory]
/// bert and gpt3 hold every training and evaluation sample in host memory (an epoch is a shuffle
/// over all of them). MLPerf's full datasets are hundreds of GB, so before a folder is loaded the
/// workload estimates what it will take; a folder that cannot fit is OutOfMemory (the run's status
/// OOM) with what to do, not a kill by the kernel half-way through loading. It must fit in three
/// quarters of what the host has available now (memory_budget(cpu): MemAvailable, within any
/// cgroup limit); the rest is for the model, its activations and the process. An unknown budget
/// (0) checks nothing.
/// `what` says what the estimate counts ("12 shards, 1.2 GiB on disk"), for the message.
/// size_text writes a byte count for such messages: "1.21 GiB", "3.4 MiB", "12 KiB".
void check_data_fits(const std::string& plugin, const std::string& dir, double bytes, const std::string& what,
                     const MemoryBudget& budget);
std::string size_text(double bytes);

}  // namespace benchhost::lm
