#include "options.hpp"

#include <fstream>

namespace benchhost::lm {
namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::map<std::string, std::string> read_config(const std::string& path, const std::string& prefix, bool unprefixed) {
  std::ifstream in(path);
  if (!in) BH_THROW(InvalidArgument, "cannot read config file '{}'", path);
  std::map<std::string, std::string> out;
  for (std::string line; std::getline(in, line);) {
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (unprefixed) {
      if (key.find('.') == std::string::npos) out[key] = value;
    } else if (key.rfind(prefix + ".", 0) == 0) {
      out[key.substr(prefix.size() + 1)] = value;
    }
  }
  return out;
}

}  // namespace

Options OptionTable::with_default(const Options& o, const std::string& name) const {
  if (o.has(name)) return o;
  for (const auto& s : specs_)
    if (s.name == name) {
      BH_CHECK_AS(InvalidArgument, !s.default_value.empty(), "option --{}.{} is required ({})", plugin_, name, s.help);
      return Options(plugin_, {{name, s.default_value}});
    }
  BH_THROW(InvalidArgument, "internal: option --{}.{} is not declared", plugin_, name);
}

std::int64_t OptionTable::get_int(const Options& o, const std::string& n) const { return with_default(o, n).get_int(n); }
double OptionTable::get_float(const Options& o, const std::string& n) const { return with_default(o, n).get_float(n); }
std::string OptionTable::get_string(const Options& o, const std::string& n) const {
  if (!o.has(n))
    for (const auto& s : specs_)
      if (s.name == n) return s.default_value;  // "" is a valid default for strings
  return with_default(o, n).get_string(n);
}
bool OptionTable::get_bool(const Options& o, const std::string& n) const { return with_default(o, n).get_bool(n); }

std::map<std::string, std::string> read_plugin_config(const std::string& path, const std::string& plugin) {
  return read_config(path, plugin, false);
}

std::map<std::string, std::string> read_run_config(const std::string& path) { return read_config(path, "", true); }

}  // namespace benchhost::lm
