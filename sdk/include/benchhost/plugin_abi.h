#ifndef BENCHHOST_PLUGIN_ABI_H
#define BENCHHOST_PLUGIN_ABI_H
/* @file plugin_abi.h  The C boundary between the benchhost host and a workload plugin.
 *
 * Note [Plugin ABI]
 * A plugin is a shared library exporting one C function, BENCHHOST_PLUGIN_ENTRY_SYMBOL, that
 * returns a pointer to a static bh_plugin_descriptor. The host:
 *   1. rejects the plugin if abi_major differs from its own or abi_minor is newer than its own,
 *      naming both versions;
 *   2. copies min(struct_size, sizeof(bh_plugin_descriptor)) bytes, so older plugins (smaller
 *      structs) keep working when later minors append slots, and zero-fills the rest;
 *   3. checks that every required slot is set.
 * Rules for growing the ABI: new slots and fields are only ever appended (minor + 1); removing or
 * reordering anything is a new major. Structs passed the other way (context, results) also start
 * with struct_size so both sides can tell what the other knows.
 *
 * Nothing here throws: C++ exceptions are caught by the trampolines that BENCHHOST_PLUGIN
 * (workload.hpp) generates and returned as a bh_status plus a message in bh_error.
 * Plugin authors never fill this struct by hand; they write a benchhost::Workload subclass.
 *
 * Threading: the host calls every slot of one workload instance from one thread, in lifecycle
 * order: describe_json (any time, no instance) -> check_support -> create -> setup ->
 * [begin_epoch, prepare_batch, train_step, evaluate, infer_step, synchronize]* -> teardown ->
 * destroy. Units: samples are counted per rank; the plugin never measures time.
 */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCHHOST_ABI_MAJOR 1
/* History: 1.0 first release; 1.1 appended bh_run_info.metric_target; 1.2 appended
 * bh_step_result.loss_scale and update_skipped (mixed-precision step outcomes); 1.3 appended
 * bh_run_info.eval_start_samples (no evaluation before a given point, e.g. 3D U-Net's epoch 1000)
 * and bh_run_info.train_samples (the MLLOG's train_samples when it is not an epoch's samples);
 * 1.4 appended bh_eval_result.value_json and target_verdict (an MLLOG eval_accuracy that is not one
 * number, e.g. Mask R-CNN's {"BBOX": b, "SEGM": s}, and the workload's verdict on a multi-part
 * target). */
#define BENCHHOST_ABI_MINOR 4
#define BENCHHOST_PLUGIN_ENTRY_SYMBOL "benchhost_plugin_descriptor"

/* Nonzero when a struct whose struct_size (in bytes) is `size` contains `field` of `type` whole:
 * the reader of a struct filled by the other side, and the writer of a struct whose size the other
 * side set, touch a field appended by a later minor only when this holds. */
#define BH_STRUCT_HAS_FIELD(size, type, field) \
  ((size_t)(size) >= offsetof(type, field) + sizeof(((type*)0)->field))

typedef enum bh_status {
  BH_STATUS_OK = 0,
  BH_STATUS_INVALID_ARGUMENT = 1, /* bad option or configuration -> INVALID_ARGUMENTS */
  BH_STATUS_UNSUPPORTED = 2,      /* cannot run here (no GPU, precision) -> SKIPPED */
  BH_STATUS_OUT_OF_MEMORY = 3,    /* -> OOM */
  BH_STATUS_DIVERGED = 4,         /* NaN/Inf loss -> DIVERGED */
  BH_STATUS_DATA_ERROR = 5,       /* missing/corrupt dataset file -> FAILED with the file named */
  BH_STATUS_COMM_ERROR = 6,       /* collective timeout or a failed peer rank -> FAILED */
  BH_STATUS_FAILED = 7            /* anything else -> FAILED */
} bh_status;

/* Filled by the plugin when a slot returns a status other than BH_STATUS_OK. */
#define BH_ERROR_MESSAGE_CAPACITY 4096
typedef struct bh_error {
  char message[BH_ERROR_MESSAGE_CAPACITY]; /* NUL-terminated, truncated if longer */
} bh_error;

typedef struct bh_workload bh_workload; /* opaque plugin-side instance */

/* What the host hands to check_support and setup. Strings are owned by the host and valid
 * until teardown returns. */
