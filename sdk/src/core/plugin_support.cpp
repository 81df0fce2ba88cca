// Plugin-side helpers behind workload.hpp: JSON (de)serialisation of WorkloadInfo, typed option
// access and the exception -> bh_status mapping used by every trampoline.
#include <charconv>
#include <cstring>
#include <new>

#include <nlohmann/json.hpp>

#include "benchhost/workload.hpp"

namespace benchhost {

using nlohmann::json;

std::string WorkloadInfo::to_json() const {
  json opts = json::array();
  for (const auto& o : options)
    opts.push_back({{"name", o.name}, {"type", o.type}, {"default", o.default_value},
                    {"help", o.help}, {"required", o.required}});
  json j = {{"name", name},
            {"version", version},
            {"benchmark", benchmark},
            {"description", description},
            {"metric", {{"name", metric_name}, {"target", metric_target},
                        {"direction", higher_is_better ? "max" : "min"}}},
            {"devices", devices},
            {"precisions", precisions},
            {"modes", modes},
            {"options", opts},
            {"configs", configs},
            {"default_config", default_config},
            {"sdk_abi", fmt::format("{}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR)}};
  return j.dump();
}

WorkloadInfo WorkloadInfo::from_json(const std::string& text) {
  WorkloadInfo w;
  try {
    json j = json::parse(text);
    w.name = j.at("name").get<std::string>();
    w.version = j.value("version", "");
    w.benchmark = j.value("benchmark", "");
    w.description = j.value("description", "");
    if (j.contains("metric")) {
      const json& m = j["metric"];
      w.metric_name = m.value("name", "");
      w.metric_target = m.value("target", 0.0);
      w.higher_is_better = m.value("direction", "max") != "min";
    }
    w.devices = j.value("devices", std::vector<std::string>{"cpu"});
    w.precisions = j.value("precisions", std::vector<std::string>{"fp32"});
    w.modes = j.value("modes", std::vector<std::string>{"ttt", "train", "infer"});
    w.configs = j.value("configs", std::vector<std::string>{});
    w.default_config = j.value("default_config", "");
    for (const auto& o : j.value("options", json::array())) {
      OptionSpec s;
      s.name = o.at("name").get<std::string>();
      s.type = o.value("type", "string");
      s.default_value = o.value("default", "");
      s.help = o.value("help", "");
      s.required = o.value("required", false);
      w.options.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    BH_THROW(InvalidArgument, "malformed plugin description JSON: {}", e.what());
  }
  return w;
}

std::string Options::get_string(const std::string& name) const {
  auto it = values_.find(name);
  BH_CHECK_AS(InvalidArgument, it != values_.end(), "option --{}.{} is required but was not given",
              plugin_, name);
  return it->second;
}

namespace {
template <class T>
T parse_number(std::string_view s, const std::string& plugin, const std::string& name, const char* kind) {
  T v{};
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    BH_THROW(InvalidArgument, "option --{}.{}: '{}' is not {}", plugin, name, s, kind);
  return v;
}
std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    auto c = s.find(',');
    out.push_back(s.substr(0, c));
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}
}  // namespace

std::int64_t Options::get_int(const std::string& name) const {
  return parse_number<std::int64_t>(get_string(name), plugin_, name, "an integer");
}
double Options::get_float(const std::string& name) const {
  return parse_number<double>(get_string(name), plugin_, name, "a number");
}
bool Options::get_bool(const std::string& name) const {
  std::string v = get_string(name);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  BH_THROW(InvalidArgument, "option --{}.{}: '{}' is not a boolean (true/false)", plugin_, name, v);
}
std::vector<std::int64_t> Options::get_int_list(const std::string& name) const {
  std::vector<std::int64_t> out;
  std::string v = get_string(name);
  for (auto part : split_list(v))
    out.push_back(parse_number<std::int64_t>(part, plugin_, name, "a comma-separated integer list"));
  return out;
}
std::vector<double> Options::get_float_list(const std::string& name) const {
  std::vector<double> out;
  std::string v = get_string(name);
  for (auto part : split_list(v))
    out.push_back(parse_number<double>(part, plugin_, name, "a comma-separated number list"));
  return out;
}

RunContext RunContext::from_c(const bh_run_context& c, const std::string& plugin_name) {
  RunContext r;
  auto str = [](const char* s) { return s ? std::string(s) : std::string(); };
  r.mode = str(c.mode);
  r.device = parse_device(c.device ? c.device : "cpu");
  r.precision = c.precision ? c.precision : "fp32";
  r.seed = c.seed;
  r.batch_size = c.batch_size;
  r.rank = c.rank;
  r.world_size = c.world_size > 0 ? c.world_size : 1;
  r.local_rank = c.local_rank;
  r.num_threads = c.num_threads > 0 ? c.num_threads : 1;
  r.synthetic_data = c.synthetic_data != 0;
  r.config_dir = str(c.config_dir);
  r.communicator = static_cast<Communicator*>(c.communicator);
  std::map<std::string, std::string> values;
  if (c.options_json && *c.options_json) {
    try {
      json j = json::parse(c.options_json);
      for (auto& [k, v] : j.items()) values[k] = v.is_string() ? v.get<std::string>() : v.dump();
    } catch (const json::exception& e) {
      BH_THROW(InvalidArgument, "host passed malformed options JSON: {}", e.what());
    }
  }
  r.options = Options(plugin_name, std::move(values));
  return r;
}

std::string hyperparameters_to_json(const Hyperparameters& h) {
  json j = json::object();
  for (const auto& [k, v] : h) std::visit([&, &key = k](const auto& x) { j[key] = x; }, v);
  return j.dump();
}

namespace detail {

void set_error(bh_error* err, const char* message) noexcept {
  if (!err) return;
  std::strncpy(err->message, message ? message : "", BH_ERROR_MESSAGE_CAPACITY - 1);
  err->message[BH_ERROR_MESSAGE_CAPACITY - 1] = '\0';
}

bh_status status_from_current_exception(bh_error* err) noexcept {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    set_error(err, e.message().c_str());
    return BH_STATUS_INVALID_ARGUMENT;
  } catch (const Unsupported& e) {
    set_error(err, e.message().c_str());
    return BH_STATUS_UNSUPPORTED;
  } catch (const OutOfMemory& e) {
    set_error(err, e.message().c_str());
    return BH_STATUS_OUT_OF_MEMORY;
  } catch (const Diverged& e) {
    set_error(err, e.message().c_str());
    return BH_STATUS_DIVERGED;
  } catch (const DataError& e) {
    set_error(err, e.message().c_str());
    return BH_STATUS_DATA_ERROR;
  } catch (const CommError& e) {
    set_error(err, e.message().c_str());
    return BH_STATUS_COMM_ERROR;
  } catch (const Error& e) {
    set_error(err, e.what());
    return BH_STATUS_FAILED;
  } catch (const std::bad_alloc&) {
    set_error(err, "out of host memory (std::bad_alloc)");
    return BH_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(err, e.what());
    return BH_STATUS_FAILED;
  } catch (...) {
    set_error(err, "unknown exception (not derived from std::exception)");
    return BH_STATUS_FAILED;
  }
}

}  // namespace detail
}  // namespace benchhost
