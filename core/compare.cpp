#include "compare.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "benchhost/version.hpp"
#include "cli.hpp"
#include "reporters.hpp"
#include "stats.hpp"

namespace benchhost::host {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

#define BH_UNUSABLE(...) throw ::benchhost::host::UnusableReport(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::faster: return "FASTER";
    case Verdict::slower: return "SLOWER";
    case Verdict::same: return "SAME";
    case Verdict::uncertain: return "UNCERTAIN";
  }
  return "UNCERTAIN";
}

// ---- statistics ----------------------------------------------------------------------------------

namespace {
double statistic_of(std::vector<double>& v, Statistic s) {
  if (s == Statistic::mean) return mean(v);
  // The median as percentile(50) computes it (the mean of the two middle values for an even count),
  // by partial sorts: a resample is never sorted whole.
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}
}  // namespace

RatioInterval bootstrap_ratio(const std::vector<double>& base, const std::vector<double>& next, Statistic statistic,
                              double confidence, int resamples, std::uint64_t seed) {
  BH_CHECK_AS(InvalidArgument, !base.empty() && !next.empty(), "bootstrap of an empty sample ({} BASE, {} NEW values)",
              base.size(), next.size());
  BH_CHECK_AS(InvalidArgument, confidence > 0 && confidence < 1, "confidence {} is not in (0, 1)", confidence);
  BH_CHECK_AS(InvalidArgument, resamples > 0, "bootstrap needs at least one resample, got {}", resamples);
  std::vector<double> b = base, n = next;
  RatioInterval out;
  out.ratio = statistic_of(b, statistic) / statistic_of(n, statistic);
  std::mt19937_64 rng(seed);
  std::vector<double> ratios;
  ratios.reserve(static_cast<std::size_t>(resamples));
  auto resample = [&](const std::vector<double>& from, std::vector<double>& into) {
    std::uniform_int_distribution<std::size_t> pick(0, from.size() - 1);
    for (auto& x : into) x = from[pick(rng)];
  };
  for (int i = 0; i < resamples; ++i) {
    resample(base, b);
    resample(next, n);
    ratios.push_back(statistic_of(b, statistic) / statistic_of(n, statistic));
  }
  out.low = percentile(ratios, 50.0 * (1 - confidence));
  out.high = percentile(ratios, 50.0 * (1 + confidence));
  return out;
}

Verdict decide(const RatioInterval& r, double threshold) {
  if (!std::isfinite(r.low) || !std::isfinite(r.high)) return Verdict::uncertain;
  if (r.low > 1 + threshold) return Verdict::faster;
  if (r.high < 1 - threshold) return Verdict::slower;
  if (r.low >= 1 - threshold && r.high <= 1 + threshold) return Verdict::same;
  return Verdict::uncertain;
}

// ---- reading reports -----------------------------------------------------------------------------

LoadedReport check_report(json document, const std::string& path) {
  if (!document.is_object() || document.value("schema", "") != "benchhost-report")
    BH_UNUSABLE("{} is not a benchhost report (no \"schema\": \"benchhost-report\"); compare takes the JSON files "
                "that `benchhost ... -o FILE` writes", path);
  if (!document.contains("schema_version") || !document["schema_version"].is_number_integer())
    BH_UNUSABLE("{}: \"schema_version\" is missing or not an integer", path);
  if (const int v = document["schema_version"].get<int>(); v > kReportSchemaVersion)
    BH_UNUSABLE("{} has schema_version {}, newer than this benchhost reads ({}); compare it with a newer benchhost", path,
                v, kReportSchemaVersion);
  if (!document.contains("results") || !document["results"].is_array())
    BH_UNUSABLE("{}: \"results\" is missing or not an array", path);
  for (std::size_t i = 0; i < document["results"].size(); ++i) {
    try {
      (void)record_from_json(document["results"][i]);
    } catch (const std::exception& e) {
      const auto* be = dynamic_cast<const Error*>(&e);
      BH_UNUSABLE("{}: results[{}] is not a valid record: {}", path, i, be ? be->message() : std::string(e.what()));
    }
  }
  return {path, std::move(document)};
}

