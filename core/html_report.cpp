#include "html_report.hpp"

#include "cli.hpp"
#include "compare.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace benchhost::host {
namespace {

using nlohmann::ordered_json;

// Ten colours that stay apart for the usual colour-vision deficiencies (Tableau 10).
constexpr const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr int kPaletteSize = 10;

const ordered_json* at(const ordered_json& j, std::initializer_list<const char*> path) {
  const ordered_json* p = &j;
  for (const char* k : path) {
    if (!p->is_object()) return nullptr;
    const auto it = p->find(k);
    if (it == p->end()) return nullptr;
    p = &*it;
  }
  return p;
}

std::optional<double> number(const ordered_json& j, std::initializer_list<const char*> path) {
  const ordered_json* p = at(j, path);
  if (p == nullptr || !p->is_number()) return std::nullopt;
  return p->get<double>();
}

std::string text(const ordered_json& j, std::initializer_list<const char*> path, const std::string& fallback = "") {
  const ordered_json* p = at(j, path);
  if (p == nullptr || p->is_null()) return fallback;
  if (p->is_string()) return p->get<std::string>();
  return p->dump();
}

const ordered_json& results(const ordered_json& report) {
  static const ordered_json empty = ordered_json::array();
  const ordered_json* r = at(report, {"results"});
  return r != nullptr && r->is_array() ? *r : empty;
}

// Axis ticks at 1, 2 or 5 times a power of ten, about `want` of them over [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int want) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(want, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return ticks;
}

std::string tick_label(double v) {
  const double a = std::abs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) return fmt::format("{:.2g}", v);
  if (a >= 100 || v == std::round(v)) return fmt::format("{:.0f}", v);
  if (a >= 1) return fmt::format("{:.3g}", v);
  return fmt::format("{:.3g}", v);
}

constexpr int kWidth = 720, kHeight = 340;
constexpr int kLeft = 70, kRight = 190, kTop = 34, kBottom = 50;

std::string svg_open(const std::string& title) {
  return fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"{2}\">"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>"
      "<text x=\"{3}\" y=\"20\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">{2}</text>",
      kWidth, kHeight, html_escape(title), kLeft);
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string svg_line_chart(const Chart& c) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  auto fx = [&](double x) { return c.log2_x ? std::log2(std::max(x, 1e-12)) : x; };
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, fx(x)), x1 = std::max(x1, fx(x));
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  for (const auto& [label, v] : c.horizontal_lines) y0 = std::min(y0, v), y1 = std::max(y1, v);
  std::string svg = svg_open(c.title);
  if (!std::isfinite(x0) || !std::isfinite(y0)) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#666\">no data</text></svg>", kLeft, kHeight / 2);
    return svg;
  }
  // Throughput, efficiency and latency read best from zero; a metric curve from its own range.
  if (y0 > 0 && y0 < 0.5 * y1) y0 = 0;
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::abs(y0) * 0.1), y0 -= (y0 == 0 ? 0 : std::abs(y0) * 0.1);
  const double ypad = (y1 - y0) * 0.05;
  y1 += ypad;
  if (y0 != 0) y0 -= ypad;
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (fx(x) - x0) / (x1 - x0) * pw; };
  auto pxr = [&](double v) { return kLeft + (v - x0) / (x1 - x0) * pw; };  // already on the axis scale
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  // Grid and ticks.
  for (double t : nice_ticks(y0, y1, 5))
    svg += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e6e6e6\"/>"
                       "<text x=\"{3}\" y=\"{4:.1f}\" font-size=\"11\" text-anchor=\"end\" fill=\"#444\">{5}</text>",
                       kLeft, kLeft + pw, py(t), kLeft - 6, py(t) + 4, tick_label(t));
  std::vector<double> xt;
  if (c.log2_x) {
    for (double e = std::ceil(x0); e <= x1 + 1e-9; e += 1) xt.push_back(e);
  } else {
    xt = nice_ticks(x0, x1, 6);
  }
  for (double t : xt)
    svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#f0f0f0\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#444\">{4}</text>",
                       pxr(t), kTop, kTop + ph, kTop + ph + 16, tick_label(c.log2_x ? std::exp2(t) : t));
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>", kLeft, kTop, pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">{}</text>",
                     kLeft + pw / 2, kHeight - 10, html_escape(c.x_label));
  svg += fmt::format("<text x=\"14\" y=\"{0:.1f}\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\" "
                     "transform=\"rotate(-90 14 {0:.1f})\">{1}</text>",
                     kTop + ph / 2, html_escape(c.y_label));
  for (const auto& [label, v] : c.horizontal_lines)
    svg += fmt::format("<line class=\"hline\" x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#d62728\" "
                       "stroke-dasharray=\"6 4\" stroke-width=\"1.5\"/>"
                       "<text x=\"{1}\" y=\"{3:.1f}\" font-size=\"11\" text-anchor=\"end\" fill=\"#d62728\">{4}</text>",
                       kLeft, kLeft + pw, py(v), py(v) - 4, html_escape(label));
  // Series, then the legend.
  for (std::size_t i = 0; i < c.series.size(); ++i) {
    const auto& s = c.series[i];
    const char* colour = kPalette[i % kPaletteSize];
    std::string pts;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg += fmt::format("<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>", colour, pts);
    if (s.points.size() <= 64)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>", px(x), py(y), colour);
    const double ly = kTop + 8 + 18.0 * static_cast<double>(i);
    if (ly > kTop + ph) continue;
    std::string name = s.name.size() > 28 ? s.name.substr(0, 27) + "…" : s.name;
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"14\" height=\"10\" fill=\"{}\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" font-size=\"11\" fill=\"#222\">{}</text>",
                       kLeft + pw + 12, ly - 9, colour, kLeft + pw + 30, ly, html_escape(name));
  }
  return svg + "</svg>";
}

