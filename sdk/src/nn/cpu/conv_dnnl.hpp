#pragma once
// oneDNN plumbing shared by the CPU convolution, batch norm and pooling ops (conv2d.cpp,
// batchnorm.cpp, pooling.cpp). Private to the SDK.
//
// Note [Primitive cache]
// Building a oneDNN primitive (choosing an implementation, JIT-compiling its kernel) costs
// 0.1-10 ms, far more than running a small convolution, and a training step of ResNet-50 runs
// ~160 primitives. Each op therefore builds its primitive once per distinct key (op name, shapes,
// layout, geometry) and keeps it. A model has a fixed set of shapes, so the cache stays small
// (ResNet-50: a few hundred entries). A model whose shapes change from step to step (Mask R-CNN's
// heads run on as many RoIs as a step samples) would grow it without bound, and an entry holds
// its staged activation buffers (megabytes): a cache that reaches kMaxEntries is emptied and
// refilled (such a model should also round its varying sizes up to a few buckets, or every step
// pays for building primitives). The cache is per thread: with
// oneDNN's default scratchpad (shared by all primitives, DNNL_ENABLE_CONCURRENT_EXEC=OFF in
// Debian's build) a primitive must run on the thread that created it, and no primitive may run
// on two threads at once; two training loops in one process (data-parallel ranks as threads,
// a loader running ops beside a step) would otherwise corrupt each other's results.
//
// Note [Memory formats]
// Our tensors are plain (nchw or nhwc). oneDNN's fastest kernels for fp32 on AVX-512 want
// blocked formats (nChw16c activations, OIhw16i16o weights). For NHWC, oneDNN has JIT kernels
// that read and write nhwc directly, so activations are passed as they are. For NCHW, plain nchw
// falls to an im2col+GEMM path, so activations are reordered into whatever the primitive asks
// for ("any") and back, which is what PyTorch's eager CPU path does too. Weights are always
// passed as "any" and reordered from OIHW each call (cheap next to the convolution; a weight
// cache keyed on a version counter would remove it, see conv2d.cpp).

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "benchhost/error.hpp"
#include "benchhost/nn/conv.hpp"
#include "benchhost/tensor.hpp"

namespace benchhost::nn::conv_detail {

inline dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// One stream per thread: a dnnl::stream is not meant to be shared between threads.
inline dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

/// A per-thread cache of T (a struct of primitives and descriptors) by string key; see
/// Note [Primitive cache]. Entries live until their thread exits.
template <class T>
class PrimitiveCache {
 public:
  static constexpr std::size_t kMaxEntries = 512;
  /// The entry of `key`, built on first use. The reference is valid until the next get() on
  /// this cache from this thread (which may empty it).
  T& get(const std::string& key, const std::function<std::unique_ptr<T>()>& build) {
    thread_local std::unordered_map<const PrimitiveCache*, Map> per_cache;
    Map& map = per_cache[this];
    auto it = map.find(key);
    if (it != map.end()) return *it->second;
    std::unique_ptr<T> entry = build();
    if (map.size() >= kMaxEntries) map.clear();
    return *map.emplace(key, std::move(entry)).first->second;
  }

 private:
  using Map = std::unordered_map<std::string, std::unique_ptr<T>>;
};

inline dnnl::memory::dims dims4(const ImageDims& d) { return {d.n, d.c, d.h, d.w}; }

inline dnnl::memory::format_tag act_tag(ImageLayout layout) {
  return layout == ImageLayout::nchw ? dnnl::memory::format_tag::nchw
                                     : dnnl::memory::format_tag::nhwc;
}

/// Plain activation descriptor for an image tensor.
inline dnnl::memory::desc act_md(const ImageDims& d, ImageLayout layout) {
  return dnnl::memory::desc(dims4(d), dnnl::memory::data_type::f32, act_tag(layout));
}

inline dnnl::memory::desc vec_md(std::int64_t n) {
  return dnnl::memory::desc({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::x);
}

/// Check a tensor is a contiguous f32 CPU tensor; returns it contiguous (copy if strided).
inline Tensor cpu_f32(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
  if (!t.device().is_cpu())
    BH_THROW(Unsupported, "{}: {} is on {}; only CPU kernels are built for this op so far", op,
             what, t.device().str());
  if (t.dtype() != DType::f32)
    BH_THROW(Unsupported, "{}: {} has dtype {}; only f32 is implemented", op, what,
             dtype_name(t.dtype()));
  return t.is_contiguous() ? t : t.contiguous();
}

inline dnnl::memory wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, cpu_engine(), t.raw_data());
}

/// A tensor holding raw bytes for a oneDNN memory of descriptor md (workspaces, blocked copies).
inline Tensor bytes_tensor(const dnnl::memory::desc& md) {
  const auto bytes = static_cast<std::int64_t>(md.get_size());
  return Tensor::empty({bytes > 0 ? bytes : 1}, DType::u8);
}

/// A reorder from `src` to `dst`, or an empty optional when they are the same format.
/// `accumulate` adds into the destination (post-op sum): how blocked weight gradients are
/// accumulated into plain parameter gradients in one pass.
inline dnnl::reorder make_reorder(const dnnl::memory::desc& src, const dnnl::memory::desc& dst,
                                  bool accumulate = false) {
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  return dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), src, cpu_engine(), dst, attr));
}

/// Run a reorder between two raw buffers.
inline void run_reorder(dnnl::reorder& r, const dnnl::memory::desc& src_md, void* src,
                        const dnnl::memory::desc& dst_md, void* dst) {
  dnnl::memory s(src_md, cpu_engine(), src), d(dst_md, cpu_engine(), dst);
  r.execute(cpu_stream(), {{DNNL_ARG_FROM, s}, {DNNL_ARG_TO, d}});
}

/// A user buffer bound to the format a primitive wants: the user's own memory, or a scratch
/// copy reordered in before (inputs) or out after (outputs) the primitive runs (the 2-d and 3-d
/// convolutions alike).
struct Staged {
  dnnl::memory::desc user_md, prim_md;
  bool needs_reorder = false;
  dnnl::reorder to_prim, from_prim;

  void init(const dnnl::memory::desc& user, const dnnl::memory::desc& prim, bool in, bool out,
            bool accumulate_out = false, bool force = false) {
    user_md = user;
    prim_md = prim;
    needs_reorder = force || !(user == prim);
    if (needs_reorder && in) to_prim = make_reorder(user, prim);
    if (needs_reorder && out) from_prim = make_reorder(prim, user, accumulate_out);
  }
  dnnl::memory input(const Tensor& t, Tensor& scratch) {
    if (!needs_reorder) return dnnl::memory(user_md, cpu_engine(), t.raw_data());
    scratch = bytes_tensor(prim_md);
    run_reorder(to_prim, user_md, t.raw_data(), prim_md, scratch.raw_data());
    return dnnl::memory(prim_md, cpu_engine(), scratch.raw_data());
  }
  dnnl::memory output(const Tensor& t, Tensor& scratch) {
    if (!needs_reorder) return dnnl::memory(user_md, cpu_engine(), t.raw_data());
    scratch = bytes_tensor(prim_md);
    return dnnl::memory(prim_md, cpu_engine(), scratch.raw_data());
  }
  void finish(const Tensor& t, const Tensor& scratch) {
    if (needs_reorder) run_reorder(from_prim, prim_md, scratch.raw_data(), user_md, t.raw_data());
  }
};

}  // namespace benchhost::nn::conv_detail
