// Declared plugin options: the declaration helpers, value checking against a declaration, typed
// access with declared defaults, and the config-file reader. See options.hpp.
#include "benchhost/options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "benchhost/error.hpp"

namespace benchhost {

// ---- declaration helpers ---------------------------------------------------------------------

OptionSpec OptionSpec::at_least(double v) && {
  min = v;
  min_exclusive = false;
  return std::move(*this);
}
OptionSpec OptionSpec::above(double v) && {
  min = v;
  min_exclusive = true;
  return std::move(*this);
}
OptionSpec OptionSpec::at_most(double v) && {
  max = v;
  max_exclusive = false;
  return std::move(*this);
}
OptionSpec OptionSpec::below(double v) && {
  max = v;
  max_exclusive = true;
  return std::move(*this);
}
OptionSpec OptionSpec::range(double lo, double hi) && {
  min = lo;
  max = hi;
  min_exclusive = max_exclusive = false;
  return std::move(*this);
}
OptionSpec OptionSpec::items(std::int64_t lo, std::int64_t hi) && {
  min_items = lo;
  max_items = hi;
  return std::move(*this);
}
OptionSpec OptionSpec::in(std::string u) && {
  unit = std::move(u);
  return std::move(*this);
}
OptionSpec OptionSpec::must_be_given() && {
  required = true;
  return std::move(*this);
}

namespace {

// Shortest text that reads back as the same double ("0.0002", "1e-10", "65536").
std::string number_text(double v) { return fmt::format("{}", v); }

template <class T>
std::string list_text(const std::vector<T>& v) {
  return fmt::format("{}", fmt::join(v, ","));
}

}  // namespace

OptionSpec int_option(std::string name, std::int64_t default_value, std::string help) {
  return {std::move(name), "int", std::to_string(default_value), std::move(help)};
}
OptionSpec float_option(std::string name, double default_value, std::string help) {
  return {std::move(name), "float", number_text(default_value), std::move(help)};
}
OptionSpec bool_option(std::string name, bool default_value, std::string help) {
  return {std::move(name), "bool", default_value ? "true" : "false", std::move(help)};
}
OptionSpec string_option(std::string name, std::string default_value, std::string help) {
  return {std::move(name), "string", std::move(default_value), std::move(help)};
}
OptionSpec choice_option(std::string name, std::string default_value, std::vector<std::string> choices,
                         std::string help) {
  OptionSpec s{std::move(name), "string", std::move(default_value), std::move(help)};
  s.choices = std::move(choices);
  return s;
}
OptionSpec int_list_option(std::string name, const std::vector<std::int64_t>& default_value, std::string help) {
  return {std::move(name), "int-list", list_text(default_value), std::move(help)};
}
OptionSpec float_list_option(std::string name, const std::vector<double>& default_value, std::string help) {
  std::vector<std::string> parts;
  for (double v : default_value) parts.push_back(number_text(v));
  return {std::move(name), "float-list", fmt::format("{}", fmt::join(parts, ",")), std::move(help)};
}

// ---- checking values -------------------------------------------------------------------------

namespace {

const std::set<std::string>& known_types() {
  static const std::set<std::string> t{"int", "float", "string", "bool", "int-list", "float-list"};
  return t;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <class T>
bool parse_full(std::string_view s, T& v) {
  s = trim(s);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  if constexpr (std::is_floating_point_v<T>) return std::isfinite(v);
  return true;
}

std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  if (trim(s).empty()) return out;  // "" is the empty list
  while (true) {
    const auto c = s.find(',');
    out.push_back(trim(s.substr(0, c)));
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

bool is_list(const OptionSpec& s) { return s.type == "int-list" || s.type == "float-list"; }
bool is_integer(const OptionSpec& s) { return s.type == "int" || s.type == "int-list"; }

std::string bounds_text(const OptionSpec& s) {
  const bool lo = s.min.has_value(), hi = s.max.has_value();
  if (lo && hi)
    return fmt::format(" in {}{}, {}{}", s.min_exclusive ? '(' : '[', number_text(*s.min), number_text(*s.max),
                       s.max_exclusive ? ')' : ']');
  if (lo) return fmt::format(" {} {}", s.min_exclusive ? ">" : ">=", number_text(*s.min));
  if (hi) return fmt::format(" {} {}", s.max_exclusive ? "<" : "<=", number_text(*s.max));
  return {};
}

// Why the number `v` is outside the spec's bounds ("" when inside).
std::string bounds_problem(const OptionSpec& s, double v) {
  if (s.min && (s.min_exclusive ? !(v > *s.min) : !(v >= *s.min)))
    return fmt::format("is {} the minimum {}", s.min_exclusive ? "not above" : "below", number_text(*s.min));
  if (s.max && (s.max_exclusive ? !(v < *s.max) : !(v <= *s.max)))
    return fmt::format("is {} the maximum {}", s.max_exclusive ? "not below" : "above", number_text(*s.max));
  return {};
}

// One scalar of an int/float option (or list element): "" when allowed.
std::string scalar_problem(const OptionSpec& s, std::string_view text) {
  if (is_integer(s)) {
    std::int64_t v{};
    if (!parse_full(text, v)) return "is not an integer";
    return bounds_problem(s, static_cast<double>(v));
  }
  double v{};
  if (!parse_full(text, v)) return "is not a finite number";
  return bounds_problem(s, v);
}

std::optional<bool> parse_bool(std::string_view v) {
  v = trim(v);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

}  // namespace

std::string allowed_values(const OptionSpec& s) {
  if (s.type == "bool") return "true or false";
  if (s.type == "string" || s.type.empty())
    return s.choices.empty() ? "any text" : fmt::format("one of {}", fmt::join(s.choices, ", "));
  const std::string element = is_integer(s) ? "integer" : "number";
  if (!is_list(s)) return fmt::format("{} {}{}", element == "integer" ? "an" : "a", element, bounds_text(s));
  std::string count;
  if (s.min_items > 0 && s.min_items == s.max_items)
    count = fmt::format("{} ", s.min_items);
  else if (s.min_items > 0 && s.max_items > 0)
    count = fmt::format("{} to {} ", s.min_items, s.max_items);
  else if (s.min_items == 1)
    count = "one or more ";
  else if (s.min_items > 0)
    count = fmt::format("at least {} ", s.min_items);
  else if (s.max_items > 0)
    count = fmt::format("at most {} ", s.max_items);
  const bool one = s.min_items == 1 && s.max_items == 1;
  return fmt::format("a comma-separated list of {}{}{}{}", count, element, one ? "" : "s", bounds_text(s));
}

std::string option_value_problem(const OptionSpec& s, const std::string& value) {
  if (s.type == "bool") return parse_bool(value) ? std::string() : "is not true or false";
  if (s.type == "string" || s.type.empty()) {
    if (s.choices.empty() || std::find(s.choices.begin(), s.choices.end(), value) != s.choices.end()) return {};
    return "is not one of the choices";
  }
  if (!is_list(s)) return scalar_problem(s, value);
  const auto parts = split_list(value);
  const auto n = static_cast<std::int64_t>(parts.size());
  if ((s.min_items > 0 && n < s.min_items) || (s.max_items > 0 && n > s.max_items))
    return fmt::format("has {} element{}", n, n == 1 ? "" : "s");
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (std::string why = scalar_problem(s, parts[i]); !why.empty())
      return fmt::format("has element {} '{}' that {}", i + 1, parts[i], why);
  return {};
}

void validate_option_value(const std::string& plugin, const OptionSpec& spec, const std::string& value) {
  const std::string why = option_value_problem(spec, value);
  if (!why.empty())
    BH_THROW(InvalidArgument, "option --{}.{}: '{}' {}; allowed: {}", plugin, spec.name, value, why, allowed_values(spec));
}

void validate_declaration(const std::string& plugin, const std::vector<OptionSpec>& specs) {
  std::set<std::string> seen;
  for (const OptionSpec& s : specs) {
    BH_CHECK_AS(InvalidArgument, !s.name.empty(), "plugin '{}' declares an option without a name", plugin);
    BH_CHECK_AS(InvalidArgument, seen.insert(s.name).second, "plugin '{}' declares option '{}' twice", plugin, s.name);
    BH_CHECK_AS(InvalidArgument, s.type.empty() || known_types().count(s.type),
                "plugin '{}' declares option '{}' of unknown type '{}' (int, float, string, bool, int-list, float-list)",
                plugin, s.name, s.type);
    if (s.default_value.empty()) continue;  // no default: "not set" (text, lists) or must be given
    const std::string why = option_value_problem(s, s.default_value);
    BH_CHECK_AS(InvalidArgument, why.empty(), "plugin '{}' declares option '{}' with default '{}' that {}; allowed: {}",
                plugin, s.name, s.default_value, why, allowed_values(s));
  }
}

// ---- Options ---------------------------------------------------------------------------------

Options::Options(std::string plugin, std::map<std::string, std::string> values)
    : plugin_(std::move(plugin)), values_(std::move(values)) {}

Options::Options(std::string plugin, std::vector<OptionSpec> declaration, std::map<std::string, std::string> values)
    : plugin_(std::move(plugin)),
      declaration_(std::make_shared<const std::vector<OptionSpec>>(std::move(declaration))),
      values_(std::move(values)) {
  validate_declaration(plugin_, *declaration_);
  for (const auto& [name, value] : values_) {
    const OptionSpec* s = spec(name);
    if (!s) {
      std::vector<std::string> names;
      for (const auto& d : *declaration_) names.push_back(d.name);
      BH_THROW(InvalidArgument, "unknown option --{}.{} (plugin '{}' declares: {})", plugin_, name, plugin_,
               fmt::join(names, ", "));
    }
    validate_option_value(plugin_, *s, value);
  }
  for (const OptionSpec& s : *declaration_)
    BH_CHECK_AS(InvalidArgument, !s.required || values_.count(s.name), "option --{}.{} is required ({})", plugin_, s.name,
                s.help);
}

const std::vector<OptionSpec>& Options::declaration() const {
  static const std::vector<OptionSpec> none;
  return declaration_ ? *declaration_ : none;
}

const OptionSpec* Options::spec(const std::string& name) const {
  if (!declaration_) return nullptr;
  for (const OptionSpec& s : *declaration_)
    if (s.name == name) return &s;
  return nullptr;
}

std::string Options::get_string(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (declaration_) {
    const OptionSpec* s = spec(name);
    BH_CHECK_AS(InvalidArgument, s != nullptr, "plugin '{}' reads option '{}', which it does not declare", plugin_, name);
    BH_CHECK_AS(InvalidArgument, !s->default_value.empty() || s->type == "string" || is_list(*s),
                "option --{}.{} has no default and was not given ({})", plugin_, name, s->help);
    return s->default_value;
  }
  BH_THROW(InvalidArgument, "option --{}.{} is required but was not given", plugin_, name);
}

namespace {
[[noreturn]] void not_a(const std::string& plugin, const std::string& name, const std::string& value, const char* what) {
  BH_THROW(InvalidArgument, "option --{}.{}: '{}' is not {}", plugin, name, value, what);
}
}  // namespace

std::int64_t Options::get_int(const std::string& name) const {
  const std::string v = get_string(name);
  std::int64_t out{};
  if (!parse_full(v, out)) not_a(plugin_, name, v, "an integer");
  return out;
}

double Options::get_float(const std::string& name) const {
  const std::string v = get_string(name);
  double out{};
  if (!parse_full(v, out)) not_a(plugin_, name, v, "a finite number");
  return out;
}

bool Options::get_bool(const std::string& name) const {
  const std::string v = get_string(name);
  const auto b = parse_bool(v);
  if (!b) not_a(plugin_, name, v, "a boolean (true/false)");
  return *b;
}

std::vector<std::int64_t> Options::get_int_list(const std::string& name) const {
  const std::string v = get_string(name);
  std::vector<std::int64_t> out;
  for (auto part : split_list(v)) {
    std::int64_t x{};
    if (!parse_full(part, x)) not_a(plugin_, name, v, "a comma-separated integer list");
    out.push_back(x);
  }
  return out;
}

std::vector<double> Options::get_float_list(const std::string& name) const {
  const std::string v = get_string(name);
  std::vector<double> out;
  for (auto part : split_list(v)) {
    double x{};
    if (!parse_full(part, x)) not_a(plugin_, name, v, "a comma-separated number list");
    out.push_back(x);
  }
  return out;
}

// ---- config files ----------------------------------------------------------------------------

std::vector<ConfigEntry> read_config_file(const std::string& path) {
  std::ifstream in(path);
  BH_CHECK_AS(InvalidArgument, static_cast<bool>(in), "cannot read config file '{}'", path);
  std::vector<ConfigEntry> out;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const std::string_view text = trim(line);
    if (text.empty()) continue;
    const auto eq = text.find('=');
    BH_CHECK_AS(InvalidArgument, eq != std::string_view::npos && !trim(text.substr(0, eq)).empty(),
                "config file '{}' line {}: '{}' is not 'key = value'", path, number, text);
    out.push_back({std::string(trim(text.substr(0, eq))), std::string(trim(text.substr(eq + 1))), number});
  }
  return out;
}

std::map<std::string, std::string> plugin_values(const std::vector<ConfigEntry>& entries, const std::string& plugin) {
  std::map<std::string, std::string> out;
  const std::string prefix = plugin + ".";
  for (const ConfigEntry& e : entries)
    if (e.key.rfind(prefix, 0) == 0) out[e.key.substr(prefix.size())] = e.value;
  return out;
}

}  // namespace benchhost
