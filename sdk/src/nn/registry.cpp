#include "benchhost/nn/registry.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "benchhost/device.hpp"
#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"

namespace benchhost::nn {

// ---- Attrs ----

Attrs& Attrs::set(std::string name, double value) {
  for (auto& [k, v] : scalars_)
    if (k == name) {
      v = value;
      return *this;
    }
  scalars_.emplace_back(std::move(name), value);
  return *this;
}

Attrs& Attrs::set_ints(std::string name, std::vector<std::int64_t> values) {
  for (auto& [k, v] : lists_)
    if (k == name) {
      v = std::move(values);
      return *this;
    }
  lists_.emplace_back(std::move(name), std::move(values));
  return *this;
}

bool Attrs::has(std::string_view name) const {
  for (const auto& [k, v] : scalars_)
    if (k == name) return true;
  for (const auto& [k, v] : lists_)
    if (k == name) return true;
  return false;
}

double Attrs::get(std::string_view name, double fallback) const {
  for (const auto& [k, v] : scalars_)
    if (k == name) return v;
  return fallback;
}

double Attrs::get(std::string_view name) const {
  for (const auto& [k, v] : scalars_)
    if (k == name) return v;
  BH_THROW(InvalidArgument, "op attribute '{}' is required but missing (have: {})", name, str());
}

const std::vector<std::int64_t>& Attrs::get_ints(std::string_view name) const {
  static const std::vector<std::int64_t> kEmpty;
  for (const auto& [k, v] : lists_)
    if (k == name) return v;
  return kEmpty;
}

std::string Attrs::str() const {
  std::string s;
  for (const auto& [k, v] : scalars_) s += fmt::format("{}{}={}", s.empty() ? "" : ", ", k, v);
  for (const auto& [k, v] : lists_)
    s += fmt::format("{}{}=[{}]", s.empty() ? "" : ", ", k, fmt::join(v, ", "));
  return s;
}

// ---- registry ----

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
bool verbose_ops() {
  static const bool on = [] {
    const char* v = std::getenv("BENCHHOST_VERBOSE_OPS");
    return v && *v && *v != '0';
  }();
  return on;
}
// Note [Op times]: BENCHHOST_OP_TIMES=1 times every outermost dispatch (nested ones, such as a
// promotion's casts, count in their caller), synchronising the call's device before and after, and
// prints the totals per op and input dtype, largest first, to stderr at exit. It serialises the
// device's work, so steps run slower: use it to rank the ops of a step, not to time the step.
// The host counts only its timed steps (set_op_times_counting): a shape's first call, whose cuDNN
// plan choice times every candidate engine, would otherwise outrank the op's real cost in a
// profile of a few steps.
// BENCHHOST_OP_TIMES=shapes keys the totals by the call's tensor shapes and attributes too (the
// inputs, then the outputs after "->"), so the one convolution shape among fifty that costs the
// most shows itself.
// Note [Skipping implementations]: BENCHHOST_OP_SKIP is a comma-separated list of implementation
// names ("cuda.gemm") or op/implementation pairs ("sdpa_forward/cuda.gemm") that dispatch passes
// over as if they had refused, so two implementations of an op can be timed against each other
// with one build. Read once per process.
bool skipped_impl(const std::string& op, const std::string& impl) {
  static const std::vector<std::string> entries = [] {
    std::vector<std::string> out;
    const char* v = std::getenv("BENCHHOST_OP_SKIP");
    std::string s = v ? v : "";
    std::size_t start = 0;
    while (start <= s.size()) {
      const std::size_t comma = std::min(s.find(',', start), s.size());
      if (comma > start) out.push_back(s.substr(start, comma - start));
      start = comma + 1;
    }
    return out;
  }();
  for (const std::string& e : entries)
    if (e == impl || e == op + "/" + impl) return true;
  return false;
}
// 0 off, 1 per op and dtype, 2 per op, dtype, shapes and attributes (Note [Op times]).
int op_times_mode() {
  static const int mode = [] {
    const char* v = std::getenv("BENCHHOST_OP_TIMES");
    if (!v || !*v || std::strcmp(v, "0") == 0) return 0;
    return std::strcmp(v, "shapes") == 0 ? 2 : 1;
  }();
  return mode;
}
std::atomic<bool> op_times_counting{true};  // set_op_times_counting
bool op_times_on() { return op_times_mode() != 0 && op_times_counting.load(std::memory_order_relaxed); }

// "2x64x56x56 64x64x3x3 -> 2x64x56x56 [stride=...]": no commas, so the report stays CSV.
std::string shapes_of(const OpCall& call) {
  std::string s;
  auto add = [&s](const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) {
      if (!s.empty() && s.back() != ' ') s += ' ';
      if (!t.defined()) {
        s += '-';
        continue;
      }
      std::string dims;
      for (std::int64_t d : t.shape()) {
        if (!dims.empty()) dims += 'x';
        dims += std::to_string(d);
      }
      s += dims.empty() ? "scalar" : dims;
    }
  };
  add(call.inputs);
  s += " ->";
  add(call.outputs);
  std::string attrs = call.attrs.str();
  std::erase(attrs, ',');  // "stride=[2, 2], groups=1" -> "stride=[2 2] groups=1"
  if (!attrs.empty()) s += " [" + attrs + "]";
  return s;
}
struct OpTimes {
  std::mutex mutex;
  std::map<std::string, std::pair<std::uint64_t, double>> by_key;  // calls, seconds
  static void print() {
    OpTimes& t = instance();
    std::lock_guard lock(t.mutex);
    std::vector<std::pair<std::string, std::pair<std::uint64_t, double>>> rows(t.by_key.begin(), t.by_key.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    double total = 0;
    for (const auto& r : rows) total += r.second.second;
    std::fprintf(stderr, "benchhost_op_times,total_s,%.6f\nbenchhost_op_times,op,dtype%s,calls,seconds,share\n",
                 total, op_times_mode() == 2 ? " shapes [attributes]" : "");
    for (const auto& [key, v] : rows)
      std::fprintf(stderr, "benchhost_op_times,%s,%llu,%.6f,%.4f\n", key.c_str(),
                   static_cast<unsigned long long>(v.first), v.second, total > 0 ? v.second / total : 0.0);
  }
  static OpTimes& instance() {
    static OpTimes* t = [] {
      std::atexit(&OpTimes::print);
      return new OpTimes;  // never destroyed: print() runs at exit
    }();
    return *t;
  }
};
thread_local int op_time_depth = 0;

std::string describe_call(const OpCall& call) {
  std::string s;
  for (const auto& t : call.inputs)
    s += (s.empty() ? "" : ", ") + (t.defined() ? t.describe() : std::string("-"));
  return s;
}
}  // namespace

