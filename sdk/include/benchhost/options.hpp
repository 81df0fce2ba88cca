#pragma once
/// @file options.hpp  A plugin's options, declared once.
///
/// Note [Options declared once]
/// A workload declares each option exactly once, in describe(): name, type, default, the values it
/// allows (a range, a list of choices, a list length), its unit and a line of help. Everything
/// else is derived from that declaration:
///   - the host registers --<plugin>.<name> on the command line and "<plugin>.<name> = value" in
///     config files, and refuses a value the declaration does not allow before any run starts,
///     naming the option, the value and what is allowed;
///   - `benchhost --plugin P --help` and `benchhost info P [--json]` print it;
///   - setup() reads typed values through Options, which falls back to the declared default, so
///     no plugin writes a default twice.
///
///   static std::vector<OptionSpec> declared_options() {
///     return {int_option("layers", 24, "transformer layers").at_least(1),
///             float_option("lr", 3.5e-4, "peak learning rate").above(0),
///             choice_option("optimizer", "lars", {"lars", "sgd"}, "the optimizer"),
///             int_list_option("blocks", {3, 4, 6, 3}, "bottlenecks per stage").at_least(1).items(1, 8)};
///   }
///
/// Values travel as text (the command line, config files and the plugin ABI carry strings);
/// Options parses them on access. Threading: an Options is immutable after construction.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace benchhost {

/// One option a plugin accepts. The host registers it as --<plugin>.<name> on the command line
/// and as "<plugin>.<name> = value" in config files. Aggregate: `{"name", "int", "8", "help"}`
/// declares an unconstrained option; the *_option() helpers below add the constraints.
struct OptionSpec {
  std::string name;           ///< "hidden-size"
  std::string type;           ///< "int", "float", "string", "bool", "int-list", "float-list"
  std::string default_value;  ///< as text; "" = no default (must be given if required)
  std::string help;
  bool required = false;
  /// Smallest and largest allowed value (each element of a list), and whether the bound itself
  /// is excluded. Unset = unbounded.
  /// (Every member after `required` has a default, so `{"name", "int", "8", "help"}` stays a
  /// complete initializer: no missing-field-initializer warning in plugins built with -Wextra.)
  std::optional<double> min{}, max{};
  bool min_exclusive = false, max_exclusive = false;
  /// The allowed values of a string option; empty = any text.
  std::vector<std::string> choices{};
  /// Allowed element count of a list option; 0 = no bound.
  std::int64_t min_items = 0, max_items = 0;
  /// What the value counts ("samples", "steps", "epochs", "GiB", "channels"); "" = a pure number.
  std::string unit{};

  // Constraint builders, for declarations written as one expression (each returns the spec).
  OptionSpec at_least(double v) &&;
  OptionSpec above(double v) &&;
  OptionSpec at_most(double v) &&;
  OptionSpec below(double v) &&;
  OptionSpec range(double lo, double hi) &&;  ///< lo <= value <= hi
  OptionSpec items(std::int64_t lo, std::int64_t hi) &&;  ///< list length in [lo, hi]
  OptionSpec in(std::string unit) &&;
  OptionSpec must_be_given() &&;
};

OptionSpec int_option(std::string name, std::int64_t default_value, std::string help);
OptionSpec float_option(std::string name, double default_value, std::string help);
OptionSpec bool_option(std::string name, bool default_value, std::string help);
/// A free-text option ("" is a valid default: "not set").
OptionSpec string_option(std::string name, std::string default_value, std::string help);
/// A string option that takes one of `choices` (the default must be one of them).
OptionSpec choice_option(std::string name, std::string default_value, std::vector<std::string> choices,
                         std::string help);
OptionSpec int_list_option(std::string name, const std::vector<std::int64_t>& default_value, std::string help);
OptionSpec float_list_option(std::string name, const std::vector<double>& default_value, std::string help);

/// What `spec` allows, in words: "an integer >= 1", "a number in (0, 1]", "one of lars, sgd",
/// "a comma-separated list of 26 integers >= 1", "true or false".
std::string allowed_values(const OptionSpec& spec);

/// Why `value` is not allowed by `spec`, or "" when it is. Pure; never throws.
std::string option_value_problem(const OptionSpec& spec, const std::string& value);

/// Throws InvalidArgument "option --<plugin>.<name>: '<value>' is not allowed: <problem>; allowed:
/// <allowed_values>" when `value` does not satisfy `spec`.
void validate_option_value(const std::string& plugin, const OptionSpec& spec, const std::string& value);

/// Checks a declaration itself: unique non-empty names, a known type, and a default (when
/// given) that the declaration's own constraints allow. Throws InvalidArgument naming the option.
void validate_declaration(const std::string& plugin, const std::vector<OptionSpec>& specs);

/// The plugin's option values: the ones given (command line, config file), checked against the
/// declaration, with the declared defaults behind them. Getters return typed values.
class Options {
 public:
  Options() = default;
  /// Values without a declaration (old plugins, hand-made test contexts): getters parse what was
  /// given and know no defaults.
  Options(std::string plugin, std::map<std::string, std::string> values);
  /// Values checked against `declaration`: an undeclared name or a value the declaration does not
  /// allow throws InvalidArgument naming the option. Getters fall back to the declared default.
  Options(std::string plugin, std::vector<OptionSpec> declaration, std::map<std::string, std::string> values);

  /// True when the value was given (not defaulted).
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  /// The value given, else the declared default. Throws InvalidArgument when neither exists or
  /// (with a declaration) when the plugin asks for a name it did not declare.
  std::string get_string(const std::string& name) const;
  std::int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::vector<std::int64_t> get_int_list(const std::string& name) const;
  std::vector<double> get_float_list(const std::string& name) const;

  /// The values given (without defaults).
  const std::map<std::string, std::string>& values() const { return values_; }
  /// The declaration (empty for undeclared Options).
  const std::vector<OptionSpec>& declaration() const;
  const std::string& plugin() const { return plugin_; }

 private:
  const OptionSpec* spec(const std::string& name) const;
  std::string plugin_;
  std::shared_ptr<const std::vector<OptionSpec>> declaration_;
  std::map<std::string, std::string> values_;
};

/// One "key = value" line of a config file.
struct ConfigEntry {
  std::string key;
  std::string value;
  int line = 0;  ///< 1-based
};

/// The entries of a config file in the host's syntax: "key = value" per line, '#' starts a
/// comment, blank lines are ignored. Throws InvalidArgument naming the file (and line) when it
/// cannot be read or a line is neither blank, a comment nor "key = value".
std::vector<ConfigEntry> read_config_file(const std::string& path);

/// The "<plugin>.<key> = value" entries as the key -> value map Options holds (prefix removed).
std::map<std::string, std::string> plugin_values(const std::vector<ConfigEntry>& entries, const std::string& plugin);

}  // namespace benchhost
