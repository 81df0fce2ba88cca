#pragma once
/// @file nn/registry.hpp  The op registry: per op, an ordered list of implementations.
///
/// Note [Op registry]
/// Every nn op (layernorm_forward, matmul, sdpa_backward, ...) has one OpDef in a process-wide
/// registry, keyed by name. An OpDef holds an ordered list of implementations (OpImpl), like
/// oneDNN's cpu_*_list.cpp: a call is dispatched to the first implementation whose device type
/// matches the inputs' device and whose accepts() says yes; the plain-loop reference
/// implementation is last. Each refusal carries a reason; with BENCHHOST_VERBOSE_OPS=1 in the
/// environment, dispatch prints the refusals and the winner to stderr (oneDNN's ONEDNN_VERBOSE).
///
/// Adding a CUDA implementation of an op is one more register_op_impl() call, from a file in
/// sdk/src/nn/cuda/, with device DeviceType::cuda; nothing central changes. Adding a new op is
/// one register_op() call (its doc, its example case generator and its parity tolerance) plus
/// its implementations; the parity test (tests/nn_ops/parity_test.cpp) then picks it up by
/// walking the registry: every implementation on every available device is compared with the
/// reference implementation on the CPU on the op's example cases.
///
/// Calling convention: an OpCall holds input tensors, output tensors (allocated by the caller,
/// with the right shape, dtype and device, contiguous unless the op says otherwise) and named
/// attributes. Implementations write the outputs (overwrite, or accumulate where the op's doc
/// says "+="); they never resize them. The Tensor-level functions in nn/ops.hpp build the calls;
/// plugins normally use those and never touch the registry.
///
/// Note [Half-precision promotion]
/// Mixed-precision runs hand ops f16/bf16 activations (precision.hpp), and a call may mix them
/// with f32 tensors (bf16 activations, f32 master-weight gradients). An implementation takes such
/// a call only if its accepts() exists and says yes: an accepts() is where an implementation
/// states which dtypes it handles, so one without it (the plain references) is never offered
/// f16/bf16 tensors. When no implementation takes a call that holds f16/bf16 tensors, dispatch
/// promotes it: every f16/bf16 tensor gets an f32 copy (outputs too, so "+=" outputs keep their
/// values), the f32 call is dispatched as usual, and each f16/bf16 output receives its f32
/// result rounded once (op "cast"). That is exactly the numerics of compute in f32, store in the
/// half type, the policy's rule for every op class but the tensor-core ones; it costs a
/// conversion pass per tensor, so the ops that matter for speed get native half-precision
/// implementations (oneDNN bf16 matmul and convolution on the CPU, cuBLASLt/cuDNN on CUDA).
/// BENCHHOST_VERBOSE_OPS=1 prints each promotion. "cast" itself is never promoted.
/// BENCHHOST_OP_TIMES=1 ranks the ops of a run by device time (Note [Op times] in registry.cpp).
///
/// Threading: registration happens during static initialisation (or under the registry's mutex
/// later); dispatch is thread-safe once registration is over. Implementations may use oneTBB or
/// OpenMP (oneDNN) internally; see benchhost/threading.hpp.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn {

/// Named scalar and integer-list attributes of an op call (eps, p, dims, ...).
/// Integers are stored as doubles (exact up to 2^53).
class Attrs {
 public:
  Attrs& set(std::string name, double value);
  Attrs& set_ints(std::string name, std::vector<std::int64_t> values);
  bool has(std::string_view name) const;
  /// The value, or `fallback` when absent.
  double get(std::string_view name, double fallback) const;
  /// The value; throws InvalidArgument naming the op attribute when absent.
  double get(std::string_view name) const;
  std::int64_t get_int(std::string_view name, std::int64_t fallback) const {
    return static_cast<std::int64_t>(get(name, static_cast<double>(fallback)));
  }
  bool get_bool(std::string_view name, bool fallback = false) const {
    return get(name, fallback ? 1.0 : 0.0) != 0.0;
  }
  /// Integer list; empty when absent.
  const std::vector<std::int64_t>& get_ints(std::string_view name) const;
  /// "eps=1e-05, causal=1, dims=[0, 2]"
  std::string str() const;

 private:
  std::vector<std::pair<std::string, double>> scalars_;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> lists_;
};

/// One op invocation. Undefined tensors (Tensor{}) stand for absent optional inputs/outputs.
struct OpCall {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  Attrs attrs;
};

