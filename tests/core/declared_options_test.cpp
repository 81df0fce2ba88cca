// Note [Options declared once] through the real executable: the toy plugin declares its options
// once (tests/plugins/toy_plugin.cpp); the command line, a config file, --help and `info` all
// follow that declaration, and an out-of-range value is refused with the range in the message.
// Then every config file this build's plugins ship is read against their declarations.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "plugin_loader.hpp"
#include "test_support.hpp"

using namespace benchhost::host;
namespace fs = std::filesystem;

namespace {

std::string dirs() { return fmt::format("--plugin-dir '{}' ", BENCHHOST_TEST_PLUGIN_DIR); }

}  // namespace

TEST(DeclaredOptions, CommandLineConfigHelpAndInfoAgree) {
  // The declaration: features is an integer in [1, 4096], default 8.
  auto help = bhtest::run_benchhost(dirs() + "--plugin toy --help");
  ASSERT_EQ(help.exit_code, kExitOk) << help.output;
  EXPECT_NE(help.output.find("--toy.features"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("input features [an integer in [1, 4096]]"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("(=8)"), std::string::npos) << "program_options prints the default: " << help.output;

  auto info = bhtest::run_benchhost("info toy " + dirs());
  ASSERT_EQ(info.exit_code, kExitOk) << info.output;
  EXPECT_NE(info.output.find("default: 8"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("input features [an integer in [1, 4096]]"), std::string::npos) << info.output;

  auto json_info = bhtest::run_benchhost("info toy --json " + dirs());
  ASSERT_EQ(json_info.exit_code, kExitOk) << json_info.output;
  const auto j = nlohmann::json::parse(json_info.output);
  bool found = false;
  for (const auto& o : j.at("options"))
    if (o.at("name") == "features") {
      found = true;
      EXPECT_EQ(o.at("default"), "8");
      EXPECT_EQ(o.at("min"), 1);
      EXPECT_EQ(o.at("max"), 4096);
      EXPECT_EQ(o.at("allowed"), "an integer in [1, 4096]");
    }
  EXPECT_TRUE(found) << json_info.output;

  // Out of range on the command line: refused before any run, with the range.
  auto cli = bhtest::run_benchhost(dirs() + "--plugin toy --toy.features 5000");
  EXPECT_EQ(cli.exit_code, kExitUsage) << cli.output;
  EXPECT_NE(cli.output.find("option --toy.features: '5000' is above the maximum 4096; allowed: an integer in [1, 4096]"),
            std::string::npos)
      << cli.output;

  // The same value in a config file: the same refusal.
  bhtest::TempDir tmp("declared");
  const fs::path conf = tmp.path / "big.conf";
  std::ofstream(conf) << "toy.features = 5000\n";
  auto file = bhtest::run_benchhost(dirs() + fmt::format("--plugin toy --config '{}'", conf.string()));
  EXPECT_EQ(file.exit_code, kExitUsage) << file.output;
  EXPECT_NE(file.output.find("'5000' is above the maximum 4096"), std::string::npos) << file.output;

  // An allowed value from a config file reaches the plugin (the run's report records it).
  std::ofstream(conf) << "toy.features = 4\n";
  const fs::path report = tmp.path / "r.json";
  auto ok = bhtest::run_benchhost(
      dirs() + fmt::format("--plugin toy --mode train -b 4 -w 0 -i 2 --config '{}' -o '{}'", conf.string(), report.string()));
  ASSERT_EQ(ok.exit_code, kExitOk) << ok.output;
  const auto r = nlohmann::json::parse(bhtest::read_file(report));
  EXPECT_EQ(r.at("invocation").at("options").at("features"), "4");
}

// Every key of every config a plugin of this build ships is an option it declares (or a host run
// option) with a value the declaration allows: parsing each through the host's command line and
// config reader must succeed.
TEST(DeclaredOptions, EveryShippedConfigKeyIsDeclared) {
  PluginRegistry reg;
  reg.discover({fs::path(BENCHHOST_PLUGIN_DIR)});
  ASSERT_FALSE(reg.plugins().empty()) << "no plugins built in " << BENCHHOST_PLUGIN_DIR;
  EXPECT_TRUE(reg.broken().empty()) << reg.broken().front().path << ": " << reg.broken().front().reason;
  int configs = 0;
  for (const auto& p : reg.plugins()) {
    SCOPED_TRACE(p->name);
    EXPECT_TRUE(p->shares_sdk) << "a first-party plugin uses the host's libbenchhost_sdk";
    EXPECT_NO_THROW(benchhost::validate_declaration(p->name, p->info.options));
    for (const auto& c : p->info.configs) {
      SCOPED_TRACE(c);
      const std::string config = (fs::path(BENCHHOST_CONFIGS_DIR) / p->name / c).string();
      ASSERT_TRUE(fs::is_regular_file(config)) << "declared config " << config << " is not shipped";
      std::vector<const char*> argv{"benchhost", "--plugin", p->name.c_str(), "--config", config.c_str()};
      try {
        const Settings s = parse_cli(static_cast<int>(argv.size()), argv.data(), &p->info, {});
        for (const auto& e : benchhost::read_config_file(config))
          if (e.key.rfind(p->name + ".", 0) == 0) EXPECT_EQ(s.plugin_options.at(e.key.substr(p->name.size() + 1)), e.value);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
      ++configs;
    }
    // And the other way: every config file in configs/<plugin>/ is declared.
    const fs::path dir = fs::path(BENCHHOST_CONFIGS_DIR) / p->name;
    if (fs::is_directory(dir))
      for (const auto& f : fs::directory_iterator(dir))
        EXPECT_NE(std::find(p->info.configs.begin(), p->info.configs.end(), f.path().filename().string()),
                  p->info.configs.end())
            << f.path() << " is shipped but not declared in " << p->name << "'s describe()";
  }
  EXPECT_GT(configs, 0);
}
