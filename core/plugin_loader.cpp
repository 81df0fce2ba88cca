#include "plugin_loader.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

namespace benchhost::host {

namespace fs = std::filesystem;

namespace {

// Required slots are checked once at load time so a broken plugin shows up in `benchhost list`
// instead of failing half-way through a run. Mode-specific slots (evaluate, infer_step) are
// checked when a mode needs them.
const char* missing_required_slot(const bh_plugin_descriptor& d) {
  if (!d.describe_json) return "describe_json";
  if (!d.create) return "create";
  if (!d.destroy) return "destroy";
  if (!d.setup) return "setup";
  if (!d.train_step) return "train_step";
  return nullptr;
}

std::string cstr(const char* s) { return s ? std::string(s) : std::string(); }

bool looks_like_shared_object(const fs::path& p) {
  const std::string name = p.filename().string();
  const std::string suffix = boost::dll::shared_library::suffix().string();  // ".so"
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::shared_ptr<LoadedPlugin> load_plugin(const fs::path& path, BrokenPlugin* broken) {
  auto fail = [&](std::string why) -> std::shared_ptr<LoadedPlugin> {
    if (broken) *broken = BrokenPlugin{path, std::move(why)};
    return nullptr;
  };
  auto lib = std::make_shared<boost::dll::shared_library>();
  try {
    // RTLD_LOCAL: two plugins may define the same internal symbols without clashing.
    lib->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    return fail(fmt::format("cannot be loaded: {}", e.what()));
  }
  if (!lib->has(BENCHHOST_PLUGIN_ENTRY_SYMBOL))
    return fail(fmt::format("not a benchhost plugin: the library has no '{}' symbol (define one with "
                            "BENCHHOST_PLUGIN(YourWorkload))",
                            BENCHHOST_PLUGIN_ENTRY_SYMBOL));
  const bh_plugin_descriptor* d = nullptr;
  try {
    auto entry = lib->get<const bh_plugin_descriptor*()>(BENCHHOST_PLUGIN_ENTRY_SYMBOL);
    d = entry();
  } catch (const std::exception& e) {
    return fail(fmt::format("entry point failed: {}", e.what()));
  }
  if (!d) return fail("entry point returned no descriptor");
  const std::string theirs = fmt::format("{}.{}", d->abi_major, d->abi_minor);
  const std::string ours = fmt::format("{}.{}", BENCHHOST_ABI_MAJOR, BENCHHOST_ABI_MINOR);
  if (d->abi_major != BENCHHOST_ABI_MAJOR)
    return fail(fmt::format("plugin ABI {} is incompatible with this host's ABI {} (the major version "
                            "differs): rebuild the plugin against this SDK",
                            theirs, ours));
  if (d->abi_minor > BENCHHOST_ABI_MINOR)
    return fail(fmt::format("plugin ABI {} is newer than this host's ABI {}: update benchhost", theirs, ours));
  // Note [Plugin ABI] (plugin_abi.h): copy what both sides know, zero the rest.
  const std::size_t header = offsetof(bh_plugin_descriptor, name);
  if (d->struct_size < header)
    return fail(fmt::format("descriptor struct_size {} is smaller than its header ({} bytes)", d->struct_size, header));
  auto p = std::make_shared<LoadedPlugin>();
  std::memcpy(&p->descriptor, d, std::min<std::size_t>(d->struct_size, sizeof(bh_plugin_descriptor)));
  p->path = path;
  p->abi = theirs;
  p->name = cstr(p->descriptor.name);
  p->version = cstr(p->descriptor.version);
  if (p->name.empty()) return fail("descriptor has no name");
  if (const char* slot = missing_required_slot(p->descriptor))
    return fail(fmt::format("plugin '{}' lacks the required slot '{}'", p->name, slot));
  // Note [One SDK in the process] (plugin_abi.h): the symbol as the plugin's own lookup scope
  // (the plugin and its dependencies) resolves it, against the host's.
  if (lib->has(BENCHHOST_SDK_IDENTITY_SYMBOL)) {
    const void* theirs_sdk = nullptr;
    try {
      theirs_sdk = lib->get<const void*()>(BENCHHOST_SDK_IDENTITY_SYMBOL)();
    } catch (const std::exception& e) {
      return fail(fmt::format("plugin '{}': {} failed: {}", p->name, BENCHHOST_SDK_IDENTITY_SYMBOL, e.what()));
    }
    if (theirs_sdk != benchhost_sdk_identity())
      return fail(fmt::format("plugin '{}' carries its own copy of the benchhost SDK (linked statically, or another "
                              "libbenchhost_sdk.so): the host hands plugins SDK objects that only the host's copy can "
                              "use; link benchhost::sdk as the shared library (benchhost_add_plugin does), see "
                              "docs/plugin-abi.md", p->name));
    p->shares_sdk = true;
  }
  const char* json = p->descriptor.describe_json();
  if (!json) return fail(fmt::format("plugin '{}': describe_json failed (returned null)", p->name));
  try {
    p->info = WorkloadInfo::from_json(json);
  } catch (const Error& e) {
    return fail(fmt::format("plugin '{}': {}", p->name, e.message()));
  }
  if (p->info.name != p->name)
    return fail(fmt::format("descriptor name '{}' differs from describe_json name '{}'", p->name, p->info.name));
  if (p->version.empty()) p->version = p->info.version;
  p->library = std::move(lib);
  return p;
}

namespace {

// Note [Isolated discovery]
// Loading a file runs code of the file's choosing: its library constructors, the entry point and
// describe_json. A truncated file can fault inside dlopen (SIGBUS), a constructor can abort or
// exit. Each candidate is therefore loaded first in a forked child that reports back and ends;
// only a file that loaded there cleanly is loaded in this process. A file whose probe crashed,
// exited or hung is listed as broken with what happened, and `list` and every run go on. The
// cost is one fork per plugin file per command (milliseconds).
constexpr int kProbeTimeoutMilliseconds = 10000;

std::string probe_signal_text(int sig) {
  const char* name = ::sigabbrev_np(sig);
  return fmt::format("SIG{} ({})", name ? name : std::to_string(sig), ::strsignal(sig));
}

// "" when the file loads cleanly in a child process; otherwise why it cannot be used.
std::string probe_in_child(const fs::path& path) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};  // cannot isolate: load it as before
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (pid == 0) {
    ::close(fds[0]);
    BrokenPlugin broken;
    const bool ok = load_plugin(path, &broken) != nullptr;
    if (!ok) {
      const std::string& why = broken.reason;
      [[maybe_unused]] const auto n = ::write(fds[1], why.data(), why.size());
    }
    ::_exit(ok ? 0 : 1);  // no destructors or atexit handlers of what was loaded
  }
  ::close(fds[1]);
  std::string reason;
  bool timed_out = false;
  for (;;) {
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = ::poll(&pfd, 1, kProbeTimeoutMilliseconds);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = true;
      break;
    }
    char chunk[4096];
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reason.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return fmt::format("loading it did not finish within {} s", kProbeTimeoutMilliseconds / 1000);
  if (WIFSIGNALED(status))
    return fmt::format("loading it crashed the process with {} (a truncated or corrupt file, or a library "
                       "constructor or describe_json that faults)", probe_signal_text(WTERMSIG(status)));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 1 && !reason.empty()) return reason;
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return fmt::format("loading it ended the process with exit status {} (a library constructor or its entry "
                       "point called exit)", WEXITSTATUS(status));
  return {};
}

// Why a directory entry that looks like a plugin cannot be one, or "" for a regular file.
std::string not_a_file(const fs::directory_entry& entry) {
  std::error_code ec;
  const auto status = entry.status(ec);
  if (ec) return fmt::format("cannot be read: {}", ec.message());  // a dangling link, a link loop
  if (fs::is_regular_file(status)) return {};
  if (fs::is_directory(status)) return "is a directory";
  return "is not a regular file (a FIFO, socket or device)";
}

}  // namespace