/// One implementation of an op.
struct OpImpl {
  std::string name;            ///< "cpu.onednn", "cpu.tbb", "cpu.ref", "cuda.cublaslt", ...
  DeviceType device = DeviceType::cpu;
  /// Higher runs first. Convention: 100 vendor library, 50 our optimised code, 0 reference.
  int priority = 0;
  /// Empty string: accepted. Otherwise the reason for refusing (e.g. "needs f32 inputs").
  /// (optional: null accepts every call without f16/bf16 tensors, Note [Half-precision promotion])
  std::function<std::string(const OpCall&)> accepts;
  /// Compute. Throws benchhost errors on bad input.
  std::function<void(OpCall&)> run;
  /// True for the plain reference (the parity baseline). Exactly one per op, on the CPU.
  bool is_reference = false;
};

/// How to build example calls for the parity test: a few small calls on the CPU, inputs filled
/// with seeded random values, outputs allocated. Accumulating outputs ("+=") must be zero-filled
/// or filled with values the parity test can copy to each device.
using OpCaseMaker = std::function<std::vector<OpCall>(std::uint64_t seed)>;

/// An op: its name, documentation, implementations and test cases.
struct OpDef {
  std::string name;
  std::string doc;             ///< one line: inputs, outputs, attributes
  OpCaseMaker make_cases;      ///< (optional) examples for the parity walk
  double atol = 1e-4;          ///< parity tolerance: |x - ref| <= atol + rtol * |ref|
  double rtol = 1e-4;
  std::vector<OpImpl> impls;   ///< sorted by priority, highest first
};

/// The process-wide registry.
class OpRegistry {
 public:
  static OpRegistry& instance();

  /// Declare an op. Registering the same name twice merges: the later doc/cases fill gaps.
  void register_op(OpDef def);
  /// Add an implementation to op `op` (declared before or after; order does not matter).
  void register_impl(const std::string& op, OpImpl impl);

  /// The op, or nullptr.
  const OpDef* find(std::string_view op) const;
  /// The op; throws Unsupported naming the registered ops when absent.
  const OpDef& get(std::string_view op) const;
  /// All op names, sorted.
  std::vector<std::string> op_names() const;

  /// Choose the implementation for `call` on `device` (first that accepts). Throws Unsupported
  /// listing every refusal when none accepts.
  const OpImpl& select(const OpDef& def, const OpCall& call, DeviceType device) const;
  /// select() then run. The device is that of the first defined input (CPU if none). A call
  /// with f16/bf16 tensors that no implementation takes is promoted to f32
  /// (Note [Half-precision promotion]).
  void dispatch(std::string_view op, OpCall& call) const;
  /// How many calls dispatch() has promoted to f32 so far, by op name (ops never promoted are
  /// absent): where a mixed-precision run pays conversion passes for want of a native
  /// f16/bf16 implementation (Note [Half-precision promotion]). Process-wide, thread-safe.
  std::vector<std::pair<std::string, std::uint64_t>> promotion_counts() const;

 private:
  void dispatch_untimed(std::string_view op, OpCall& call) const;  // dispatch() without Note [Op times]
  OpRegistry() = default;
  /// The first implementation on `device` that takes `call`, or nullptr; appends each refusal.
  const OpImpl* try_select(const OpDef& def, const OpCall& call, DeviceType device,
                           std::string& refusals) const;
  std::vector<OpDef> ops_;
};

/// Shorthand: OpRegistry::instance().dispatch(op, call).
void dispatch(std::string_view op, OpCall& call);

/// Whether BENCHHOST_OP_TIMES counts the outermost calls dispatched from now on (Note [Op times]).
/// On until first set: the host turns it off while it builds a model and runs warm-up steps and
/// on for its timed steps, so a shape's first call, which autotunes (cuDNN plans), is not ranked
/// as that op's cost. Process-wide; does nothing without BENCHHOST_OP_TIMES.
void set_op_times_counting(bool on);

/// Static registration helpers for implementation files:
///   static const bool reg = (register_op({...}), register_op_impl("layernorm_forward", {...}), true);
inline bool register_op(OpDef def) {
  OpRegistry::instance().register_op(std::move(def));
  return true;
}
inline bool register_op_impl(const std::string& op, OpImpl impl) {
  OpRegistry::instance().register_impl(op, std::move(impl));
  return true;
}

}  // namespace benchhost::nn