std::string svg_histogram(const std::string& title, const std::string& x_label, const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values)
    if (std::isfinite(x)) v.push_back(x);
  std::string svg = svg_open(title);
  if (v.empty()) return svg + "<text x=\"70\" y=\"170\" font-size=\"12\" fill=\"#666\">no data</text></svg>";
  std::sort(v.begin(), v.end());
  double lo = v.front(), hi = v.back();
  if (hi == lo) lo -= 0.5, hi += 0.5;
  const int bins = std::clamp(static_cast<int>(std::ceil(std::sqrt(static_cast<double>(v.size())))), 5, 40);
  std::vector<int> counts(bins, 0);
  for (double x : v) ++counts[std::min(bins - 1, static_cast<int>((x - lo) / (hi - lo) * bins))];
  const int top = *std::max_element(counts.begin(), counts.end());
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  for (double t : nice_ticks(0, top, 4)) {
    const double y = kTop + (1 - t / top) * ph;
    svg += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e6e6e6\"/>"
                       "<text x=\"{3}\" y=\"{4:.1f}\" font-size=\"11\" text-anchor=\"end\" fill=\"#444\">{5}</text>",
                       kLeft, kLeft + pw, y, kLeft - 6, y + 4, tick_label(t));
  }
  for (int b = 0; b < bins; ++b) {
    const double h = counts[b] * ph / top;
    svg += fmt::format("<rect class=\"bar\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>",
                       kLeft + b * pw / bins + 1, kTop + ph - h, pw / bins - 2, h, kPalette[0]);
  }
  for (double t : nice_ticks(lo, hi, 6))
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\" fill=\"#444\">{}</text>",
                       kLeft + (t - lo) / (hi - lo) * pw, kTop + ph + 16, tick_label(t));
  const double median = v[v.size() / 2];
  const double mx = kLeft + (median - lo) / (hi - lo) * pw;
  svg += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>"
                     "<text x=\"{3}\" y=\"{4}\" font-size=\"11\" fill=\"#d62728\">median {5}</text>",
                     mx, kTop, kTop + ph, kLeft + pw + 12, kTop + 12, tick_label(median));
  svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#222\">{} steps</text>", kLeft + pw + 12, kTop + 30, v.size());
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>", kLeft, kTop, pw, ph);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" fill=\"#222\">{}</text>",
                     kLeft + pw / 2, kHeight - 10, html_escape(x_label));
  return svg + "</svg>";
}