LoadedReport load_report(const fs::path& path) {
  std::ifstream in(path);
  if (!in) BH_UNUSABLE("cannot read {}: {}", path.string(), std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  json document;
  try {
    document = json::parse(text.str());
  } catch (const json::parse_error& e) {
    BH_UNUSABLE("{} is not valid JSON ({}); a report cut short by a crash is still whole, so this file was written by "
                "something else or truncated", path.string(), e.what());
  }
  return check_report(std::move(document), path.string());
}

// ---- matching points -----------------------------------------------------------------------------

namespace {

struct Point {
  std::string name;  ///< "train null b=4 n=1 fp32 cpu" (+ " #2" for a repeated point)
  ordered_json key;
  std::vector<RunRecord> records;  ///< ttt: every run; other kinds: one record
};

std::vector<Point> points_of(const json& report) {
  std::vector<Point> points;
  std::map<std::string, int> seen;
  for (const auto& j : report["results"]) {
    RunRecord r = record_from_json(j);
    std::string name = fmt::format("{} {} b={} n={} {} {}", r.kind, r.plugin, r.batch_size, r.devices, r.precision, r.device);
    if (r.kind == "ttt") {
      auto it = std::find_if(points.begin(), points.end(), [&](const Point& p) { return p.name == name; });
      if (it != points.end()) {
        it->records.push_back(std::move(r));
        continue;
      }
    } else if (const int n = ++seen[name]; n > 1) {
      name += fmt::format(" #{}", n);
    }
    ordered_json key = {{"kind", r.kind},         {"plugin", r.plugin},       {"batch_size", r.batch_size},
                        {"devices", r.devices},   {"precision", r.precision}, {"device", r.device}};
    points.push_back({name, key, {std::move(r)}});
  }
  return points;
}

ordered_json number_or_null(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? ordered_json(*v) : ordered_json(nullptr);
}

std::string side_name(bool base) { return base ? "BASE" : "NEW"; }

// A throughput or latency point: median and p99 of the per-iteration samples.
ordered_json compare_timed(const Point& b, const Point& n, int base_schema, int new_schema, const CompareOptions& o) {
  const RunRecord& rb = b.records.front();
  const RunRecord& rn = n.records.front();
  const bool infer = rb.kind == "infer";
  ordered_json warnings = ordered_json::array();
  auto side = [&](const RunRecord& r) {
    ordered_json s;
    s["status"] = to_string(r.status);
    s["samples"] = r.iteration_ms.size();
    std::optional<double> median = infer ? r.latency_ms_p50 : r.step_ms_p50;
    std::optional<double> p99 = infer ? r.latency_ms_p99 : r.step_ms_p99;
    if (!r.iteration_ms.empty()) {
      median = percentile(r.iteration_ms, 50);
      p99 = percentile(r.iteration_ms, 99);
    }
    s["median_ms"] = number_or_null(median);
    s["p99_ms"] = number_or_null(p99);
    s["samples_per_second"] = number_or_null(r.samples_per_second);
    return s;
  };
  ordered_json out;
  out["point"] = b.name;
  out["key"] = b.key;
  out["metric"] = infer ? "latency_ms" : "step_ms";
  out["base"] = side(rb);
  out["new"] = side(rn);
  out["ratio"] = nullptr;
  out["ci"] = nullptr;
  Verdict verdict = Verdict::uncertain;
  bool usable = true;
  for (const bool is_base : {true, false}) {
    const RunRecord& r = is_base ? rb : rn;
    const int schema = is_base ? base_schema : new_schema;
    if (r.status != RunStatus::passed) {
      warnings.push_back(fmt::format("{} point {}{}", side_name(is_base), to_string(r.status),
                                     r.message.empty() ? std::string() : ": " + r.message.substr(0, r.message.find('\n'))));
      usable = false;
    } else if (r.iteration_ms.empty() && schema < kFirstSchemaWithIterations) {
      warnings.push_back(fmt::format("the {} report (schema_version {}) has no per-iteration samples: rerun it with "
                                     "benchhost >= {} (git {}), which writes report schema_version {}, for a confidence "
                                     "interval", side_name(is_base), schema, BENCHHOST_VERSION_STRING,
                                     BENCHHOST_GIT_REVISION, kReportSchemaVersion));
      usable = false;
    } else if (r.iteration_ms.size() < kMinSamples) {
      warnings.push_back(fmt::format("too few samples to decide: {} has {} timed steps, a verdict needs {} or more "
                                     "(-i {})", side_name(is_base), r.iteration_ms.size(), kMinSamples, kMinSamples));
      usable = r.iteration_ms.empty() ? false : usable;
    }
    if (r.machine_load && r.machine_load->busy)
      warnings.push_back(fmt::format("{} point was measured on a busy machine ({})", side_name(is_base),
                                     r.machine_load->describe()));
  }
  if (usable && !rb.iteration_ms.empty() && !rn.iteration_ms.empty()) {
    const RatioInterval ri = bootstrap_ratio(rb.iteration_ms, rn.iteration_ms, Statistic::median, o.confidence);
    out["ratio"] = ri.ratio;
    out["ci"] = {ri.low, ri.high};
    if (rb.iteration_ms.size() >= kMinSamples && rn.iteration_ms.size() >= kMinSamples) verdict = decide(ri, o.threshold);
  } else if (out["base"]["median_ms"].is_number() && out["new"]["median_ms"].is_number() &&
             out["new"]["median_ms"].get<double>() > 0) {
    out["ratio"] = out["base"]["median_ms"].get<double>() / out["new"]["median_ms"].get<double>();  // no interval
  }
  out["verdict"] = to_string(verdict);
  out["warnings"] = warnings;
  return out;
}

// A time-to-train point: the olympic mean of each side's runs, with the kept runs' spread.
ordered_json compare_ttt(const Point& b, const Point& n, const json& base_doc, const json& new_doc,
                         const CompareOptions& o) {
  ordered_json warnings = ordered_json::array();
  std::vector<double> kept_b, kept_n;
  auto side = [&](const Point& p, const json& doc, bool is_base, std::vector<double>& kept) {
    std::vector<TttRun> runs;
    for (const auto& r : p.records)
      if (r.status != RunStatus::skipped) runs.push_back({r.time_to_train_seconds.value_or(0), r.converged.value_or(false)});
    std::size_t drop = 1;
    if (doc.contains("summary") && doc["summary"].is_object() && doc["summary"].contains("ttt") &&
        doc["summary"]["ttt"].is_object())
      drop = doc["summary"]["ttt"].value("dropped_each_side", std::size_t{1});
    const OlympicMean m = olympic_mean(runs, drop);
    ordered_json s;
    s["status"] = runs.empty() ? "SKIPPED" : m.valid ? "VALID" : "INVALID";
    s["runs"] = runs.size();
    s["kept_runs"] = m.kept.size();
    s["olympic_mean_seconds"] = m.valid ? ordered_json(m.seconds) : ordered_json(nullptr);
    for (std::size_t i : m.kept) kept.push_back(runs[i].seconds);
    if (m.valid && !kept.empty()) {
      const double mu = mean(kept);
      double ss = 0;
      for (double x : kept) ss += (x - mu) * (x - mu);
      s["min_seconds"] = *std::min_element(kept.begin(), kept.end());
      s["max_seconds"] = *std::max_element(kept.begin(), kept.end());
      s["stdev_seconds"] = kept.size() > 1 ? ordered_json(std::sqrt(ss / static_cast<double>(kept.size() - 1)))
                                           : ordered_json(nullptr);
    } else {
      s["min_seconds"] = s["max_seconds"] = s["stdev_seconds"] = nullptr;
      warnings.push_back(fmt::format("{} time to train is {}: {}", side_name(is_base), s["status"].get<std::string>(), m.note));
      kept.clear();
    }
    return s;
  };
  ordered_json out;
  out["point"] = b.name;
  out["key"] = b.key;
  out["metric"] = "time_to_train_seconds";
  out["base"] = side(b, base_doc, true, kept_b);
  out["new"] = side(n, new_doc, false, kept_n);
  out["ratio"] = nullptr;
  out["ci"] = nullptr;
  Verdict verdict = Verdict::uncertain;
  if (!kept_b.empty() && !kept_n.empty()) {
    const RatioInterval ri = bootstrap_ratio(kept_b, kept_n, Statistic::mean, o.confidence);
    out["ratio"] = ri.ratio;
    out["ci"] = {ri.low, ri.high};
    if (kept_b.size() >= kMinRuns && kept_n.size() >= kMinRuns)
      verdict = decide(ri, o.threshold);
    else
      warnings.push_back(fmt::format("too few runs to decide: {} and {} runs kept, a verdict needs {} kept runs each "
                                     "(more --runs: the olympic mean drops the fastest and slowest runs)",
                                     kept_b.size(), kept_n.size(), kMinRuns));
  }
  out["verdict"] = to_string(verdict);
  out["warnings"] = warnings;
  return out;
}

// Every leaf of `j` under `prefix` as "path" -> compact JSON text.
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(it.value(), prefix + "." + it.key(), out);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) flatten(j[i], fmt::format("{}[{}]", prefix, i), out);
  } else {
    out[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

}  // namespace

std::vector<std::string> environment_differences(const json& base, const json& next) {
  std::vector<std::string> out;
  auto leaves = [](const json& doc) {
    std::map<std::string, std::string> m;
    if (doc.contains("environment")) flatten(doc["environment"], "environment", m);
    if (doc.contains("plugin") && doc["plugin"].is_object()) {
      const json& p = doc["plugin"];
      for (const char* k : {"name", "version", "abi"})
        if (p.contains(k)) flatten(p[k], fmt::format("plugin.{}", k), m);
    }
    if (doc.contains("invocation") && doc["invocation"].is_object()) {
      const json& i = doc["invocation"];
      for (const char* k : {"warmup", "iterations", "runs", "seed", "threads", "synthetic", "config", "options"})
        if (i.contains(k)) flatten(i[k], fmt::format("invocation.{}", k), m);
    }
    // Where a file lies, and the host's name, say nothing about speed.
    for (auto it = m.begin(); it != m.end();)
      it = it->first.size() >= 5 && it->first.compare(it->first.size() - 5, 5, ".path") == 0 ? m.erase(it) : std::next(it);
    m.erase("environment.environment_variables.BENCHHOST_PLUGIN_PATH");
    return m;
  };
  const auto b = leaves(base), n = leaves(next);
  for (const auto& [path, value] : b) {
    const auto it = n.find(path);
    if (it == n.end())
      out.push_back(fmt::format("{}: BASE {}, NEW (none)", path, value));
    else if (it->second != value)
      out.push_back(fmt::format("{}: BASE {}, NEW {}", path, value, it->second));
  }
  for (const auto& [path, value] : n)
    if (!b.count(path)) out.push_back(fmt::format("{}: BASE (none), NEW {}", path, value));
  return out;
}

ordered_json compare_reports(const LoadedReport& base, const LoadedReport& next, const CompareOptions& o) {
  const std::vector<Point> pb = points_of(base.document), pn = points_of(next.document);
  const int sb = base.document["schema_version"].get<int>(), sn = next.document["schema_version"].get<int>();
  ordered_json out;
  out["base"] = base.path;
  out["new"] = next.path;
  out["environment_differences"] = environment_differences(base.document, next.document);
  ordered_json points = ordered_json::array(), base_only = ordered_json::array(), new_only = ordered_json::array();
  std::map<std::string, int> counts{{"FASTER", 0}, {"SLOWER", 0}, {"SAME", 0}, {"UNCERTAIN", 0}};
  for (const auto& p : pb) {
    const auto it = std::find_if(pn.begin(), pn.end(), [&](const Point& q) { return q.name == p.name; });
    if (it == pn.end()) {
      base_only.push_back(p.name);
      continue;
    }
    ordered_json c = p.key["kind"] == "ttt" ? compare_ttt(p, *it, base.document, next.document, o)
                                            : compare_timed(p, *it, sb, sn, o);
    ++counts[c["verdict"].get<std::string>()];
    points.push_back(std::move(c));
  }
  for (const auto& q : pn)
    if (std::none_of(pb.begin(), pb.end(), [&](const Point& p) { return p.name == q.name; })) new_only.push_back(q.name);
  if (points.empty())
    BH_UNUSABLE("nothing to compare: no point of {} ({}) matches one of {} ({}); points match by kind, plugin, batch "
                "size, device count, precision and device",
                next.path, new_only.empty() ? std::string("none") : new_only.dump(), base.path,
                base_only.empty() ? std::string("none") : base_only.dump());
  out["points"] = points;
  out["unmatched"] = {{"base_only", base_only}, {"new_only", new_only}};
  out["counts"] = {{"FASTER", counts["FASTER"]}, {"SLOWER", counts["SLOWER"]}, {"SAME", counts["SAME"]},
                   {"UNCERTAIN", counts["UNCERTAIN"]}};
  return out;
}

std::string comparison_text(const ordered_json& c, const CompareOptions& o) {
  std::string s = fmt::format("BASE {}\nNEW  {}\n", c["base"].get<std::string>(), c["new"].get<std::string>());
  for (const auto& d : c["environment_differences"])
    s += fmt::format("warning: environments differ: {}\n", d.get<std::string>());
  auto num = [](const ordered_json& v) { return v.is_number() ? fmt::format("{:.4g}", v.get<double>()) : std::string("-"); };
  s += fmt::format("{:<40} {:<18} {:>10} {:>10} {:>8}  {:<17} {}\n", "point", "metric", "BASE", "NEW", "ratio",
                   fmt::format("{:.0f}% CI", o.confidence * 100), "verdict");
  for (const auto& p : c["points"]) {
    const bool ttt = p["metric"] == "time_to_train_seconds";
    const std::string metric = ttt ? "olympic mean s" : p["metric"] == "latency_ms" ? "p50 latency ms" : "median step ms";
    const std::string value_key = ttt ? "olympic_mean_seconds" : "median_ms";
    const std::string ci = p["ci"].is_array() ? fmt::format("[{:.4f}, {:.4f}]", p["ci"][0].get<double>(),
                                                            p["ci"][1].get<double>())
                                              : std::string("-");
    s += fmt::format("{:<40} {:<18} {:>10} {:>10} {:>8}  {:<17} {}\n", p["point"].get<std::string>(), metric,
                     num(p["base"][value_key]), num(p["new"][value_key]),
                     p["ratio"].is_number() ? fmt::format("{:.4f}", p["ratio"].get<double>()) : std::string("-"), ci,
                     p["verdict"].get<std::string>());
    if (ttt) {
      for (const char* side : {"base", "new"})
        if (p[side]["min_seconds"].is_number())
          s += fmt::format("{:<41}{} kept {} of {} runs: min {} s, max {} s, stdev {} s\n", "",
                           side == std::string("base") ? "BASE" : "NEW ", p[side]["kept_runs"].get<std::size_t>(),
                           p[side]["runs"].get<std::size_t>(), num(p[side]["min_seconds"]), num(p[side]["max_seconds"]),
                           num(p[side]["stdev_seconds"]));
    } else {
      s += fmt::format("{:<41}p99 {} -> {} ms; {} and {} samples\n", "", num(p["base"]["p99_ms"]), num(p["new"]["p99_ms"]),
                       p["base"]["samples"].get<std::size_t>(), p["new"]["samples"].get<std::size_t>());
    }
    for (const auto& w : p["warnings"]) s += fmt::format("{:<41}warning: {}\n", "", w.get<std::string>());
  }
  for (const auto& name : c["unmatched"]["base_only"]) s += fmt::format("only in BASE: {}\n", name.get<std::string>());
  for (const auto& name : c["unmatched"]["new_only"]) s += fmt::format("only in NEW:  {}\n", name.get<std::string>());
  const auto& k = c["counts"];
  s += fmt::format("{} FASTER, {} SLOWER, {} SAME, {} UNCERTAIN\n", k["FASTER"].get<int>(), k["SLOWER"].get<int>(),
                   k["SAME"].get<int>(), k["UNCERTAIN"].get<int>());
  return s;
}

namespace {
std::string method_text(const CompareOptions& o) {
  return fmt::format("ratio = BASE median time / NEW median time (above 1: NEW is faster; time to train: olympic means); "
                     "{:.0f}% confidence interval by a percentile bootstrap ({} resamples, seed {}) of the per-iteration "
                     "samples (time to train: of the kept runs' mean); SLOWER/FASTER when the whole interval lies "
                     "beyond -/+{:.3g}%, SAME when it lies within, else UNCERTAIN; a verdict needs {} samples "
                     "({} kept runs) per side",
                     o.confidence * 100, kBootstrapResamples, kBootstrapSeed, o.threshold * 100, kMinSamples, kMinRuns);
}

double parse_fraction(const std::string& option, const std::string& text, double lo, double hi) {
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !(v > lo && v < hi))
    BH_USAGE("compare: {} '{}' is not a number in ({}, {}) (a fraction: 0.05 is 5%)", option, text, lo, hi);
  return v;
}
}  // namespace