typedef struct bh_run_context {
  uint32_t struct_size;
  const char* mode;         /* "ttt", "train", "infer" or "loader" */
  const char* device;       /* "cpu", "cuda:N" */
  const char* precision;    /* "fp32", "tf32", "fp16", "bf16", "fp8" */
  uint64_t seed;
  int64_t batch_size;       /* per rank, in samples; 0 = the workload's configured default */
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;
  int32_t num_threads;      /* CPU threads the workload may use (data pipeline and ops) */
  int32_t synthetic_data;   /* 1: use the synthetic source of the same shapes (no storage) */
  const char* options_json; /* {"hidden-size": "256", ...}: the plugin's own options, without
                               the "<plugin>." prefix, values as given (strings) */
  const char* config_dir;   /* directory of the config file in use ("" if none): relative data
                               paths in options are resolved by the plugin against the CWD */
  void* communicator;       /* benchhost::Communicator* owned by the host, valid until teardown */
} bh_run_context;

/* Filled by setup. */
typedef struct bh_run_info {
  uint32_t struct_size;
  int64_t samples_per_epoch;     /* training samples in one epoch (all ranks together) */
  int64_t eval_every_samples;    /* evaluate after this many training samples; 0 = each epoch */
  int64_t global_batch_size;     /* samples per optimizer step, all ranks together */
  int64_t max_epochs;            /* time-to-train gives up (aborted) after this many epochs */
  double train_flops_per_sample; /* forward+backward FLOPs per training sample (0 = unknown) */
  double infer_flops_per_sample; /* forward FLOPs per inference sample (0 = unknown) */
  int64_t eval_samples;          /* samples in one evaluation (for reports; 0 = unknown) */
  /* Since ABI 1.1 (present when struct_size covers it; hosts zero-fill the struct):
     the time-to-train target of this configuration, overriding describe()'s metric_target when
     nonzero (a mini config's calibrated target). */
  double metric_target;
  /* Since ABI 1.3: time-to-train evaluates only once this many training samples (all ranks) have
     been seen; the evaluation points are still the multiples of eval_every_samples (or the epoch
     ends). 0 = from the first evaluation point. */
  int64_t eval_start_samples;
  /* Since ABI 1.3: the value MLLOG's train_samples carries, when the benchmark counts it otherwise
     than samples_per_epoch (3D U-Net: the 168 training cases, while an epoch at a global batch of
     32 trains 160 of them). 0 = samples_per_epoch. */
  int64_t train_samples;
} bh_run_info;

/* Filled by train_step and infer_step. The host zero-fills the struct and sets struct_size to its
 * own sizeof; the plugin writes only the fields that size covers, then sets struct_size to the
 * size it filled (its own sizeof, or the host's when that is smaller). The host reads only the
 * fields that the returned struct_size covers: a 1.0/1.1 plugin returns a size that ends at loss,
 * so its steps read as loss_scale 0 and update_skipped 0 (no loss scaling reported). */
typedef struct bh_step_result {
  uint32_t struct_size;
  int64_t samples; /* samples this rank consumed in this step */
  double loss;     /* training loss of the step (NaN if not computed, e.g. inference) */
  /* Since ABI 1.2 (present when struct_size covers them; hosts zero-fill the struct): */
  double loss_scale;      /* dynamic loss scale in use after this step (fp16); 0 = no loss scaling */
  int32_t update_skipped; /* 1: this step's optimizer update was skipped (non-finite gradients under
                             loss scaling); its samples still count as consumed */
} bh_step_result;

/* bh_eval_result.target_verdict (since ABI 1.4). Zero, what an older plugin leaves, is "no verdict". */
typedef enum bh_target_verdict {
  BH_TARGET_HOST_DECIDES = 0, /* no verdict: the host compares metric with the target */
  BH_TARGET_NOT_REACHED = 1,  /* the workload says this evaluation does not reach its target */
  BH_TARGET_REACHED = 2       /* the workload says it does: time-to-train stops here */
} bh_target_verdict;

/* Filled by evaluate, by the rules of bh_step_result: the host zero-fills the struct and sets
 * struct_size to its own sizeof; the plugin writes only the fields that size covers and sets
 * struct_size to the size it filled. A 1.0-1.3 plugin returns a size that ends at samples: its
 * evaluations read as value_json NULL and target_verdict BH_TARGET_HOST_DECIDES. */
