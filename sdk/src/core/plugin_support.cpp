// Plugin-side helpers behind workload.hpp: JSON (de)serialisation of WorkloadInfo, typed option
// access and the exception -> bh_status mapping used by every trampoline.
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include <nlohmann/json.hpp>

#include "benchhost/workload.hpp"

namespace benchhost {

using nlohmann::json;

namespace {

json option_to_json(const OptionSpec& o) {
  json j = {{"name", o.name}, {"type", o.type}, {"default", o.default_value}, {"help", o.help},
            {"required", o.required}, {"allowed", allowed_values(o)}};
  if (o.min) j["min"] = *o.min, j["min_exclusive"] = o.min_exclusive;
  if (o.max) j["max"] = *o.max, j["max_exclusive"] = o.max_exclusive;
  if (!o.choices.empty()) j["choices"] = o.choices;
  if (o.min_items > 0) j["min_items"] = o.min_items;
  if (o.max_items > 0) j["max_items"] = o.max_items;
  if (!o.unit.empty()) j["unit"] = o.unit;
  return j;
}

OptionSpec option_from_json(const json& o) {
  OptionSpec s;
  s.name = o.at("name").get<std::string>();
  s.type = o.value("type", "string");
  s.default_value = o.value("default", "");
  s.help = o.value("help", "");
  s.required = o.value("required", false);
  if (o.contains("min")) s.min = o["min"].get<double>(), s.min_exclusive = o.value("min_exclusive", false);
  if (o.contains("max")) s.max = o["max"].get<double>(), s.max_exclusive = o.value("max_exclusive", false);
  s.choices = o.value("choices", std::vector<std::string>{});
  s.min_items = o.value("min_items", std::int64_t{0});
  s.max_items = o.value("max_items", std::int64_t{0});
  s.unit = o.value("unit", "");
  return s;
}

json hyper_value_to_json(const HyperValue& v) {
  return std::visit([](const auto& x) { return json(x); }, v);
}

HyperValue hyper_value_from_json(const json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<std::int64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array() && !j.empty() && j.front().is_string()) return j.get<std::vector<std::string>>();
  if (j.is_array()) return j.get<std::vector<double>>();
  BH_THROW(InvalidArgument, "an MLPerf rule value must be a number, string, boolean or list, not {}", j.dump());
}

json check_to_json(const mlperf::ValueCheck& c) {
  json j = json::object();
  if (!c.one_of.empty()) {
    json values = json::array();
    for (const auto& v : c.one_of) values.push_back(hyper_value_to_json(v));
    j["one_of"] = values;
  }
  if (c.min) j["min"] = *c.min, j["min_exclusive"] = c.min_exclusive;
  if (c.max) j["max"] = *c.max, j["max_exclusive"] = c.max_exclusive;
  return j;
}

mlperf::ValueCheck check_from_json(const json& j) {
  mlperf::ValueCheck c;
  if (!j.is_object()) return c;
  for (const auto& v : j.value("one_of", json::array())) c.one_of.push_back(hyper_value_from_json(v));
  if (j.contains("min")) c.min = j["min"].get<double>(), c.min_exclusive = j.value("min_exclusive", false);
  if (j.contains("max")) c.max = j["max"].get<double>(), c.max_exclusive = j.value("max_exclusive", false);
  return c;
}

// Note [Dictionary-valued targets] (mlperf_rules.hpp): an array keeps the rules' field order.
json fields_to_json(const mlperf::FieldChecks& fields) {
  json j = json::array();
  for (const auto& [field, check] : fields) j.push_back({{"field", field}, {"check", check_to_json(check)}});
  return j;
}

mlperf::FieldChecks fields_from_json(const json& j) {
  mlperf::FieldChecks fields;
  if (!j.is_array()) return fields;
  for (const auto& e : j) fields.emplace_back(e.at("field").get<std::string>(), check_from_json(e.value("check", json::object())));
  return fields;
}

json rules_to_json(const mlperf::Rules& r) {
  json keys = json::array();
  for (const auto& k : r.keys) {
    json e = {{"key", k.key},
              {"occurrence", k.occurrence == mlperf::Occurrence::exactly_one ? "exactly_one" : "at_least_one"},
              {"check", check_to_json(k.check)},
              {"closed_check", check_to_json(k.closed_check)}};
    if (!k.when_key.empty()) e["when"] = {{"key", k.when_key}, {"value", k.when_value}};
    if (!k.metadata_field.empty()) e["metadata_field"] = k.metadata_field;
    if (!k.closed_metadata_values.empty()) e["closed_metadata_values"] = k.closed_metadata_values;
    keys.push_back(std::move(e));
  }
  return {{"closed_division", r.closed_division},
          {"keys", keys},
          {"closed_target", check_to_json(r.closed_target)},
          {"open_target", check_to_json(r.open_target)},
          {"closed_target_fields", fields_to_json(r.closed_target_fields)},
          {"open_target_fields", fields_to_json(r.open_target_fields)},
          {"closed_eval_samples", check_to_json(r.closed_eval_samples)},
          {"runs", r.runs},
          {"olympic_drop_each_side", r.olympic_drop_each_side},
          {"eval_cadence", r.eval_cadence}};
}

mlperf::Rules rules_from_json(const json& j) {
  mlperf::Rules r;
  r.closed_division = j.value("closed_division", false);
  for (const auto& e : j.value("keys", json::array())) {
    mlperf::LoggedKey k;
    k.key = e.at("key").get<std::string>();
    k.occurrence = e.value("occurrence", "exactly_one") == "at_least_one" ? mlperf::Occurrence::at_least_one
                                                                          : mlperf::Occurrence::exactly_one;
    k.check = check_from_json(e.value("check", json::object()));
    k.closed_check = check_from_json(e.value("closed_check", json::object()));
    if (e.contains("when")) {
      k.when_key = e["when"].value("key", "");
      k.when_value = e["when"].value("value", "");
    }
    k.metadata_field = e.value("metadata_field", "");
    k.closed_metadata_values = e.value("closed_metadata_values", std::vector<std::string>{});
    r.keys.push_back(std::move(k));
  }
  r.closed_target = check_from_json(j.value("closed_target", json::object()));
  r.open_target = check_from_json(j.value("open_target", json::object()));
  r.closed_target_fields = fields_from_json(j.value("closed_target_fields", json::array()));
  r.open_target_fields = fields_from_json(j.value("open_target_fields", json::array()));
  r.closed_eval_samples = check_from_json(j.value("closed_eval_samples", json::object()));
  r.runs = j.value("runs", 1);
  r.olympic_drop_each_side = j.value("olympic_drop_each_side", 1);
  r.eval_cadence = j.value("eval_cadence", "");
  return r;
}

}  // namespace