namespace {

std::string point_name(const ordered_json& r) {
  std::string s = fmt::format("{} {} {}", text(r, {"kind"}), text(r, {"device"}), text(r, {"precision"}));
  if (auto b = number(r, {"batch_size"})) s += fmt::format(" b{:.0f}", *b);
  if (auto n = number(r, {"devices"}); n && *n > 1) s += fmt::format(" x{:.0f}", *n);
  if (text(r, {"kind"}) == "ttt") s += fmt::format(" run {}", text(r, {"run_index"}, "0"));
  return s;
}

std::string fmt_opt(std::optional<double> v, const char* f) {
  return v ? fmt::format(fmt::runtime(f), *v) : std::string("–");
}

std::string environment_section(const std::vector<NamedReport>& reports) {
  struct Row {
    const char* name;
    std::function<std::string(const ordered_json&)> get;
  };
  const std::vector<Row> rows = {
      {"command", [](const ordered_json& r) {
         std::string s;
         if (const ordered_json* a = at(r, {"invocation", "argv"}); a && a->is_array())
           for (const auto& x : *a) {
             if (!s.empty()) s += ' ';
             s += x.is_string() ? x.get<std::string>() : x.dump();
           }
         return s;
       }},
      {"plugin", [](const ordered_json& r) {
         return fmt::format("{} {} (ABI {})", text(r, {"plugin", "name"}), text(r, {"plugin", "version"}),
                            text(r, {"plugin", "abi"}));
       }},
      {"host", [](const ordered_json& r) { return text(r, {"environment", "host"}); }},
      {"CPU", [](const ordered_json& r) {
         return fmt::format("{} ({} logical cores)", text(r, {"environment", "cpu", "model"}),
                            text(r, {"environment", "cpu", "logical_cores"}));
       }},
      {"memory", [](const ordered_json& r) {
         auto m = number(r, {"environment", "memory_bytes"});
         return m ? fmt::format("{:.1f} GiB", *m / (1024.0 * 1024 * 1024)) : std::string("–");
       }},
      {"OS, kernel", [](const ordered_json& r) {
         return text(r, {"environment", "os"}) + ", " + text(r, {"environment", "kernel"});
       }},
      {"compiler", [](const ordered_json& r) { return text(r, {"environment", "compiler"}); }},
      {"benchhost", [](const ordered_json& r) {
         std::string s = text(r, {"environment", "benchhost", "version"}) + " " +
                         text(r, {"environment", "benchhost", "git_revision"});
         if (const ordered_json* d = at(r, {"environment", "benchhost", "git_dirty"}); d && d->is_boolean() && d->get<bool>())
           s += " (uncommitted changes)";
         return s;
       }},
      {"libraries", [](const ordered_json& r) {
         std::string s;
         if (const ordered_json* l = at(r, {"environment", "libraries"}); l && l->is_object())
           for (const auto& [k, v] : l->items()) {
             if (!s.empty()) s += ", ";
             s += k + " " + (v.is_string() ? v.get<std::string>() : v.dump());
           }
         return s;
       }},
      {"CUDA / GPU", [](const ordered_json& r) {
         const ordered_json* c = at(r, {"environment", "cuda"});
         if (c == nullptr || c->is_null()) return std::string("–");
         if (const auto it = c->find("available"); it != c->end() && it->is_boolean() && !it->get<bool>())
           return "none: " + text(*c, {"reason"});
         return c->dump();
       }},
      {"threads", [](const ordered_json& r) {
         return fmt::format("{} (OMP_NUM_THREADS {})", text(r, {"environment", "threading", "threads"}, "?"),
                            text(r, {"environment", "threading", "omp_num_threads"}, "unset"));
       }},
      {"busy machine", [](const ordered_json& r) {
         int busy = 0, measured = 0;
         double other = 0;
         for (const auto& rec : results(r)) {
           const ordered_json* m = at(rec, {"machine_load"});
           if (m == nullptr || !m->is_object()) continue;
           ++measured;
           if (const auto b = m->find("busy"); b != m->end() && b->is_boolean() && b->get<bool>()) ++busy;
           other = std::max(other, number(*m, {"other_cpus"}).value_or(0));
         }
         if (measured == 0) return std::string("not measured");
         return fmt::format("{} of {} measurements busy (up to {:.2f} other CPUs)", busy, measured, other);
       }},
  };
  std::string h = "<h2>Environment</h2><table class=\"env\"><tr><th></th>";
  for (const auto& nr : reports) h += "<th>" + html_escape(nr.label) + "</th>";
  h += "</tr>";
  for (const auto& row : rows) {
    h += fmt::format("<tr><th>{}</th>", row.name);
    std::set<std::string> distinct;
    std::vector<std::string> cells;
    for (const auto& nr : reports) cells.push_back(row.get(nr.report)), distinct.insert(cells.back());
    const bool differs = reports.size() > 1 && distinct.size() > 1 && std::string(row.name) != "command";
    for (const auto& cell : cells) h += fmt::format("<td{}>{}</td>", differs ? " class=\"differs\"" : "", html_escape(cell));
    h += "</tr>";
  }
  h += "</table>";
  if (reports.size() > 1) h += "<p class=\"note\">Cells marked in yellow differ between the runs: weigh the comparison with that in mind.</p>";
  return h;
}

std::string status_class(const std::string& s) {
  if (s == "PASSED") return "ok";
  if (s == "SKIPPED") return "skip";
  return "bad";
}

std::string verdict_section(const std::vector<NamedReport>& reports, const std::string& verdicts_html) {
  std::string h = "<h2>Verdicts</h2>";
  if (!verdicts_html.empty()) h += verdicts_html;
  h += "<table class=\"points\"><tr><th>run</th><th>point</th><th>status</th><th>samples/s</th><th>step p50 ms</th>"
       "<th>latency p50 / p99 ms</th><th>MFU</th><th>time to train s</th><th>message</th></tr>";
  for (const auto& nr : reports) {
    for (const auto& r : results(nr.report)) {
      const std::string st = text(r, {"status"});
      std::string ttt = "–";
      if (auto t = number(r, {"ttt", "time_to_train_seconds"}))
        ttt = fmt::format("{:.1f}{}", *t, text(r, {"ttt", "converged"}) == "true" ? "" : " (not converged)");
      const auto mfu = number(r, {"mfu"});
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
          html_escape(nr.label), html_escape(point_name(r)), status_class(st), html_escape(st),
          fmt_opt(number(r, {"samples_per_second"}), "{:.4g}"), fmt_opt(number(r, {"step_ms", "p50"}), "{:.4g}"),
          fmt_opt(number(r, {"latency_ms", "p50"}), "{:.4g}"), fmt_opt(number(r, {"latency_ms", "p99"}), "{:.4g}"),
          mfu ? fmt::format("{:.1f}%", *mfu * 100) : std::string("–"), ttt, html_escape(text(r, {"message"})));
    }
    if (const ordered_json* t = at(nr.report, {"summary", "ttt"}); t && t->is_object())
      h += fmt::format("<tr><td>{}</td><td colspan=\"8\">time to train: {} — olympic mean {} s over {} runs. {}</td></tr>",
                       html_escape(nr.label), html_escape(text(*t, {"status"})),
                       fmt_opt(number(*t, {"olympic_mean_seconds"}), "{:.1f}"), text(*t, {"runs"}, "0"),
                       html_escape(text(*t, {"note"})));
  }
  return h + "</table>";
}