void PluginRegistry::discover(const std::vector<fs::path>& dirs) {
  for (const auto& dir : dirs) {
    std::error_code ec;
    const auto status = fs::status(dir, ec);
    if (!fs::is_directory(status)) {
      unusable_.push_back({dir, !fs::exists(status) ? std::string("does not exist")
                                : ec ? ec.message() : std::string("is not a directory")});
      continue;
    }
    std::vector<fs::path> files;
    fs::directory_iterator it(dir, ec);
    if (ec) {
      unusable_.push_back({dir, fmt::format("cannot be read: {}", ec.message())});
      continue;
    }
    searched_.push_back(dir);
    for (const auto& entry : it) {
      if (!looks_like_shared_object(entry.path())) continue;
      if (std::string why = not_a_file(entry); !why.empty()) {
        broken_.push_back({entry.path(), why});
        continue;
      }
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (std::string why = probe_in_child(f); !why.empty()) {
        broken_.push_back({f, std::move(why)});
        continue;
      }
      BrokenPlugin b;
      auto p = load_plugin(f, &b);
      if (!p) {
        broken_.push_back(std::move(b));
        continue;
      }
      if (auto existing = find(p->name)) {
        broken_.push_back({f, fmt::format("plugin '{}' is shadowed by {} (found earlier in the search path)",
                                          p->name, existing->path.string())});
        continue;
      }
      plugins_.push_back(std::move(p));
    }
  }
}

