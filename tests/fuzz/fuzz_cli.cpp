// The command line and config-file parser of the host (core/cli.cpp) against a plugin that
// declares every option type with constraints: the first input line is the argument list (split
// at spaces), the rest is a config file passed with --config.
#include <sstream>

#include "cli.hpp"
#include "fuzz.hpp"

namespace bh_fuzz {
std::vector<Bytes> seeds() {
  return {to_bytes("--plugin toy --mode train -b 4,8 -n 1 -w 2 -i 7 --seed 9 --toy.lr 0.5\n"
                   "# a config\nmode = ttt\ntoy.features = 16\ntoy.blocks = 1,2,3\ntoy.optimizer = sgd\n"),
          to_bytes("train toy --precision bf16 --toy.packing true -o r.json --csv r.csv\ntoy.betas = 0.9,0.95\n"),
          to_bytes("info toy --json\n"), to_bytes("--plugin toy --help\n"), to_bytes("list --plugin-dir /nonexistent\n"),
          // The placeholders program_options substitutes into its messages (Note [Percent signs in options]).
          to_bytes("--plugin toy -%canonical_option% --toy.lr %value%\ntoy.features = %canonical_option%\n")};
}
}  // namespace bh_fuzz

namespace {

benchhost::WorkloadInfo declared_plugin() {
  using namespace benchhost;
  WorkloadInfo i;
  i.name = "toy";
  i.version = "1.0.0";
  i.modes = {"ttt", "train", "infer"};
  i.options = {int_option("features", 8, "input features").range(1, 4096),
               float_option("lr", 0.02, "learning rate").above(0),
               choice_option("optimizer", "lars", {"lars", "sgd"}, "the optimizer"),
               bool_option("packing", false, "pack sequences"),
               int_list_option("blocks", {3, 4, 6, 3}, "blocks").at_least(1).items(1, 8),
               float_list_option("betas", {0.9, 0.999}, "betas").range(0, 1).items(2, 2),
               string_option("data-dir", "", "data")};
  return i;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto newline = text.find('\n');
  std::vector<std::string> args{"benchhost"};
  std::istringstream first(text.substr(0, newline));
  for (std::string a; first >> a;) args.push_back(a);
  if (newline != std::string::npos) {
    args.push_back("--config");
    args.push_back(bh_fuzz::write_scratch("fuzz.conf", {data + newline + 1, size - newline - 1}));
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  static const benchhost::WorkloadInfo info = declared_plugin();
  bh_fuzz::refused_or_read([&] { benchhost::host::pre_parse(static_cast<int>(argv.size()), argv.data()); });
  bh_fuzz::refused_or_read([&] { benchhost::host::parse_cli(static_cast<int>(argv.size()), argv.data(), &info, {}); });
  bh_fuzz::refused_or_read([&] { benchhost::read_config_file(args.back()); });
  return 0;
}