std::string figure(const std::string& svg, const std::string& caption) {
  return "<figure>" + svg + "<figcaption>" + html_escape(caption) + "</figcaption></figure>";
}

std::string plots_section(const std::vector<NamedReport>& reports) {
  std::string h = "<h2>Plots</h2>";
  const bool several = reports.size() > 1;
  auto prefix = [&](const NamedReport& nr) { return several ? nr.label + ": " : std::string(); };
  int drawn = 0;

  // Throughput against batch size (train), one line per run, precision and device count.
  {
    Chart c{"Training throughput against batch size", "batch size per device", "samples/s (all devices)", true, {}, {}};
    for (const auto& nr : reports) {
      std::map<std::pair<std::string, double>, ChartSeries> by;
      for (const auto& r : results(nr.report)) {
        if (text(r, {"kind"}) != "train") continue;
        auto b = number(r, {"batch_size"}), t = number(r, {"samples_per_second"});
        if (!b || !t) continue;
        const double n = number(r, {"devices"}).value_or(1);
        auto& s = by[{text(r, {"precision"}), n}];
        s.name = fmt::format("{}{}{}", prefix(nr), text(r, {"precision"}), n > 1 ? fmt::format(" x{:.0f}", n) : "");
        s.points.emplace_back(*b, *t);
      }
      for (auto& [k, s] : by) {
        std::sort(s.points.begin(), s.points.end());
        c.series.push_back(std::move(s));
      }
    }
    if (!c.series.empty()) h += figure(svg_line_chart(c), "Higher is better. Each point is one sweep point's samples/s over its timed steps."), ++drawn;
  }
  // Inference latency percentiles against batch size.
  {
    Chart c{"Inference latency percentiles against batch size", "batch size", "latency per batch, ms", true, {}, {}};
    for (const auto& nr : reports) {
      std::map<std::string, ChartSeries> by;
      for (const auto& r : results(nr.report)) {
        if (text(r, {"kind"}) != "infer") continue;
        auto b = number(r, {"batch_size"});
        if (!b) continue;
        for (const char* p : {"p50", "p90", "p99"}) {
          if (auto v = number(r, {"latency_ms", p})) {
            auto& s = by[fmt::format("{} {}", text(r, {"precision"}), p)];
            s.name = prefix(nr) + fmt::format("{} {}", text(r, {"precision"}), p);
            s.points.emplace_back(*b, *v);
          }
        }
      }
      for (auto& [k, s] : by) {
        std::sort(s.points.begin(), s.points.end());
        c.series.push_back(std::move(s));
      }
    }
    if (!c.series.empty()) h += figure(svg_line_chart(c), "Lower is better. The gap between p50 and p99 is the tail a server would see."), ++drawn;
  }
  // Weak-scaling efficiency against device count.
  {
    Chart c{"Weak-scaling efficiency against device count", "devices", "samples/s(n) / (n x samples/s(1))", true, {}, {{"ideal", 1.0}}};
    for (const auto& nr : reports) {
      std::map<double, ChartSeries> by;
      for (const auto& r : results(nr.report)) {
        auto n = number(r, {"devices"}), e = number(r, {"scaling_efficiency"}), b = number(r, {"batch_size"});
        if (!n || !e || !b) continue;
        auto& s = by[*b];
        s.name = prefix(nr) + fmt::format("batch {:.0f}", *b);
        if (s.points.empty()) s.points.emplace_back(1.0, 1.0);
        s.points.emplace_back(*n, *e);
      }
      for (auto& [k, s] : by) {
        std::sort(s.points.begin(), s.points.end());
        c.series.push_back(std::move(s));
      }
    }
    if (!c.series.empty()) h += figure(svg_line_chart(c), "1.0 is perfect weak scaling at the same per-device batch."), ++drawn;
  }
  // Time to train: the quality metric against time, the target drawn.
  {
    Chart c{"Time to train: quality against time", "seconds since run_start", "metric", false, {}, {}};
    std::set<std::string> targets;
    for (const auto& nr : reports) {
      const std::string metric = text(nr.report, {"plugin", "metric", "name"}, "metric");
      c.y_label = metric;
      // The run's target: the plugin's `target` option where the configuration set one (a mini
      // config's own target), else the target the plugin declares (the MLPerf one).
      std::optional<double> target = number(nr.report, {"plugin", "metric", "target"});
      if (const ordered_json* o = at(nr.report, {"invocation", "options", "target"}); o && o->is_string()) {
        try {
          target = std::stod(o->get<std::string>());
        } catch (const std::exception&) {
        }
      }
      bool has_evals = false;
      for (const auto& r : results(nr.report))
        if (const ordered_json* e = at(r, {"ttt", "evals"}); e && e->is_array() && !e->empty()) has_evals = true;
      if (target && has_evals && targets.insert(fmt::format("{}", *target)).second)
        c.horizontal_lines.emplace_back(fmt::format("target {}", tick_label(*target)), *target);
      for (const auto& r : results(nr.report)) {
        const ordered_json* evals = at(r, {"ttt", "evals"});
        if (evals == nullptr || !evals->is_array() || evals->empty()) continue;
        ChartSeries s{prefix(nr) + fmt::format("run {} (seed {})", text(r, {"run_index"}, "0"), text(r, {"seed"})), {}};
        for (const auto& e : *evals)
          if (auto t = number(e, {"seconds_since_run_start"}), m = number(e, {"metric"}); t && m) s.points.emplace_back(*t, *m);
        c.series.push_back(std::move(s));
      }
    }
    if (!c.series.empty())
      h += figure(svg_line_chart(c), "Each line is one time-to-train run; the run stops when it crosses the dashed target."), ++drawn;
  }
  // Training loss against step.
  {
    Chart c{"Training loss against step", "training step", "loss", false, {}, {}};
    for (const auto& nr : reports)
      for (const auto& r : results(nr.report)) {
        const ordered_json* losses = at(r, {"step_losses"});
        if (losses == nullptr || !losses->is_array() || losses->empty()) continue;
        ChartSeries s{prefix(nr) + point_name(r), {}};
        for (const auto& e : *losses)
          if (e.is_array() && e.size() == 2 && e[0].is_number() && e[1].is_number())
            s.points.emplace_back(e[0].get<double>(), e[1].get<double>());
        c.series.push_back(std::move(s));
      }
    if (!c.series.empty())
      h += figure(svg_line_chart(c), "The loss train_step returned: every timed step of a throughput point; a time-to-train "
                                     "run's steps thinned to at most 2048 (multiples of a power of two)."), ++drawn;
  }
  // Per point: step times in order and as a histogram.
  int points = 0;
  for (const auto& nr : reports)
    for (const auto& r : results(nr.report)) {
      const ordered_json* ms = at(r, {"iteration_ms"});
      if (ms == nullptr || !ms->is_array() || ms->size() < 2) continue;
      if (++points > 24) continue;  // keep the page readable; the JSON has the rest
      std::vector<double> v;
      for (const auto& x : *ms)
        if (x.is_number()) v.push_back(x.get<double>());
      Chart c{prefix(nr) + point_name(r) + ": step time by iteration", "timed iteration", "ms", false, {}, {}};
      ChartSeries s{"step ms", {}};
      for (std::size_t i = 0; i < v.size(); ++i) s.points.emplace_back(static_cast<double>(i), v[i]);
      c.series.push_back(std::move(s));
      h += "<div class=\"pair\">" +
           figure(svg_line_chart(c), "A falling start is warm-up the timed steps still hold; spikes are noise.") +
           figure(svg_histogram(prefix(nr) + point_name(r) + ": step time histogram", "ms per step", v),
                  "A wide or two-humped histogram means the median hides something.") +
           "</div>";
      ++drawn;
    }
  if (points > 24) h += fmt::format("<p class=\"note\">{} more points have step times in the JSON reports.</p>", points - 24);
  if (drawn == 0) h += "<p class=\"note\">The reports hold nothing to plot (no finished point).</p>";
  return h;
}

}  // namespace

