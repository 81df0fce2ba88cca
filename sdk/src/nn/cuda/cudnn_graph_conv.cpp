// Convolutions through cuDNN's graph (backend) API (Note [cuDNN graph convolutions] in
// cudnn_graph_conv.hpp).

#include "nn/cuda/cudnn_graph_conv.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "nn/cuda/cudnn_common.hpp"

namespace benchhost::nn::cuda::graph {
namespace {

constexpr int kMaxCandidates = 8;
constexpr std::int64_t kAlignment = 16;
constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3;

// An owned backend descriptor. `ok` records whether every step that built it succeeded: building
// a plan stops at the first failed call, which only means "this engine cannot run this problem".
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    if (cudnnBackendCreateDescriptor(type, &d) != CUDNN_STATUS_SUCCESS) d = nullptr;
  }
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};

bool set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
         cudnnBackendAttributeType_t type, std::int64_t count, const void* value) {
  return d && cudnnBackendSetAttribute(d, name, type, count, value) == CUDNN_STATUS_SUCCESS;
}
bool set_i64s(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
              const std::vector<std::int64_t>& v) {
  return set(d, name, CUDNN_TYPE_INT64, static_cast<std::int64_t>(v.size()), v.data());
}
bool set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
              cudnnBackendDescriptor_t value) {
  return set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}