int run_compare(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  CompareOptions o;
  std::vector<std::string> files;
  try {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&](const std::string& name, std::string& dst) {
        if (a == name) {
          if (i + 1 >= args.size()) BH_USAGE("compare: option {} needs a value", name);
          dst = args[++i];
          return true;
        }
        if (a.rfind(name + "=", 0) == 0) {
          dst = a.substr(name.size() + 1);
          return true;
        }
        return false;
      };
      std::string v;
      if (a == "--json") {
        o.json = true;
      } else if (a == "--help" || a == "-h") {
        std::fputs("usage: benchhost compare BASE.json NEW.json [NEW2.json ...] [--threshold 0.05] [--confidence 0.95] "
                   "[--json]\n  Matches the reports' points and says, per point, whether NEW is FASTER, SLOWER, SAME or "
                   "UNCERTAIN against BASE.\n  Exit status: 0 no regression, 5 a point SLOWER beyond the threshold, 6 "
                   "unusable input, 1 usage error (docs/cli.md).\n", out);
        return kExitOk;
      } else if (value("--threshold", v)) {
        o.threshold = parse_fraction("--threshold", v, 0, 1);
      } else if (value("--confidence", v)) {
        o.confidence = parse_fraction("--confidence", v, 0.5, 1);
      } else if (!a.empty() && a[0] == '-') {
        BH_USAGE("compare: unknown option '{}' (options: --threshold T, --confidence C, --json)", a);
      } else {
        files.push_back(a);
      }
    }
    if (files.size() < 2)
      BH_USAGE("compare needs two reports or more: benchhost compare BASE.json NEW.json [NEW2.json ...] (got {})",
               files.size());
  } catch (const Error& e) {
    std::fprintf(err, "benchhost: error: %s\n", e.message().c_str());
    return kExitUsage;
  }
  ordered_json results = ordered_json::array();
  try {
    const LoadedReport base = load_report(files.front());
    for (std::size_t i = 1; i < files.size(); ++i) results.push_back(compare_reports(base, load_report(files[i]), o));
  } catch (const UnusableReport& e) {
    std::fprintf(err, "benchhost: error: compare: %s\n", e.message().c_str());
    return kExitUnusableInput;
  }
  int regressions = 0;
  for (const auto& c : results) regressions += c["counts"]["SLOWER"].get<int>();
  const int code = regressions > 0 ? kExitRegression : kExitOk;
  if (o.json) {
    ordered_json j;
    j["schema"] = "benchhost-compare";
    j["schema_version"] = 1;
    j["method"] = method_text(o);
    j["statistic"] = "percentile bootstrap of the ratio of medians";
    j["threshold"] = o.threshold;
    j["confidence"] = o.confidence;
    j["bootstrap_resamples"] = kBootstrapResamples;
    j["bootstrap_seed"] = kBootstrapSeed;
    j["min_samples"] = kMinSamples;
    j["min_runs"] = kMinRuns;
    j["comparisons"] = results;
    j["regressions"] = regressions;
    j["exit_code"] = code;
    std::fputs((j.dump(2) + "\n").c_str(), out);
  } else {
    std::string text = fmt::format("benchhost compare: {}\n", method_text(o));
    for (const auto& c : results) text += fmt::format("\n{}", comparison_text(c, o));
    text += regressions > 0 ? fmt::format("\nREGRESSION: {} point(s) SLOWER by more than {:.3g}% with {:.0f}% confidence "
                                          "(exit {})\n", regressions, o.threshold * 100, o.confidence * 100, code)
                            : fmt::format("\nno regression beyond {:.3g}% (exit 0)\n", o.threshold * 100);
    std::fputs(text.c_str(), out);
  }
  return code;
}

}  // namespace benchhost::host