OpRegistry& OpRegistry::instance() {
  static OpRegistry r;
  return r;
}

void OpRegistry::register_op(OpDef def) {
  std::lock_guard lock(registry_mutex());
  for (auto& op : ops_) {
    if (op.name != def.name) continue;
    if (op.doc.empty()) op.doc = std::move(def.doc);
    if (!op.make_cases) op.make_cases = std::move(def.make_cases);
    op.atol = std::max(op.atol, def.atol);
    op.rtol = std::max(op.rtol, def.rtol);
    for (auto& impl : def.impls) op.impls.push_back(std::move(impl));
    std::stable_sort(op.impls.begin(), op.impls.end(),
                     [](const OpImpl& a, const OpImpl& b) { return a.priority > b.priority; });
    return;
  }
  std::stable_sort(def.impls.begin(), def.impls.end(),
                   [](const OpImpl& a, const OpImpl& b) { return a.priority > b.priority; });
  ops_.push_back(std::move(def));
}

void OpRegistry::register_impl(const std::string& op, OpImpl impl) {
  BH_CHECK(static_cast<bool>(impl.run), "op {} implementation {} has no run function", op,
           impl.name);
  OpDef def;
  def.name = op;
  def.atol = 0;
  def.rtol = 0;
  def.impls.push_back(std::move(impl));
  register_op(std::move(def));
}

const OpDef* OpRegistry::find(std::string_view op) const {
  for (const auto& d : ops_)
    if (d.name == op) return &d;
  return nullptr;
}

const OpDef& OpRegistry::get(std::string_view op) const {
  if (const OpDef* d = find(op)) return *d;
  BH_THROW(Unsupported, "no op named '{}' is registered (registered: {})", op,
           fmt::join(op_names(), ", "));
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& d : ops_) names.push_back(d.name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

bool is_half(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f16 || t.dtype() == DType::bf16);
}

bool has_half(const OpCall& call) {
  return std::any_of(call.inputs.begin(), call.inputs.end(), is_half) ||
         std::any_of(call.outputs.begin(), call.outputs.end(), is_half);
}

// Promoted calls by op name (OpRegistry::promotion_counts).
struct Promotions {
  std::mutex mutex;
  std::map<std::string, std::uint64_t, std::less<>> counts;
};
Promotions& promotions() {
  static Promotions p;
  return p;
}

// "cast" is the conversion that promotion itself uses: each of its implementations handles the
// dtypes it accepts by definition, so it is never promoted (that would recurse).
bool never_promoted(const OpDef& def) { return def.name == "cast"; }

}  // namespace