std::shared_ptr<LoadedPlugin> PluginRegistry::find(const std::string& name) const {
  for (const auto& p : plugins_)
    if (p->name == name) return p;
  return nullptr;
}

std::vector<std::string> PluginRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& p : plugins_) out.push_back(p->name);
  return out;
}

std::vector<fs::path> plugin_search_path(const std::vector<std::string>& plugin_dirs, const fs::path& exe_dir) {
  std::vector<fs::path> out;
  for (const auto& d : plugin_dirs) out.emplace_back(d);
  if (const char* env = std::getenv("BENCHHOST_PLUGIN_PATH")) {
    std::string s = env;
    std::size_t start = 0;
    while (start <= s.size()) {
      auto colon = s.find(':', start);
      std::string part = s.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!part.empty()) out.emplace_back(part);
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  out.push_back(exe_dir / "plugins");
  return out;
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return fs::current_path();
  return exe.parent_path();
}

// ---- WorkloadInstance ---------------------------------------------------------------------------

namespace {
// The plugin's message, read only within the buffer: a plugin that filled it without a
// terminating NUL must not make the host read past it.
std::string message_of(const bh_error& err) {
  return std::string(err.message, ::strnlen(err.message, BH_ERROR_MESSAGE_CAPACITY));
}
[[noreturn]] void raise(const LoadedPlugin& p, const char* slot, bh_status st, const bh_error& err) {
  std::string msg = err.message[0] ? message_of(err) : std::string("(no message)");
  throw PluginError(st, fmt::format("{}.{}: {}", p.name, slot, msg), __FILE__, __LINE__);
}
void check(const LoadedPlugin& p, const char* slot, bh_status st, const bh_error& err) {
  if (st != BH_STATUS_OK) raise(p, slot, st, err);
}
}  // namespace

WorkloadInstance::WorkloadInstance(std::shared_ptr<LoadedPlugin> plugin) : plugin_(std::move(plugin)) {
  bh_error err{};
  check(*plugin_, "create", plugin_->descriptor.create(&handle_, &err), err);
  if (!handle_) throw PluginError(BH_STATUS_FAILED, plugin_->name + ".create returned no instance", __FILE__, __LINE__);
}

WorkloadInstance::~WorkloadInstance() {
  try {
    teardown();
  } catch (...) {
  }
  if (handle_) plugin_->descriptor.destroy(handle_);
}

std::string WorkloadInstance::check_support(const LoadedPlugin& plugin, const bh_run_context& ctx) {
  if (!plugin.descriptor.check_support) return {};
  bh_error err{};
  bh_status st = plugin.descriptor.check_support(&ctx, &err);
  if (st == BH_STATUS_OK) return {};
  if (st == BH_STATUS_UNSUPPORTED) return err.message[0] ? message_of(err) : "declined by check_support";
  raise(plugin, "check_support", st, err);
}

bh_run_info WorkloadInstance::setup(const bh_run_context& ctx) {
  bh_run_info info{};
  info.struct_size = sizeof(bh_run_info);
  info.max_epochs = 1;
  bh_error err{};
  bh_status st = plugin_->descriptor.setup(handle_, &ctx, &info, &err);
  set_up_ = true;  // teardown is owed even when setup failed half-way
  check(*plugin_, "setup", st, err);
  // A field past what the plugin says it filled is "not reported" (an older minor), whatever
  // bytes it left there.
  if (!BH_STRUCT_HAS_FIELD(info.struct_size, bh_run_info, metric_target)) info.metric_target = 0;
  if (!BH_STRUCT_HAS_FIELD(info.struct_size, bh_run_info, eval_start_samples)) info.eval_start_samples = 0;
  if (!BH_STRUCT_HAS_FIELD(info.struct_size, bh_run_info, train_samples)) info.train_samples = 0;
  return info;
}

void WorkloadInstance::begin_epoch(std::int64_t epoch) {
  if (!plugin_->descriptor.begin_epoch) return;
  bh_error err{};
  check(*plugin_, "begin_epoch", plugin_->descriptor.begin_epoch(handle_, epoch, &err), err);
}

void WorkloadInstance::prepare_batch() {
  if (!plugin_->descriptor.prepare_batch) return;
  bh_error err{};
  check(*plugin_, "prepare_batch", plugin_->descriptor.prepare_batch(handle_, &err), err);
}

void clear_fields_beyond_struct_size(bh_step_result& r) {
  // The host zero-fills before the call, so this matters only for a plugin that wrote past the
  // size it declared; reading exactly what struct_size covers keeps the rule simple to state.
  if (!BH_STRUCT_HAS_FIELD(r.struct_size, bh_step_result, loss_scale)) r.loss_scale = 0;
  if (!BH_STRUCT_HAS_FIELD(r.struct_size, bh_step_result, update_skipped)) r.update_skipped = 0;
}

bh_step_result WorkloadInstance::train_step() {
  bh_step_result r{};
  r.struct_size = sizeof(r);
  bh_error err{};
  check(*plugin_, "train_step", plugin_->descriptor.train_step(handle_, &r, &err), err);
  clear_fields_beyond_struct_size(r);
  return r;
}

void clear_fields_beyond_struct_size(bh_eval_result& r) {
  // A pointer past the plugin's struct_size is never dereferenced, whatever bytes are there.
  if (!BH_STRUCT_HAS_FIELD(r.struct_size, bh_eval_result, value_json)) r.value_json = nullptr;
  if (!BH_STRUCT_HAS_FIELD(r.struct_size, bh_eval_result, target_verdict)) r.target_verdict = BH_TARGET_HOST_DECIDES;
}

Evaluation evaluation_from(const std::string& plugin, const bh_eval_result& r) {
  Evaluation e;
  e.metric = r.metric;
  e.samples = r.samples;
  if (r.value_json && *r.value_json) {
    const std::string text = r.value_json;  // copied: the plugin's storage lasts until its next call
    const std::string shown = text.size() > 200 ? text.substr(0, 200) + "..." : text;
    try {
      e.value = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& error) {
      throw PluginError(BH_STATUS_FAILED,
                        fmt::format("{}.evaluate: value_json is not one JSON value ({}): '{}'; it must be MLLOG's "
                                    "eval_accuracy, a number or an object such as {{\"BBOX\": 0.38, \"SEGM\": 0.34}}",
                                    plugin, error.what(), shown),
                        __FILE__, __LINE__);
    }
    if (!e.value.is_number() && !e.value.is_object())
      throw PluginError(BH_STATUS_FAILED,
                        fmt::format("{}.evaluate: value_json '{}' is a JSON {}; MLLOG's eval_accuracy is a number or an "
                                    "object such as {{\"BBOX\": 0.38, \"SEGM\": 0.34}}",
                                    plugin, shown, e.value.type_name()),
                        __FILE__, __LINE__);
  }
  switch (r.target_verdict) {
    case BH_TARGET_HOST_DECIDES: break;
    case BH_TARGET_NOT_REACHED: e.target_reached = false; break;
    case BH_TARGET_REACHED: e.target_reached = true; break;
    default:
      throw PluginError(BH_STATUS_FAILED,
                        fmt::format("{}.evaluate: target_verdict {} is not a bh_target_verdict (0 no verdict, 1 not "
                                    "reached, 2 reached)",
                                    plugin, r.target_verdict),
                        __FILE__, __LINE__);
  }
  return e;
}

Evaluation WorkloadInstance::evaluate() {
  if (!plugin_->descriptor.evaluate)
    throw PluginError(BH_STATUS_UNSUPPORTED, plugin_->name + " has no evaluate slot (needed by --mode ttt)",
                      __FILE__, __LINE__);
  bh_eval_result r{};
  r.struct_size = sizeof(r);
  bh_error err{};
  check(*plugin_, "evaluate", plugin_->descriptor.evaluate(handle_, &r, &err), err);
  clear_fields_beyond_struct_size(r);
  return evaluation_from(plugin_->name, r);
}

bh_step_result WorkloadInstance::infer_step() {
  if (!plugin_->descriptor.infer_step)
    throw PluginError(BH_STATUS_UNSUPPORTED, plugin_->name + " has no infer_step slot (needed by --mode infer)",
                      __FILE__, __LINE__);
  bh_step_result r{};
  r.struct_size = sizeof(r);
  bh_error err{};
  check(*plugin_, "infer_step", plugin_->descriptor.infer_step(handle_, &r, &err), err);
  clear_fields_beyond_struct_size(r);
  return r;
}

void WorkloadInstance::synchronize() {
  if (!plugin_->descriptor.synchronize) return;
  bh_error err{};
  check(*plugin_, "synchronize", plugin_->descriptor.synchronize(handle_, &err), err);
}

std::string WorkloadInstance::hyperparameters_json() {
  if (!plugin_->descriptor.hyperparameters_json) return "{}";
  const char* s = plugin_->descriptor.hyperparameters_json(handle_);
  return s ? std::string(s) : std::string("{}");
}

void WorkloadInstance::teardown() {
  if (!set_up_) return;
  set_up_ = false;
  if (!plugin_->descriptor.teardown) return;
  bh_error err{};
  check(*plugin_, "teardown", plugin_->descriptor.teardown(handle_, &err), err);
}

}  // namespace benchhost::host