namespace mlperf {
ValueCheck equals(HyperValue v) { return one_of({std::move(v)}); }
ValueCheck one_of(std::vector<HyperValue> values) {
  ValueCheck c;
  c.one_of = std::move(values);
  return c;
}
LoggedKey logged_once(std::string key, ValueCheck check, ValueCheck closed_check) {
  LoggedKey k;
  k.key = std::move(key);
  k.occurrence = Occurrence::exactly_one;
  k.check = std::move(check);
  k.closed_check = std::move(closed_check);
  return k;
}
LoggedKey logged_once_when(std::string key, std::string when_key, std::string when_value) {
  LoggedKey k = logged_once(std::move(key));
  k.when_key = std::move(when_key);
  k.when_value = std::move(when_value);
  return k;
}
ValueCheck positive() { return between(0, std::numeric_limits<double>::infinity(), true, false); }
ValueCheck between(double lo, double hi, bool lo_exclusive, bool hi_exclusive) {
  ValueCheck c;
  c.min = lo;
  c.min_exclusive = lo_exclusive;
  if (std::isfinite(hi)) {
    c.max = hi;
    c.max_exclusive = hi_exclusive;
  }
  return c;
}
}  // namespace mlperf

std::string WorkloadInfo::to_json() const {
  json opts = json::array();
  for (const auto& o : options) opts.push_back(option_to_json(o));
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
            {"mlperf", rules_to_json(mlperf)},
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
    for (const auto& o : j.value("options", json::array())) w.options.push_back(option_from_json(o));
    if (j.contains("mlperf") && j["mlperf"].is_object()) w.mlperf = rules_from_json(j["mlperf"]);
  } catch (const json::exception& e) {
    BH_THROW(InvalidArgument, "malformed plugin description JSON: {}", e.what());
  }
  return w;
}

RunContext RunContext::from_c(const bh_run_context& c, const std::string& plugin_name,
                              std::vector<OptionSpec> declaration) {
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
  r.options = Options(plugin_name, std::move(declaration), std::move(values));
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

// Note [One SDK in the process] (plugin_abi.h): one object per copy of the SDK library.
extern "C" __attribute__((visibility("default"))) const void* benchhost_sdk_identity(void) {
  static const char this_copy = 0;
  return &this_copy;
}