bool finalize(cudnnBackendDescriptor_t d) {
  return d && cudnnBackendFinalize(d) == CUDNN_STATUS_SUCCESS;
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

bool make_tensor(Desc& t, std::int64_t uid, cudnnDataType_t type,
                 const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides) {
  return set(t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type) &&
         set_i64s(t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, dims) &&
         set_i64s(t.d, CUDNN_ATTR_TENSOR_STRIDES, strides) &&
         set(t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) &&
         set(t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment) &&
         finalize(t.d);
}

// The operation graph of a problem, and the descriptors it refers to.
struct OpGraph {
  Desc x{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, w{CUDNN_BACKEND_TENSOR_DESCRIPTOR},
      y{CUDNN_BACKEND_TENSOR_DESCRIPTOR};
  Desc conv{CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR};
  std::unique_ptr<Desc> op;
  Desc graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
};

// The chosen execution plan of one problem on one handle, with every descriptor it was built
// from (kept alive as long as the plan, whatever cuDNN copies at finalisation).
struct Plan {
  std::shared_ptr<OpGraph> graph;
  std::unique_ptr<Desc> heuristics;
  std::vector<std::unique_ptr<Desc>> configs;
  std::unique_ptr<Desc> plan;  // null: the graph API has none, use the legacy API
  std::int64_t workspace_bytes = 0;
};

bool build_graph(const ConvProblem& p, cudnnHandle_t h, OpGraph& g) {
  const cudnnDataType_t type = data_type(p.dtype), comp = CUDNN_DATA_FLOAT;
  if (!make_tensor(g.x, kUidX, type, p.x_dims, p.x_strides) ||
      !make_tensor(g.w, kUidW, type, p.w_dims, p.w_strides) ||
      !make_tensor(g.y, kUidY, type, p.y_dims, p.y_strides))
    return false;
  const auto spatial = static_cast<std::int64_t>(p.pad.size());
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  if (!set(g.conv.d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
      !set(g.conv.d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
      !set(g.conv.d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial) ||
      !set_i64s(g.conv.d, CUDNN_ATTR_CONVOLUTION_DILATIONS, p.dilation) ||
      !set_i64s(g.conv.d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, p.stride) ||
      !set_i64s(g.conv.d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, p.pad) ||
      !set_i64s(g.conv.d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, p.pad) || !finalize(g.conv.d))
    return false;
  // The operation's descriptor type and its attributes: alpha, beta, conv, then x, w, y in the
  // roles of ConvProblem (dx / dw where they are the output).
  struct OpAttrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  };
  static constexpr OpAttrs kOps[] = {
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
      {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY},
  };
  const OpAttrs& a = kOps[static_cast<int>(p.kind)];
  const float alpha = 1.0f, beta = 0.0f;
  g.op = std::make_unique<Desc>(a.type);
  const bool ok = set(g.op->d, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha) &&
                  set(g.op->d, a.beta, CUDNN_TYPE_FLOAT, 1, &beta) && set_desc(g.op->d, a.conv, g.conv.d) &&
                  set_desc(g.op->d, a.x, g.x.d) && set_desc(g.op->d, a.w, g.w.d) && set_desc(g.op->d, a.y, g.y.d);
  if (!ok || !finalize(g.op->d)) return false;
  cudnnBackendDescriptor_t ops = g.op->d;
  return set(g.graph.d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ops) &&
         set(g.graph.d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) &&
         finalize(g.graph.d);
}

// BENCHHOST_CUDNN_GRAPH_VERBOSE=1: every candidate of every problem on stderr (engine, numerical
// notes, workspace, time, or why it was passed over).
bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("BENCHHOST_CUDNN_GRAPH_VERBOSE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// An engine configuration's engine index and numerical notes (as "note,note").
struct EngineInfo {
  std::int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  bool known = false;
  std::string notes_str() const { return fmt::format("{}", fmt::join(notes, "+")); }
};

EngineInfo engine_info(cudnnBackendDescriptor_t cfg) {
  EngineInfo info;
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  std::int64_t n = 0;
  if (!engine.d || cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                            &engine.d) != CUDNN_STATUS_SUCCESS)
    return info;
  cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                           &info.index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  std::int64_t count = 0;
  if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count,
                               notes) != CUDNN_STATUS_SUCCESS)
    return info;
  info.notes.assign(notes, notes + count);
  info.known = true;
  return info;
}

// Whether an engine keeps the ops' precision contract (Note [cuDNN graph convolutions]).
bool allowed(const EngineInfo& e, const ConvProblem& p) {
  if (!e.known) return false;
  const bool f32 = p.dtype == DType::f32;
  for (cudnnBackendNumericalNote_t note : e.notes) {
    if (note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return false;
    if (f32 && note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (f32 && !p.tf32 && note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return false;
  }
  return true;
}

std::int64_t elements(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& strides) {
  std::int64_t span = 1;  // the largest offset + 1
  for (std::size_t i = 0; i < dims.size(); ++i) span += (dims[i] - 1) * strides[i];
  return span;
}

Tensor scratch(std::int64_t bytes, Device device) {
  return Tensor::empty({std::max<std::int64_t>(bytes, 1)}, DType::u8, device);
}

bool execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, void* x, void* w, void* y, void* ws) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const std::int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {x, w, y};
  return set(pack.d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids) &&
         set(pack.d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs) &&
         set(pack.d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) &&
         finalize(pack.d) && cudnnBackendExecute(h, plan, pack.d) == CUDNN_STATUS_SUCCESS;
}

std::string key_of(const ConvProblem& p, cudnnHandle_t h) {
  auto list = [](const std::vector<std::int64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); };
  return fmt::format("{}|{}|{}|x{}/{}|w{}/{}|y{}/{}|p{}|s{}|d{}|h{}", static_cast<int>(p.kind),
                     dtype_name(p.dtype), p.tf32 ? 1 : 0, list(p.x_dims), list(p.x_strides),
                     list(p.w_dims), list(p.w_strides), list(p.y_dims), list(p.y_strides),
                     list(p.pad), list(p.stride), list(p.dilation), static_cast<const void*>(h));
}

// Autotuning (Note [cuDNN graph convolutions]): the fastest of the heuristics' first allowed
// configurations that finalise and run, timed on scratch buffers.
Plan choose(const ConvProblem& p, cudnnHandle_t h, Device device) {
  Plan best;
  best.graph = std::make_shared<OpGraph>();
  if (!build_graph(p, h, *best.graph)) return {};
  best.heuristics = std::make_unique<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  Desc& heur = *best.heuristics;
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  if (!set_desc(heur.d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, best.graph->graph.d) ||
      !set(heur.d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) || !finalize(heur.d))
    return {};
  std::int64_t available = 0;
  if (cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               0, &available, nullptr) != CUDNN_STATUS_SUCCESS ||
      available <= 0)
    return {};
  std::vector<std::unique_ptr<Desc>>& cfgs = best.configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < available; ++i) {
    cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    if (!cfgs.back()->d) return {};
    raw.push_back(cfgs.back()->d);
  }
  std::int64_t returned = 0;
  if (cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               available, &returned, raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};

  const std::int64_t esize = static_cast<std::int64_t>(dtype_size(p.dtype));
  const Tensor x = scratch(elements(p.x_dims, p.x_strides) * esize, device),
               w = scratch(elements(p.w_dims, p.w_strides) * esize, device),
               y = scratch(elements(p.y_dims, p.y_strides) * esize, device);
  cudaEvent_t start = nullptr, stop = nullptr;
  BH_CHECK_CUDA(cudaEventCreate(&start));
  BH_CHECK_CUDA(cudaEventCreate(&stop));
  float best_ms = std::numeric_limits<float>::infinity();
  int tried = 0;
  const std::string what = verbose() ? key_of(p, h) : std::string();
  auto say = [&](const EngineInfo& e, const std::string& outcome) {
    if (verbose())
      std::fprintf(stderr, "benchhost_cudnn_graph,%s,engine %lld,notes %s,%s\n", what.c_str(),
                   static_cast<long long>(e.index), e.notes_str().c_str(), outcome.c_str());
  };
  for (std::int64_t i = 0; i < returned && tried < kMaxCandidates; ++i) {
    const EngineInfo info = engine_info(raw[static_cast<std::size_t>(i)]);
    if (!allowed(info, p)) {
      say(info, "skipped: numerical notes");
      continue;
    }
    auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnnBackendDescriptor_t cfg = raw[static_cast<std::size_t>(i)];
    if (!set(plan->d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
        !set(plan->d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &cfg) ||
        !finalize(plan->d)) {
      say(info, "does not finalise");
      continue;
    }
    std::int64_t ws_bytes = 0, n = 0;
    if (cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &n, &ws_bytes) != CUDNN_STATUS_SUCCESS)
      continue;
    Tensor ws;
    try {
      ws = ws_bytes > 0 ? scratch(ws_bytes, device) : Tensor();
    } catch (const OutOfMemory&) {
      say(info, fmt::format("workspace of {} bytes does not fit", ws_bytes));
      continue;  // a workspace this large does not fit next to the run's tensors
    }
    void* wsp = ws.defined() ? ws.raw_data() : nullptr;
    ++tried;
    auto timed = [&](int reps) -> float {
      BH_CHECK_CUDA(cudaEventRecord(start, op_stream()));
      for (int r = 0; r < reps; ++r)
        if (!execute(h, plan->d, x.raw_data(), w.raw_data(), y.raw_data(), wsp)) return -1.0f;
      BH_CHECK_CUDA(cudaEventRecord(stop, op_stream()));
      BH_CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0.0f;
      BH_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      return ms / static_cast<float>(reps);
    };
    // A warm-up (its first launch loads the kernel's module: milliseconds), then a probe, then,
    // unless the probe is already 3x the best, two timed runs.
    float ms = timed(1);
    if (ms >= 0.0f) ms = timed(1);
    if (ms < 0.0f) {
      cudaGetLastError();
      say(info, "execution failed");
      continue;
    }
    if (ms < 3.0f * best_ms) ms = timed(2);
    say(info, fmt::format("workspace {} bytes, {:.4f} ms", ws_bytes, ms));
    if (ms >= 0.0f && ms < best_ms) {
      best_ms = ms;
      best.plan = std::move(plan);
      best.workspace_bytes = ws_bytes;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!best.plan) return {};
  return best;
}


}  // namespace

