// Declared plugin options (options.hpp): the declaration helpers, what each constraint allows and
// how a refusal reads, typed access with the declared defaults, and the config-file reader.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "benchhost/workload.hpp"

using namespace benchhost;

namespace {

std::vector<OptionSpec> declaration() {
  return {int_option("layers", 24, "transformer layers").at_least(1).in("layers"),
          float_option("lr", 3.5e-4, "peak learning rate").above(0),
          float_option("target", 0.72, "quality target").range(0, 1),
          choice_option("optimizer", "lars", {"lars", "sgd"}, "the optimizer"),
          bool_option("packing", false, "pack sequences"),
          int_list_option("blocks", {3, 4, 6, 3}, "bottlenecks per stage").at_least(1).items(1, 8),
          float_list_option("betas", {0.9, 0.999}, "Adam betas").range(0, 1).items(2, 2),
          string_option("data-dir", "", "where the data is")};
}

std::string refusal(const std::vector<OptionSpec>& d, std::map<std::string, std::string> values) {
  try {
    Options("w", d, std::move(values));
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  return "";
}

}  // namespace

TEST(Options, DeclaredDefaultsComeBackTyped) {
  const Options o("w", declaration(), {});
  EXPECT_EQ(o.get_int("layers"), 24);
  EXPECT_DOUBLE_EQ(o.get_float("lr"), 3.5e-4);
  EXPECT_EQ(o.get_string("optimizer"), "lars");
  EXPECT_FALSE(o.get_bool("packing"));
  EXPECT_EQ(o.get_int_list("blocks"), (std::vector<std::int64_t>{3, 4, 6, 3}));
  EXPECT_EQ(o.get_float_list("betas"), (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(o.get_string("data-dir"), "");
  EXPECT_FALSE(o.has("layers")) << "has() says whether the value was given";
  EXPECT_THROW(o.get_int("hidden"), InvalidArgument) << "a name the plugin did not declare";
}

TEST(Options, GivenValuesOverrideTheDefaults) {
  const Options o("w", declaration(), {{"layers", "2"}, {"lr", "1e-3"}, {"optimizer", "sgd"}, {"blocks", "1, 1"}});
  EXPECT_TRUE(o.has("layers"));
  EXPECT_EQ(o.get_int("layers"), 2);
  EXPECT_DOUBLE_EQ(o.get_float("lr"), 1e-3);
  EXPECT_EQ(o.get_string("optimizer"), "sgd");
  EXPECT_EQ(o.get_int_list("blocks"), (std::vector<std::int64_t>{1, 1}));
}

TEST(Options, ARefusalNamesTheOptionTheValueAndWhatIsAllowed) {
  const auto d = declaration();
  EXPECT_EQ(refusal(d, {{"layers", "0"}}),
            "option --w.layers: '0' is below the minimum 1; allowed: an integer >= 1");
  EXPECT_EQ(refusal(d, {{"lr", "0"}}), "option --w.lr: '0' is not above the minimum 0; allowed: a number > 0");
  EXPECT_EQ(refusal(d, {{"target", "1.5"}}),
            "option --w.target: '1.5' is above the maximum 1; allowed: a number in [0, 1]");
  EXPECT_EQ(refusal(d, {{"optimizer", "adam"}}),
            "option --w.optimizer: 'adam' is not one of the choices; allowed: one of lars, sgd");
  EXPECT_EQ(refusal(d, {{"packing", "maybe"}}), "option --w.packing: 'maybe' is not true or false; allowed: true or false");
  EXPECT_EQ(refusal(d, {{"layers", "2.5"}}), "option --w.layers: '2.5' is not an integer; allowed: an integer >= 1");
  EXPECT_EQ(refusal(d, {{"lr", "nan"}}), "option --w.lr: 'nan' is not a finite number; allowed: a number > 0");
  EXPECT_EQ(refusal(d, {{"blocks", "1,0"}}),
            "option --w.blocks: '1,0' has element 2 '0' that is below the minimum 1; allowed: a "
            "comma-separated list of 1 to 8 integers >= 1");
  EXPECT_EQ(refusal(d, {{"betas", "0.9"}}),
            "option --w.betas: '0.9' has 1 element; allowed: a comma-separated list of 2 numbers in [0, 1]");
  EXPECT_EQ(refusal(d, {{"blocks", "1,x"}}),
            "option --w.blocks: '1,x' has element 2 'x' that is not an integer; allowed: a comma-separated list of 1 "
            "to 8 integers >= 1");
  EXPECT_NE(refusal(d, {{"hiden", "3"}}).find("unknown option --w.hiden"), std::string::npos);
}

TEST(Options, TheDeclarationItselfIsChecked) {
  EXPECT_THROW(validate_declaration("w", {int_option("a", 0, "").at_least(1)}), InvalidArgument)
      << "a default outside its own range";
  EXPECT_THROW(validate_declaration("w", {int_option("a", 1, ""), int_option("a", 2, "")}), InvalidArgument);
  EXPECT_THROW(validate_declaration("w", {{"a", "complex", "1", ""}}), InvalidArgument);
  EXPECT_THROW(validate_declaration("w", {choice_option("a", "c", {"a", "b"}, "")}), InvalidArgument);
  EXPECT_NO_THROW(validate_declaration("w", declaration()));
}

TEST(Options, RequiredOptionsMustBeGiven) {
  const std::vector<OptionSpec> d = {string_option("model", "", "the model file").must_be_given(),
                                     {"steps", "int", "", "steps, no default"}};
  EXPECT_THROW(Options("w", d, {}), InvalidArgument);
  const Options o("w", d, {{"model", "m.bin"}});
  EXPECT_EQ(o.get_string("model"), "m.bin");
  EXPECT_THROW(o.get_int("steps"), InvalidArgument) << "no default and not given";
}

TEST(Options, AllowedValuesInWords) {
  EXPECT_EQ(allowed_values(int_option("n", 1, "")), "an integer");
  EXPECT_EQ(allowed_values(float_option("x", 0.5, "").range(0, 1)), "a number in [0, 1]");
  EXPECT_EQ(allowed_values(float_option("x", 0.5, "").above(0).below(1)), "a number in (0, 1)");
  EXPECT_EQ(allowed_values(int_list_option("t", {1}, "").at_least(1).items(26, 26)),
            "a comma-separated list of 26 integers >= 1");
  EXPECT_EQ(allowed_values(int_list_option("m", {1}, "").at_least(1).items(1, 0)),
            "a comma-separated list of one or more integers >= 1");
  EXPECT_EQ(allowed_values(string_option("s", "", "")), "any text");
}

TEST(Options, FloatDefaultsReadBackExactly) {
  for (double v : {0.00035, 1e-6, 2e-5, 0.95, 1e-10, 65536.0, 0.80275}) {
    const Options o("w", {float_option("x", v, "")}, {});
    EXPECT_EQ(o.get_float("x"), v) << float_option("x", v, "").default_value;
  }
}

TEST(ConfigFile, ReadsKeysValuesAndRefusesOtherLines) {
  const std::string path = testing::TempDir() + "/options_test.conf";
  {
    std::ofstream f(path);
    f << "# a comment\n\nmode = ttt\nw.layers = 2   # trailing comment\n  w.blocks=1,1\nother.x = 3\n";
  }
  const auto entries = read_config_file(path);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[1].key, "w.layers");
  EXPECT_EQ(entries[1].value, "2");
  EXPECT_EQ(entries[1].line, 4);
  EXPECT_EQ(plugin_values(entries, "w"), (std::map<std::string, std::string>{{"layers", "2"}, {"blocks", "1,1"}}));
  {
    std::ofstream f(path);
    f << "mode = ttt\nthis line has no equals sign\n";
  }
  try {
    read_config_file(path);
    FAIL() << "a line without '=' was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("line 2"), std::string::npos) << e.message();
  }
  EXPECT_THROW(read_config_file(path + ".missing"), InvalidArgument);
  std::remove(path.c_str());
}