std::string render_html_report(const std::vector<NamedReport>& reports, const std::string& verdicts_html) {
  std::string title = "benchhost report";
  if (!reports.empty()) {
    const auto& r = reports.front().report;
    title += ": " + text(r, {"plugin", "name"}) + " " + text(r, {"invocation", "mode"});
    if (reports.size() > 1) title += fmt::format(" (+{} more)", reports.size() - 1);
  }
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64];
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::string h = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(title) + "</title>";
  h += "<style>"
       "body{font-family:sans-serif;margin:24px;color:#222;max-width:1500px}"
       "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}"
       "table{border-collapse:collapse;font-size:13px;margin:8px 0}"
       "td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}"
       "th{background:#f4f4f4}td.differs{background:#fff3b0}"
       "td.ok{color:#1a7f37;font-weight:bold}td.bad{color:#c62828;font-weight:bold}td.skip{color:#777}"
       "td.FASTER{color:#1a7f37;font-weight:bold}td.SLOWER{color:#c62828;font-weight:bold}td.UNCERTAIN{color:#b26a00}"
       "figure{display:inline-block;margin:8px 12px 8px 0}figcaption{font-size:12px;color:#555;max-width:700px}"
       ".note{font-size:13px;color:#555}.pair{white-space:nowrap}"
       "</style></head><body>";
  h += "<h1>" + html_escape(title) + "</h1>";
  h += fmt::format("<p class=\"note\">Written {} from {} report{}: ", when, reports.size(), reports.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < reports.size(); ++i) h += (i ? ", " : "") + html_escape(reports[i].label);
  h += ".</p>";
  h += environment_section(reports);
  h += verdict_section(reports, verdicts_html);
  h += plots_section(reports);
  return h + "</body></html>\n";
}

}  // namespace benchhost::host