std::vector<std::int64_t> channels_last_strides(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> s(dims.size());
  std::int64_t acc = dims[1];
  s[1] = 1;
  for (std::size_t i = dims.size(); i-- > 2;) {
    s[i] = acc;
    acc *= dims[i];
  }
  s[0] = acc;
  return s;
}

bool enabled_for(DType dtype) {
  static const int mode = [] {  // 0 off, 1 half, 2 all
    const char* v = std::getenv("BENCHHOST_CUDNN_GRAPH");
    if (!v || !*v || std::strcmp(v, "half") == 0) return 1;
    if (std::strcmp(v, "all") == 0) return 2;
    if (std::strcmp(v, "off") == 0) return 0;
    BH_THROW(InvalidArgument, "BENCHHOST_CUDNN_GRAPH={} is not one of half, all, off", v);
  }();
  return mode == 2 || (mode == 1 && (dtype == DType::f16 || dtype == DType::bf16));
}

bool run(const ConvProblem& p, cudnnHandle_t handle, Device device, void* x, void* w, void* y) {
  for (const void* ptr : {x, w, y})
    if (reinterpret_cast<std::uintptr_t>(ptr) % kAlignment != 0) return false;
  static std::mutex mutex;
  static std::unordered_map<std::string, Plan> plans;
  const Plan* plan = nullptr;
  {
    const std::string key = key_of(p, handle);
    std::lock_guard<std::mutex> lock(mutex);
    auto it = plans.find(key);
    if (it == plans.end()) {
      it = plans.emplace(key, choose(p, handle, device)).first;
      if (!it->second.plan) {
        static bool told = false;
        if (!told)
          std::fprintf(stderr,
                       "benchhost: cuDNN's graph API has no plan for a %s convolution (%s); the "
                       "legacy API runs it (Note [cuDNN graph convolutions])\n",
                       dtype_name(p.dtype), key.c_str());
        told = true;
      }
    }
    plan = &it->second;  // unordered_map nodes are stable
  }
  if (!plan->plan) return false;
  const Tensor ws = plan->workspace_bytes > 0 ? scratch(plan->workspace_bytes, device) : Tensor();
  BH_CHECK(execute(handle, plan->plan->d, x, w, y, ws.defined() ? ws.raw_data() : nullptr),
           "cuDNN graph convolution: executing the chosen plan failed ({})", key_of(p, handle));
  return true;
}

}  // namespace benchhost::nn::cuda::graph
