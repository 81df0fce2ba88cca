#pragma once
/// @file plugin_loader.hpp  Loading workload plugins through the C ABI (plugin_abi.h) with Boost.DLL,
/// discovering them on disk, and calling their slots from the host.
///
/// Note [Plugin lifetime]
/// A LoadedPlugin owns a shared_ptr to its boost::dll::shared_library. Every WorkloadInstance
/// created from it holds a copy of that pointer, so the library stays mapped until the last
/// object made from it (instance, descriptor copy, strings it returned) is gone; nothing is ever
/// unloaded mid-run. Descriptor strings are copied into std::string at load time.
///
/// Threading: a registry and its plugins are used from the host's main thread only.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "benchhost/plugin_abi.h"
#include "benchhost/workload.hpp"

namespace boost::dll {
class shared_library;
}

namespace benchhost::host {

/// A plugin slot returned a status other than BH_STATUS_OK.
class PluginError : public Error {
 public:
  PluginError(bh_status status, std::string message, const char* file, int line)
      : Error(std::move(message), file, line), status_(status) {}
  bh_status status() const noexcept { return status_; }

 private:
  bh_status status_;
};

/// A successfully loaded plugin: its descriptor (copied, zero-extended) and its description.
struct LoadedPlugin {
  std::filesystem::path path;
  std::shared_ptr<boost::dll::shared_library> library;
  bh_plugin_descriptor descriptor{};  ///< copy; slots the plugin did not know are null
  WorkloadInfo info;                  ///< parsed from describe_json (no workload constructed)
  std::string name;                   ///< descriptor name
  std::string version;
  std::string abi;                    ///< "major.minor" the plugin was built against
  /// The plugin uses this process's libbenchhost_sdk (Note [One SDK in the process],
  /// plugin_abi.h); false: it uses no SDK library and gets no communicator.
  bool shares_sdk = false;
};

/// A file that looked like a plugin but could not be used, and why.
struct BrokenPlugin {
  std::filesystem::path path;
  std::string reason;
};

/// Load one plugin file. Returns the plugin or fills `broken` (never throws for a bad file).
std::shared_ptr<LoadedPlugin> load_plugin(const std::filesystem::path& path, BrokenPlugin* broken);

/// Plugins found in a set of directories (see discover()).
class PluginRegistry {
 public:
  /// Scan `dirs` in order (non-recursively) for shared objects, each probed in a child process
  /// first (Note [Isolated discovery]). A later file whose plugin name is already taken is listed
  /// as broken ("shadowed by ..."); a file that is not a regular file, or crashes, exits or hangs
  /// while loading, is listed as broken with what happened. Directories that cannot be searched
  /// are listed in unusable_directories().
  void discover(const std::vector<std::filesystem::path>& dirs);
  const std::vector<std::shared_ptr<LoadedPlugin>>& plugins() const { return plugins_; }
  const std::vector<BrokenPlugin>& broken() const { return broken_; }
  const std::vector<std::filesystem::path>& searched() const { return searched_; }
  /// Directories of the search path that could not be searched, and why (missing, not a
  /// directory, unreadable).
  const std::vector<BrokenPlugin>& unusable_directories() const { return unusable_; }
  /// The plugin named `name`, or nullptr.
  std::shared_ptr<LoadedPlugin> find(const std::string& name) const;
  /// Names of every loaded plugin (for suggestions).
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<LoadedPlugin>> plugins_;
  std::vector<BrokenPlugin> broken_;
  std::vector<std::filesystem::path> searched_;
  std::vector<BrokenPlugin> unusable_;
};

/// The directories searched, in order: every --plugin-dir, then BENCHHOST_PLUGIN_PATH
/// (colon-separated), then <directory of the executable>/plugins.
std::vector<std::filesystem::path> plugin_search_path(const std::vector<std::string>& plugin_dirs,
                                                      const std::filesystem::path& exe_dir);

/// Directory of the running executable (/proc/self/exe).
std::filesystem::path executable_dir();

/// Zero the fields of a step result that its struct_size, as the plugin returned it, does not cover:
/// a plugin built against an older minor never wrote them, so they read as "not reported" (ABI 1.2
/// loss_scale and update_skipped from a 1.0/1.1 plugin). Fields of ABI 1.0 are always kept.
void clear_fields_beyond_struct_size(bh_step_result& r);

/// The same for an evaluation: value_json and target_verdict (ABI 1.4) read as "not reported" (NULL,
/// BH_TARGET_HOST_DECIDES) from a plugin whose struct_size ends before them (ABI 1.0-1.3).
void clear_fields_beyond_struct_size(bh_eval_result& r);

/// One evaluation as the host keeps it: the plugin's result with value_json copied out of the
/// plugin's storage and parsed (Note [Dictionary-valued evaluations], workload.hpp).
struct Evaluation {
  double metric = 0;
  std::int64_t samples = 0;
  /// MLLOG's eval_accuracy value: the parsed value_json (a number or an object), or null when
  /// the plugin gave none and `metric` is logged.
  nlohmann::ordered_json value;
  /// The workload's verdict on the target; nullopt: the host compares `metric` with the target.
  std::optional<bool> target_reached;
};

/// `r` as the host keeps it (call right after evaluate returned, while value_json is valid).
/// Throws PluginError (FAILED, naming `plugin` and the slot) when value_json is not one JSON number
/// or object, or target_verdict is not a bh_target_verdict.
Evaluation evaluation_from(const std::string& plugin, const bh_eval_result& r);

/// One live workload instance. Slot calls throw PluginError (with the slot named in the
/// message) when the plugin returns an error status. Destroys the instance (teardown first if
/// setup ran) on destruction; never throws from the destructor.
class WorkloadInstance {
 public:
  explicit WorkloadInstance(std::shared_ptr<LoadedPlugin> plugin);  ///< calls create
  ~WorkloadInstance();
  WorkloadInstance(const WorkloadInstance&) = delete;
  WorkloadInstance& operator=(const WorkloadInstance&) = delete;

  /// check_support: "" when the context can run here (or the slot is absent), else the reason.
  static std::string check_support(const LoadedPlugin& plugin, const bh_run_context& ctx);

  bh_run_info setup(const bh_run_context& ctx);
  void begin_epoch(std::int64_t epoch);
  bool has_prepare_batch() const { return plugin_->descriptor.prepare_batch != nullptr; }
  void prepare_batch();
  bh_step_result train_step();
  Evaluation evaluate();  ///< evaluation_from() of the slot's result
  bh_step_result infer_step();
  void synchronize();
  /// MLLOG hyperparameters as a JSON object text ("{}" when the slot is absent).
  std::string hyperparameters_json();
  void teardown();  ///< idempotent

  const LoadedPlugin& plugin() const { return *plugin_; }

 private:
  std::shared_ptr<LoadedPlugin> plugin_;
  bh_workload* handle_ = nullptr;
  bool set_up_ = false;
};

}  // namespace benchhost::host