namespace benchhost::host {

void HtmlReporter::on_record(const RunRecord&, const std::vector<RunRecord>& all) {
  write_file_atomically(path_, render_html_report({{"this run", report_to_json(header_, all, nullptr)}}));
}

void HtmlReporter::on_finish(const std::vector<RunRecord>& all, const Summary& s) {
  write_file_atomically(path_, render_html_report({{"this run", report_to_json(header_, all, &s)}}));
}

// Each later report against the first, as `benchhost compare FIRST LATER...` decides it.
static std::string comparison_html(const std::vector<LoadedReport>& loaded) {
  if (loaded.size() < 2) return "";
  const CompareOptions options;
  std::string h = fmt::format(
      "<p class=\"note\">Each later report against {}, as <code>benchhost compare</code> decides it: the ratio is "
      "BASE time / NEW time (above 1: NEW is faster) with its {:.0f}% percentile-bootstrap interval; SLOWER or "
      "FASTER when the whole interval lies beyond &plusmn;{:.0f}%, SAME when it lies inside, else UNCERTAIN.</p>",
      html_escape(std::filesystem::path(loaded[0].path).filename().string()), options.confidence * 100,
      options.threshold * 100);
  h += "<table class=\"verdicts\"><tr><th>new</th><th>point</th><th>BASE median ms</th><th>NEW median ms</th>"
       "<th>ratio</th><th>interval</th><th>verdict</th><th>warnings</th></tr>";
  for (std::size_t i = 1; i < loaded.size(); ++i) {
    const std::string name = std::filesystem::path(loaded[i].path).filename().string();
    nlohmann::ordered_json c;
    try {
      c = compare_reports(loaded[0], loaded[i], options);
    } catch (const std::exception& e) {
      h += fmt::format("<tr><td>{}</td><td colspan=\"7\">not comparable: {}</td></tr>", html_escape(name), html_escape(e.what()));
      continue;
    }
    for (const auto& pt : c.value("points", nlohmann::ordered_json::array())) {
      auto num = [](const nlohmann::ordered_json& j, const char* k) -> std::optional<double> {
        if (!j.is_object() || !j.contains(k) || !j[k].is_number()) return std::nullopt;
        return j[k].get<double>();
      };
      std::string interval = "–";
      if (pt.contains("ci") && pt["ci"].is_array() && pt["ci"].size() == 2 && pt["ci"][0].is_number())
        interval = fmt::format("[{:.3f}, {:.3f}]", pt["ci"][0].get<double>(), pt["ci"][1].get<double>());
      std::string warnings;
      for (const auto& w : pt.value("warnings", nlohmann::ordered_json::array()))
        if (w.is_string()) warnings += (warnings.empty() ? "" : "; ") + w.get<std::string>();
      const nlohmann::ordered_json base = pt.value("base", nlohmann::ordered_json::object()),
                                   next = pt.value("new", nlohmann::ordered_json::object());
      const std::string verdict = pt.value("verdict", std::string("UNCERTAIN"));
      auto ms = [&](const nlohmann::ordered_json& side) {
        if (auto m = num(side, "median_ms")) return fmt::format("{:.4g}", *m);
        if (auto t = num(side, "olympic_mean_seconds")) return fmt::format("{:.1f} s", *t);
        return std::string("–");
      };
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                       html_escape(name), html_escape(pt.value("point", std::string())), ms(base), ms(next),
                       num(pt, "ratio") ? fmt::format("{:.3f}", *num(pt, "ratio")) : std::string("–"), interval,
                       html_escape(verdict), html_escape(verdict), html_escape(warnings));
    }
    for (const auto& d : c.value("environment_differences", nlohmann::ordered_json::array()))
      if (d.is_string())
        h += fmt::format("<tr><td>{}</td><td colspan=\"7\" class=\"envdiff\">environment differs: {}</td></tr>", html_escape(name),
                         html_escape(d.get<std::string>()));
  }
  return h + "</table>";
}