typedef struct bh_eval_result {
  uint32_t struct_size;
  double metric;   /* the metric named by describe_json (already reduced across ranks); what the
                      reports, tables and CSV show, and what the host compares with the target
                      when there is no verdict */
  int64_t samples; /* evaluation samples used (all ranks) */
  /* Since ABI 1.4 (present when struct_size covers them; hosts zero-fill the struct): */
  /* MLLOG's eval_accuracy value as JSON text, when it is not `metric` alone: Mask R-CNN logs
   * {"BBOX": 0.381, "SEGM": 0.342} (and puts BBOX in metric). NULL or "": eval_accuracy is metric.
   * Owned by the plugin: valid until the plugin's next call into the same instance (any slot,
   * destroy included); the host copies it before it calls anything else. Text that is not one
   * JSON number or object fails the run (FAILED, naming the plugin). */
  const char* value_json;
  /* A bh_target_verdict: the workload's own decision whether this evaluation reaches the quality
   * target (a target of several parts, which metric alone cannot express). The host then takes it
   * instead of comparing metric with the target. Any other value fails the run. */
  int32_t target_verdict;
} bh_eval_result;

typedef struct bh_plugin_descriptor {
  uint32_t abi_major;
  uint32_t abi_minor;
  uint32_t struct_size; /* sizeof(bh_plugin_descriptor) as the plugin was compiled */
  const char* name;     /* "bert" */
  const char* version;  /* "1.0.0" */

  /* Static description as JSON (see docs/plugin-abi.md). Never constructs a workload.
   * The string is owned by the plugin and valid while it is loaded. Required. */
  const char* (*describe_json)(void);
  /* (optional) BH_STATUS_UNSUPPORTED with the reason when this context cannot run here. */
  bh_status (*check_support)(const bh_run_context* ctx, bh_error* err);
  /* Required: construct / destroy an instance. */
  bh_status (*create)(bh_workload** out, bh_error* err);
  void (*destroy)(bh_workload* w);
  /* Required: build model, optimizer and data pipeline. Untimed (MLPerf init). */
  bh_status (*setup)(bh_workload* w, const bh_run_context* ctx, bh_run_info* info, bh_error* err);
  /* (optional) called before the first step of each training epoch (0-based). */
  bh_status (*begin_epoch)(bh_workload* w, int64_t epoch, bh_error* err);
  /* (optional) make the next batch ready; the host times it as data-wait time. */
  bh_status (*prepare_batch)(bh_workload* w, bh_error* err);
  /* Required: one optimizer step on the prepared (or next) batch. */
  bh_status (*train_step)(bh_workload* w, bh_step_result* out, bh_error* err);
  /* (optional; required for mode ttt) full evaluation, metric reduced across ranks. */
  bh_status (*evaluate)(bh_workload* w, bh_eval_result* out, bh_error* err);
  /* (optional; required for mode infer) one inference batch. */
  bh_status (*infer_step)(bh_workload* w, bh_step_result* out, bh_error* err);
  /* (optional) block until queued device work is done (the host's timers need it). */
  bh_status (*synchronize)(bh_workload* w, bh_error* err);
  /* (optional) MLLOG hyperparameter keys as a JSON object; valid until the next call. */
  const char* (*hyperparameters_json)(bh_workload* w);
  /* (optional) release resources before destroy. */
  bh_status (*teardown)(bh_workload* w, bh_error* err);
} bh_plugin_descriptor;

typedef const bh_plugin_descriptor* (*bh_plugin_entry_fn)(void);

/* Note [One SDK in the process]
 * The host hands a plugin SDK objects by pointer (bh_run_context.communicator is a
 * benchhost::Communicator*) and reads SDK state the plugin's ops write (the op registry's
 * promotion counts). Both are only sound when host and plugin use the same libbenchhost_sdk in
 * the process. libbenchhost_sdk exports this function; it returns the address of an object inside
 * that copy of the library. At load time the host looks the symbol up through the plugin (the
 * plugin and its dependencies) and compares the answer with its own:
 *   - the same address: the plugin shares the host's SDK; it gets the communicator;
 *   - another address: the plugin carries its own copy of the SDK (linked statically, or a second
 *     libbenchhost_sdk.so): it is refused, listed as broken with the reason;
 *   - no such symbol: the plugin does not use the SDK library (a hand-written C plugin); it loads,
 *     and its context's communicator is NULL.
 * Not part of a plugin's descriptor: plugins never call it. */
#define BENCHHOST_SDK_IDENTITY_SYMBOL "benchhost_sdk_identity"
const void* benchhost_sdk_identity(void);

#ifdef __cplusplus
}
#endif
#endif /* BENCHHOST_PLUGIN_ABI_H */