const OpImpl* OpRegistry::try_select(const OpDef& def, const OpCall& call, DeviceType device,
                                     std::string& refusals) const {
  // Note [Half-precision promotion]: only an implementation that states its dtypes (accepts())
  // is offered f16/bf16 tensors.
  const bool half = has_half(call) && !never_promoted(def);
  for (const auto& impl : def.impls) {
    if (impl.device != device) continue;
    if (half && !impl.accepts) {
      refusals += fmt::format("; {} refused: takes f32 only (no accepts())", impl.name);
      continue;
    }
    if (skipped_impl(def.name, impl.name)) {
      refusals += fmt::format("; {} skipped (BENCHHOST_OP_SKIP)", impl.name);
      continue;
    }
    std::string why = impl.accepts ? impl.accepts(call) : std::string();
    if (why.empty()) {
      if (verbose_ops())
        std::fprintf(stderr, "benchhost_verbose,op,%s,impl,%s,%s%s\n", def.name.c_str(),
                     impl.name.c_str(), describe_call(call).c_str(), refusals.c_str());
      return &impl;
    }
    refusals += fmt::format("; {} refused: {}", impl.name, why);
  }
  return nullptr;
}

const OpImpl& OpRegistry::select(const OpDef& def, const OpCall& call, DeviceType device) const {
  std::string refusals;
  if (const OpImpl* impl = try_select(def, call, device, refusals)) return *impl;
  BH_THROW(Unsupported, "op {} has no implementation for device type {} that accepts ({}) [{}]{}",
           def.name, device == DeviceType::cpu ? "cpu" : "cuda", describe_call(call),
           call.attrs.str(), refusals.empty() ? std::string("; none registered") : refusals);
}

void set_op_times_counting(bool on) { op_times_counting.store(on, std::memory_order_relaxed); }

void OpRegistry::dispatch(std::string_view op, OpCall& call) const {
  if (op_times_on() && op_time_depth == 0) {  // Note [Op times]
    Device device = Device::cpu();
    std::string key = std::string(op) + ",-";
    for (const auto& t : call.inputs)
      if (t.defined()) {
        device = t.device();
        key = std::string(op) + "," + dtype_name(t.dtype());
        break;
      }
    if (op_times_mode() == 2) key += " " + shapes_of(call);
    if (device.is_cuda()) synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    ++op_time_depth;
    try {
      dispatch_untimed(op, call);
    } catch (...) {
      --op_time_depth;
      throw;
    }
    --op_time_depth;
    if (device.is_cuda()) synchronize(device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    OpTimes& t = OpTimes::instance();
    std::lock_guard lock(t.mutex);
    auto& v = t.by_key[key];
    ++v.first;
    v.second += seconds;
    return;
  }
  dispatch_untimed(op, call);
}

void OpRegistry::dispatch_untimed(std::string_view op, OpCall& call) const {
  const OpDef& def = get(op);
  DeviceType device = DeviceType::cpu;
  for (const auto& t : call.inputs)
    if (t.defined()) {
      device = t.device().type;
      break;
    }
  std::string refusals;
  if (const OpImpl* impl = try_select(def, call, device, refusals)) {
    impl->run(call);
    return;
  }
  if (!has_half(call) || never_promoted(def)) {
    select(def, call, device);  // throws with every refusal
    return;
  }
  // Promote (Note [Half-precision promotion]): f32 copies of every f16/bf16 tensor; outputs are
  // copied too because "+=" outputs accumulate into their current values.
  auto to_f32 = [](const Tensor& t) { return is_half(t) ? cast(t, DType::f32) : t; };
  OpCall promoted{{}, {}, call.attrs};
  for (const Tensor& t : call.inputs) promoted.inputs.push_back(to_f32(t));
  for (const Tensor& t : call.outputs) promoted.outputs.push_back(to_f32(t));
  {
    std::lock_guard lock(promotions().mutex);
    ++promotions().counts[def.name];
  }
  if (verbose_ops())
    std::fprintf(stderr, "benchhost_verbose,op,%s,promoted_to_f32,%s%s\n", def.name.c_str(),
                 describe_call(call).c_str(), refusals.c_str());
  select(def, promoted, device).run(promoted);
  for (std::size_t i = 0; i < call.outputs.size(); ++i) {
    if (!is_half(call.outputs[i])) continue;
    OpCall back{{promoted.outputs[i]}, {call.outputs[i]}, Attrs()};
    dispatch("cast", back);
  }
}

std::vector<std::pair<std::string, std::uint64_t>> OpRegistry::promotion_counts() const {
  std::lock_guard lock(promotions().mutex);
  return {promotions().counts.begin(), promotions().counts.end()};
}

void dispatch(std::string_view op, OpCall& call) { OpRegistry::instance().dispatch(op, call); }

}  // namespace benchhost::nn