int report_command(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  std::vector<std::string> inputs;
  std::string output = "report.html";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fprintf(out,
                   "usage: benchhost report RUN.json [RUN2.json ...] [-o report.html]\n"
                   "One self-contained HTML page (inline SVG, no network) from benchhost JSON reports (-o of a run):\n"
                   "the environments, the verdicts, and plots of throughput, latency, scaling, time to train and\n"
                   "per-iteration step times; several reports overlay. `--html FILE` on a run writes the same page.\n");
      return kExitOk;
    }
    if (a == "-o" || a == "--output") {
      if (i + 1 >= args.size()) {
        std::fprintf(err, "benchhost: error: report: option %s needs a file name\n", a.c_str());
        return kExitUsage;
      }
      output = args[++i];
    } else if (a.rfind("--output=", 0) == 0) {
      output = a.substr(9);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(err, "benchhost: error: report: unknown option '%s' (usage: benchhost report RUN.json... -o FILE)\n",
                   a.c_str());
      return kExitUsage;
    } else {
      inputs.push_back(a);
    }
  }
  if (inputs.empty()) {
    std::fprintf(err, "benchhost: error: report: name at least one JSON report (benchhost ... -o run.json writes one)\n");
    return kExitUsage;
  }
  std::vector<NamedReport> reports;
  std::vector<LoadedReport> loaded;
  for (const std::string& path : inputs) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      std::fprintf(err, "benchhost: error: report: '%s' is not a readable file\n", path.c_str());
      return kExitUsage;
    }
    std::ifstream in(path, std::ios::binary);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      std::fprintf(err, "benchhost: error: report: '%s' is not valid JSON\n", path.c_str());
      return kExitUsage;
    }
    if (!j.is_object() || !j.contains("schema") || j["schema"] != "benchhost-report") {
      std::fprintf(err, "benchhost: error: report: '%s' is not a benchhost report (no \"schema\": \"benchhost-report\")\n",
                   path.c_str());
      return kExitUsage;
    }
    try {
      loaded.push_back(check_report(nlohmann::json::parse(j.dump()), path));
    } catch (const std::exception& e) {
      std::fprintf(err, "benchhost: error: report: %s\n", e.what());
      return kExitUsage;
    }
    reports.push_back({std::filesystem::path(path).filename().string(), std::move(j)});
  }
  try {
    write_file_atomically(output, render_html_report(reports, comparison_html(loaded)));
  } catch (const std::exception& e) {
    std::fprintf(err, "benchhost: error: report: cannot write %s: %s\n", output.c_str(), e.what());
    return kExitHostError;
  }
  std::fprintf(out, "benchhost: wrote %s from %zu report%s\n", output.c_str(), reports.size(),
               reports.size() == 1 ? "" : "s");
  return kExitOk;
}

}  // namespace benchhost::host
