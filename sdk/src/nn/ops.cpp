// The Tensor-level nn API (nn/ops.hpp): shape checks, output allocation and dispatch through
// the op registry. Device-independent: nothing here touches element data of a device tensor
// (small results the API returns on the host, a loss or the unique ids of a sparse gradient, are
// copied to the CPU first), so a CUDA implementation registered for an op is picked up without
// changes here.

#include "benchhost/nn/ops.hpp"

#include <algorithm>
#include <numeric>

#include "benchhost/error.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/addcmul_common.hpp"

namespace benchhost::nn {

namespace {

void require(const Tensor& t, const char* op, const char* what) {
  BH_CHECK_AS(InvalidArgument, t.defined(), "{}: {} is undefined", op, what);
}

// Note [Output dtypes]: an op's activations and input gradients take the dtype of the tensor
// they stand for (f32, or f16/bf16 under a mixed-precision policy); what an op saves for its
// backward as statistics (means, reciprocal deviations, attention probabilities, log-probs) and
// every loss value is f32 whatever its inputs.
Tensor like(const Shape& shape, const Tensor& ref, DType dtype) {
  return Tensor::empty(shape, dtype, ref.device());
}
Tensor like(const Shape& shape, const Tensor& ref) { return like(shape, ref, ref.dtype()); }
Tensor f32_like(const Shape& shape, const Tensor& ref) { return like(shape, ref, DType::f32); }

// Note [Device-generic contiguous]
// Tensor::contiguous() copies strided CPU tensors element by element but cannot gather on a
// device, so a strided device tensor is materialised through the "permute" op with the identity
// order (every device's permute is a strided gather, broadcast strides of 0 included).
Tensor contig(const Tensor& t) {
  if (!t.defined() || t.is_contiguous() || t.device().is_cpu()) return t.defined() ? t.contiguous() : t;
  std::vector<std::int64_t> identity(static_cast<std::size_t>(t.dim()));
  std::iota(identity.begin(), identity.end(), 0);
  OpCall c{{t}, {Tensor::empty(t.shape(), t.dtype(), t.device())}, Attrs()};
  c.attrs.set_ints("order", identity);
  dispatch("permute", c);
  return c.outputs[0];
}

Tensor run1(std::string_view op, std::vector<Tensor> inputs, Tensor out, Attrs attrs = {}) {
  OpCall c{std::move(inputs), {out}, std::move(attrs)};
  dispatch(op, c);
  return out;
}

std::int64_t norm_dim(std::int64_t d, std::int64_t n, const char* op) {
  const std::int64_t r = d < 0 ? d + n : d;
  BH_CHECK_AS(InvalidArgument, r >= 0 && r < n, "{}: dim {} out of range for a {}-d tensor", op, d, n);
  return r;
}

Attrs rng_attrs(Attrs a, std::uint64_t seed, std::uint64_t step, std::uint64_t stream) {
  a.set_ints("rng", {static_cast<std::int64_t>(seed), static_cast<std::int64_t>(step),
                     static_cast<std::int64_t>(stream)});
  return a;
}

}  // namespace

const char* activation_name(Activation a) noexcept {
  switch (a) {
    case Activation::none: return "none";
    case Activation::relu: return "relu";
    case Activation::gelu_erf: return "gelu_erf";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::sigmoid: return "sigmoid";
    case Activation::tanh: return "tanh";
  }
  return "?";
}

// ---- activations ----

Tensor activation_forward(const Tensor& x, Activation act) {
  require(x, "activation_forward", "x");
  if (act == Activation::none) return x;
  Tensor xc = contig(x);
  return run1("activation_forward", {xc}, like(x.shape(), x),
              Attrs().set("act", static_cast<int>(act)));
}

Tensor activation_backward(const Tensor& dy, const Tensor& x, Activation act) {
  require(dy, "activation_backward", "dy");
  if (act == Activation::none) return dy;
  BH_CHECK_AS(InvalidArgument, dy.shape() == x.shape(), "activation_backward: dy {} vs x {}",
              shape_str(dy.shape()), shape_str(x.shape()));
  return run1("activation_backward", {contig(dy), contig(x)}, like(x.shape(), x),
              Attrs().set("act", static_cast<int>(act)));
}

// ---- matmul / linear ----

void matmul_into(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                 float alpha, bool accumulate) {
  require(a, "matmul", "a");
  require(b, "matmul", "b");
  OpCall call{{a, b}, {c}, Attrs()};
  call.attrs.set("trans_a", trans_a).set("trans_b", trans_b).set("alpha", alpha).set("accumulate", accumulate);
  dispatch("matmul", call);
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha) {
  require(a, "matmul", "a");
  require(b, "matmul", "b");
  BH_CHECK_AS(InvalidArgument, a.dim() >= 2 && b.dim() >= 2, "matmul needs >= 2-d operands, got {} and {}",
              shape_str(a.shape()), shape_str(b.shape()));
  Shape out(a.shape().begin(), a.shape().end() - 2);
  out.push_back(trans_a ? a.size(-1) : a.size(-2));
  out.push_back(trans_b ? b.size(-2) : b.size(-1));
  Tensor c = like(out, a);
  matmul_into(c, a, b, trans_a, trans_b, alpha, false);
  return c;
}

void matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, Tensor& da, Tensor& db) {
  if (da.defined()) matmul_into(da, dc, b, false, true, 1.0f, true);
  if (db.defined()) {
    if (b.dim() == 2 && a.dim() > 2) {
      Tensor a2 = contig(a).reshape({-1, a.size(-1)});
      Tensor dc2 = contig(dc).reshape({-1, dc.size(-1)});
      matmul_into(db, a2, dc2, true, false, 1.0f, true);
    } else {
      matmul_into(db, a, dc, true, false, 1.0f, true);
    }
  }
}

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Activation act,
                      Tensor* preact) {
  require(x, "linear_forward", "x");
  require(w, "linear_forward", "w");
  BH_CHECK_AS(InvalidArgument, w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
              "linear_forward: x {} does not match weight {} ([out, in])", shape_str(x.shape()),
              shape_str(w.shape()));
  BH_CHECK_AS(InvalidArgument, !bias.defined() || bias.shape() == Shape{w.size(0)},
              "linear_forward: bias {} must be [{}]", shape_str(bias.shape()), w.size(0));
  Shape out_shape = x.shape();
  out_shape.back() = w.size(0);
  Tensor x2 = contig(x).reshape({-1, x.size(-1)});
  const bool split = preact != nullptr && act != Activation::none;
  Tensor y2 = like({x2.size(0), w.size(0)}, x);
  run1("linear_forward", {x2, contig(w), contig(bias)}, y2,
       Attrs().set("act", static_cast<int>(split ? Activation::none : act)));
  Tensor y = y2.view(out_shape);
  if (!split) {
    if (preact) *preact = y;
    return y;
  }
  *preact = y;
  return activation_forward(y, act);
}

Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& preact,
                       Activation act, Tensor& dw, Tensor& dbias, bool input_grad) {
  require(dy, "linear_backward", "dy");
  if (act != Activation::none) require(preact, "linear_backward", "preact (pass the z saved by linear_forward)");
  Tensor dz = activation_backward(dy, act == Activation::none ? dy : preact, act);
  Tensor dz2 = contig(dz).reshape({-1, w.size(0)});
  Tensor x2 = contig(x).reshape({-1, w.size(1)});
  Tensor dx = input_grad ? matmul(dz2, w).view(x.shape()) : Tensor{};
  if (dw.defined()) matmul_into(dw, dz2, x2, true, false, 1.0f, true);
  if (dbias.defined()) run1("bias_backward", {dz2}, dbias, Attrs().set("accumulate", 1));
  return dx;
}

// ---- layer norm ----

Tensor layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         LayerNormSaved* saved) {
  require(x, "layernorm_forward", "x");
  require(gamma, "layernorm_forward", "gamma");
  const std::int64_t C = x.size(-1);
  BH_CHECK_AS(InvalidArgument, gamma.shape() == Shape{C} && (!beta.defined() || beta.shape() == Shape{C}),
              "layernorm_forward: gamma/beta must be [{}] for x {}", C, shape_str(x.shape()));
  const std::int64_t R = x.numel() / C;
  OpCall c{{contig(x), contig(gamma), contig(beta)}, {like(x.shape(), x), f32_like({R}, x), f32_like({R}, x)}, Attrs()};
  c.attrs.set("eps", eps);
  dispatch("layernorm_forward", c);
  if (saved) *saved = LayerNormSaved{c.outputs[1], c.outputs[2]};
  return c.outputs[0];
}

Tensor layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                          const LayerNormSaved& saved, Tensor& dgamma, Tensor& dbeta) {
  require(saved.mean, "layernorm_backward", "saved.mean");
  BH_CHECK_AS(InvalidArgument, dy.shape() == x.shape(), "layernorm_backward: dy {} vs x {}",
              shape_str(dy.shape()), shape_str(x.shape()));
  OpCall c{{contig(dy), contig(x), contig(gamma), saved.mean, saved.rstd},
           {like(x.shape(), x), dgamma, dbeta}, Attrs()};
  dispatch("layernorm_backward", c);
  return c.outputs[0];
}

// ---- softmax ----

Tensor softmax_forward(const Tensor& x) { return run1("softmax_forward", {contig(x)}, like(x.shape(), x)); }
Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return run1("softmax_backward", {contig(dy), contig(y)}, like(y.shape(), y));
}
Tensor log_softmax_forward(const Tensor& x) { return run1("log_softmax_forward", {contig(x)}, like(x.shape(), x)); }
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return run1("log_softmax_backward", {contig(dy), contig(y)}, like(y.shape(), y));
}

// ---- dropout ----

Tensor dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t step,
                       std::uint64_t stream_id, DropoutSaved* saved) {
  require(x, "dropout_forward", "x");
  BH_CHECK_AS(InvalidArgument, p >= 0.0f && p < 1.0f, "dropout probability must be in [0, 1), got {}", p);
  if (p == 0.0f) {
    if (saved) *saved = DropoutSaved{Tensor{}, 0.0f};
    return x;
  }
  OpCall c{{contig(x)}, {like(x.shape(), x), like(x.shape(), x, DType::u8)},
           rng_attrs(Attrs().set("p", p), seed, step, stream_id)};
  dispatch("dropout_forward", c);
  if (saved) *saved = DropoutSaved{c.outputs[1], p};
  return c.outputs[0];
}

Tensor dropout_backward(const Tensor& dy, const DropoutSaved& saved) {
  if (saved.p == 0.0f || !saved.mask.defined()) return dy;
  return run1("dropout_backward", {contig(dy), saved.mask}, like(dy.shape(), dy), Attrs().set("p", saved.p));
}

// ---- embedding ----

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  require(ids, "embedding_forward", "ids");
  BH_CHECK_AS(InvalidArgument, table.dim() == 2, "embedding table must be [V, D], got {}", shape_str(table.shape()));
  Shape out = ids.shape();
  out.push_back(table.size(1));
  Tensor y = run1("embedding_forward", {contig(ids), contig(table)}, like({ids.numel(), table.size(1)}, table));
  return y.view(out);
}

void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dtable) {
  require(dtable, "embedding_backward", "dtable");
  const std::int64_t D = dtable.size(1);
  BH_CHECK_AS(InvalidArgument, dy.numel() == ids.numel() * D, "embedding_backward: dy {} does not match ids {} x D={}",
              shape_str(dy.shape()), shape_str(ids.shape()), D);
  OpCall c{{contig(dy).reshape({-1, D}), contig(ids)}, {dtable}, Attrs()};
  dispatch("embedding_backward", c);
}

SparseRows embedding_backward_sparse(const Tensor& dy, const Tensor& ids, std::int64_t num_rows) {
  Tensor idc = contig(ids).to(Device::cpu()).view({-1});
  std::vector<std::int64_t> u(static_cast<std::size_t>(idc.numel()));
  for (std::int64_t i = 0; i < idc.numel(); ++i) {
    u[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(idc.item({i}));
    BH_CHECK_AS(InvalidArgument, u[i] >= 0 && u[i] < num_rows,
                "embedding id {} at position {} is out of range for a table of {} rows", u[i], i, num_rows);
  }
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  const std::int64_t n = static_cast<std::int64_t>(u.size()), D = dy.size(-1);
  Tensor rows = Tensor::from_vector_i64(u, {n}, dy.device());
  Tensor grad = run1("embedding_backward_sparse", {contig(dy).reshape({-1, D}), contig(ids), rows}, like({n, D}, dy));
  return SparseRows{rows, grad};
}

// ---- attention ----

Tensor sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                    float scale, AttentionSaved* saved, float dropout_p, std::uint64_t seed,
                    std::uint64_t step, std::uint64_t stream_id) {
  require(q, "sdpa_forward", "q");
  BH_CHECK_AS(InvalidArgument, q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "sdpa_forward: q, k, v must be [B, H, T, D], got {}, {}, {}", shape_str(q.shape()),
              shape_str(k.shape()), shape_str(v.shape()));
  BH_CHECK_AS(InvalidArgument, dropout_p >= 0.0f && dropout_p < 1.0f, "attention dropout must be in [0, 1), got {}", dropout_p);
  const std::int64_t B = q.size(0), H = q.size(1), T = q.size(2), S = k.size(2);
  OpCall c;
  c.inputs = {contig(q), contig(k), contig(v), mask.key_padding, mask.mask};
  c.outputs = {like({B, H, T, v.size(3)}, q), f32_like({B, H, T, S}, q),
               dropout_p > 0 ? like({B, H, T, S}, q, DType::u8) : Tensor{}};
  c.attrs = rng_attrs(Attrs().set("causal", mask.causal).set("scale", scale).set("p", dropout_p), seed, step, stream_id);
  dispatch("sdpa_forward", c);
  if (saved) *saved = AttentionSaved{c.outputs[1], DropoutSaved{c.outputs[2], dropout_p}};
  return c.outputs[0];
}

AttentionGrads sdpa_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionSaved& saved, float scale) {
  require(saved.probs, "sdpa_backward", "saved.probs");
  OpCall c;
  c.inputs = {contig(dout), contig(q), contig(k), contig(v), saved.probs, saved.dropout.mask};
  c.outputs = {like(q.shape(), q), like(k.shape(), k), like(v.shape(), v)};
  c.attrs.set("scale", scale).set("p", saved.dropout.mask.defined() ? saved.dropout.p : 0.0f);
  dispatch("sdpa_backward", c);
  return AttentionGrads{c.outputs[0], c.outputs[1], c.outputs[2]};
}

// ---- elementwise / shape / reductions ----

Tensor add(const Tensor& a, const Tensor& b) {
  require(a, "add", "a");
  require(b, "add", "b");
  return run1("add", {contig(a), contig(b)}, like(a.shape(), a));
}

void add_(Tensor& a, const Tensor& b, float alpha) {
  BH_CHECK_AS(InvalidArgument, a.defined() && a.is_contiguous(), "add_: the destination must be a contiguous tensor");
  OpCall c{{a, contig(b)}, {a}, Attrs().set("alpha", alpha)};
  dispatch("add", c);
}

namespace {

// mul, addcmul and addcmul_ are op "addcmul" with and without c (addcmul_common.hpp); `out`
// undefined allocates the result.
Tensor run_addcmul(const char* api, Tensor out, const Tensor& c, const Tensor& a, const Tensor& b, float alpha) {
  require(a, api, "a");
  require(b, api, "b");
  const std::string why = addcmul_detail::operand_error(a, b, c, out);
  BH_CHECK_AS(InvalidArgument, why.empty(), "{}: {}", api, why);
  if (!out.defined()) out = like(a.shape(), a, a.dtype());
  std::vector<Tensor> inputs{contig(a), contig(b)};
  if (c.defined()) inputs.push_back(contig(c));
  return run1("addcmul", std::move(inputs), out, Attrs().set("alpha", alpha));
}

}  // namespace

Tensor mul(const Tensor& a, const Tensor& b) { return run_addcmul("mul", Tensor{}, Tensor{}, a, b, 1.0f); }

Tensor addcmul(const Tensor& c, const Tensor& a, const Tensor& b, float alpha) {
  require(c, "addcmul", "c");
  return run_addcmul("addcmul", Tensor{}, c, a, b, alpha);
}

void addcmul_(Tensor& c, const Tensor& a, const Tensor& b, float alpha) {
  BH_CHECK_AS(InvalidArgument, c.defined() && c.is_contiguous(), "addcmul_: the destination must be a contiguous tensor");
  run_addcmul("addcmul_", c, c, a, b, alpha);
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const std::int64_t n = shape_numel(shape);
  BH_CHECK_AS(InvalidArgument, n > 0 && g.numel() % n == 0, "sum_to_shape: cannot reduce {} to {}",
              shape_str(g.shape()), shape_str(shape));
  Tensor out = like({n}, g);
  run1("bias_backward", {contig(g).reshape({-1, n})}, out, Attrs().set("accumulate", 0));
  return out.view(shape);
}

Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim) {
  BH_CHECK_AS(InvalidArgument, !xs.empty(), "concat of no tensors");
  const std::int64_t d = norm_dim(dim, xs[0].dim(), "concat");
  Shape out = xs[0].shape();
  out[d] = 0;
  std::vector<Tensor> in;
  for (const Tensor& t : xs) {
    Shape s = t.shape();
    BH_CHECK_AS(InvalidArgument, s.size() == out.size() && t.dtype() == xs[0].dtype(),
                "concat: {} does not match {}", t.describe(), xs[0].describe());
    for (std::size_t i = 0; i < s.size(); ++i)
      BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(i) == d || s[i] == out[i],
                  "concat along {}: shapes {} and {} differ elsewhere", d, shape_str(s), shape_str(xs[0].shape()));
    out[d] += s[d];
    in.push_back(contig(t));
  }
  OpCall c{in, {like(out, xs[0], xs[0].dtype())}, Attrs().set("dim", static_cast<double>(d))};
  dispatch("concat", c);
  return c.outputs[0];
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  const std::int64_t d = norm_dim(dim, x.dim(), "split");
  const std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  BH_CHECK_AS(InvalidArgument, total == x.size(d), "split sizes [{}] do not add up to {} (dim {} of {})",
              fmt::join(sizes, ", "), x.size(d), d, shape_str(x.shape()));
  OpCall c{{contig(x)}, {}, Attrs().set("dim", static_cast<double>(d))};
  for (auto s : sizes) {
    Shape sh = x.shape();
    sh[d] = s;
    c.outputs.push_back(like(sh, x, x.dtype()));
  }
  dispatch("split", c);
  return c.outputs;
}

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& order) {
  std::vector<std::int64_t> inv(order.size(), -1);
  for (std::size_t i = 0; i < order.size(); ++i) {
    BH_CHECK_AS(InvalidArgument, order[i] >= 0 && order[i] < static_cast<std::int64_t>(order.size()) && inv[order[i]] < 0,
                "[{}] is not a permutation", fmt::join(order, ", "));
    inv[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  }
  return inv;
}

Tensor permute_copy(const Tensor& x, const std::vector<std::int64_t>& order) {
  BH_CHECK_AS(InvalidArgument, static_cast<std::int64_t>(order.size()) == x.dim(),
              "permute order [{}] does not match a {}-d tensor", fmt::join(order, ", "), x.dim());
  inverse_permutation(order);  // validates
  Shape out;
  for (auto o : order) out.push_back(x.size(o));
  OpCall c{{x}, {like(out, x, x.dtype())}, Attrs()};
  c.attrs.set_ints("order", order);
  dispatch("permute", c);
  return c.outputs[0];
}

Tensor transpose_copy(const Tensor& x, std::int64_t a, std::int64_t b) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(x.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[norm_dim(a, x.dim(), "transpose")], order[norm_dim(b, x.dim(), "transpose")]);
  return permute_copy(x, order);
}

Tensor reshape_copy(const Tensor& x, const Shape& shape) { return x.reshape(shape); }

namespace {
std::vector<bool> reduce_mask(const Tensor& x, const std::vector<std::int64_t>& dims) {
  std::vector<bool> red(static_cast<std::size_t>(x.dim()), dims.empty());
  for (auto d : dims) red[static_cast<std::size_t>(norm_dim(d, x.dim(), "reduction"))] = true;
  return red;
}
Shape reduced_shape(const Shape& in, const std::vector<bool>& red, bool keepdim) {
  Shape out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!red[i]) out.push_back(in[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}
Tensor reduce(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim, bool mean) {
  require(x, mean ? "mean" : "sum", "x");
  const auto red = reduce_mask(x, dims);
  OpCall c{{contig(x)}, {like(reduced_shape(x.shape(), red, false), x)}, Attrs().set("mean", mean)};
  c.attrs.set_ints("dims", dims);
  dispatch("sum", c);
  return keepdim ? c.outputs[0].view(reduced_shape(x.shape(), red, true)) : c.outputs[0];
}
}  // namespace

Tensor sum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) { return reduce(x, dims, keepdim, false); }
Tensor mean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) { return reduce(x, dims, keepdim, true); }

Tensor sum_backward(const Tensor& dy, const Shape& input_shape, const std::vector<std::int64_t>& dims, bool keepdim) {
  std::vector<bool> red(input_shape.size(), dims.empty());
  for (auto d : dims) red[static_cast<std::size_t>(norm_dim(d, static_cast<std::int64_t>(input_shape.size()), "sum_backward"))] = true;
  Tensor g = contig(dy).view(reduced_shape(input_shape, red, true));
  Shape strides = g.strides();
  for (std::size_t i = 0; i < input_shape.size(); ++i)
    if (red[i]) strides[i] = 0;
  // keepdim only changes dy's shape, not its elements: the view above covers both.
  (void)keepdim;
  Tensor expanded(g.storage(), g.storage_offset(), input_shape, strides, g.dtype());
  return contig(expanded);
}

Tensor mean_backward(const Tensor& dy, const Shape& input_shape, const std::vector<std::int64_t>& dims, bool keepdim) {
  std::int64_t count = 1;
  std::vector<bool> red(input_shape.size(), dims.empty());
  for (auto d : dims) red[static_cast<std::size_t>(norm_dim(d, static_cast<std::int64_t>(input_shape.size()), "mean_backward"))] = true;
  for (std::size_t i = 0; i < input_shape.size(); ++i)
    if (red[i]) count *= input_shape[i];
  Tensor g = sum_backward(dy, input_shape, dims, keepdim);
  Tensor out = Tensor::zeros(input_shape, g.dtype(), g.device());
  add_(out, g, 1.0f / static_cast<float>(std::max<std::int64_t>(count, 1)));
  return out;
}

MaxResult amax(const Tensor& x, std::int64_t dim, bool keepdim) {
  require(x, "amax", "x");
  const std::int64_t d = norm_dim(dim, x.dim(), "amax");
  Shape out = x.shape();
  out.erase(out.begin() + d);
  OpCall c{{contig(x)}, {like(out, x), like(out, x, DType::i64)}, Attrs().set("dim", static_cast<double>(d))};
  dispatch("amax", c);
  if (keepdim) {
    Shape k = x.shape();
    k[d] = 1;
    return MaxResult{c.outputs[0].view(k), c.outputs[1].view(k)};
  }
  return MaxResult{c.outputs[0], c.outputs[1]};
}

Tensor amax_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape, std::int64_t dim, bool keepdim) {
  const std::int64_t d = norm_dim(dim, static_cast<std::int64_t>(input_shape.size()), "amax_backward");
  OpCall c{{contig(dy), contig(indices)}, {like(input_shape, dy)}, Attrs().set("dim", static_cast<double>(d))};
  (void)keepdim;
  dispatch("amax_backward", c);
  return c.outputs[0];
}

Tensor cast(const Tensor& x, DType dtype) {
  require(x, "cast", "x");
  if (x.dtype() == dtype) return x;
  return run1("cast", {contig(x)}, like(x.shape(), x, dtype));
}

// ---- fp8 ----

Tensor fp8_cast_scaled(const Tensor& x, const Tensor& scale, DType dtype, Tensor* amax) {
  require(x, "fp8_cast_scaled", "x");
  BH_CHECK_AS(InvalidArgument, dtype == DType::f8e4m3 || dtype == DType::f8e5m2,
              "fp8_cast_scaled: target dtype must be f8e4m3 or f8e5m2, got {}", dtype_name(dtype));
  OpCall c;
  c.inputs = {contig(x), scale};
  c.outputs = {like(x.shape(), x, dtype), amax ? f32_like({1}, x) : Tensor()};
  dispatch("fp8_cast_scaled", c);
  if (amax) *amax = c.outputs[1];
  return c.outputs[0];
}

Tensor matmul_fp8(const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                  const Tensor& b_scale_inv, DType out_dtype, Tensor* amax_d) {
  require(a, "matmul_fp8", "a");
  require(b, "matmul_fp8", "b");
  BH_CHECK_AS(InvalidArgument, a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1),
              "matmul_fp8: needs a [M, K] and b [N, K], got {} and {}", shape_str(a.shape()),
              shape_str(b.shape()));
  BH_CHECK_AS(InvalidArgument,
              out_dtype == DType::f32 || out_dtype == DType::bf16 || out_dtype == DType::f16,
              "matmul_fp8: out_dtype must be f32, bf16 or f16 here, got {}", dtype_name(out_dtype));
  OpCall c;
  c.inputs = {contig(a), contig(b), a_scale_inv, b_scale_inv, Tensor()};
  c.outputs = {like({a.size(0), b.size(0)}, a, out_dtype), amax_d ? f32_like({1}, a) : Tensor()};
  dispatch("matmul_fp8", c);
  if (amax_d) *amax_d = c.outputs[1];
  return c.outputs[0];
}

// ---- losses ----

CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                                 float label_smoothing, std::int64_t ignore_index) {
  require(logits, "softmax_cross_entropy_forward", "logits");
  BH_CHECK_AS(InvalidArgument, label_smoothing >= 0.0f && label_smoothing < 1.0f,
              "label smoothing must be in [0, 1), got {}", label_smoothing);
  const std::int64_t C = logits.size(-1), N = logits.numel() / C;
  BH_CHECK_AS(InvalidArgument, targets.numel() == N, "cross entropy: {} targets for {} rows of logits {}",
              targets.numel(), N, shape_str(logits.shape()));
  OpCall c{{contig(logits).reshape({N, C}), contig(targets).reshape({N})}, {f32_like({N, C}, logits), f32_like({2}, logits)}, Attrs()};
  c.attrs.set("smoothing", label_smoothing).set("ignore_index", static_cast<double>(ignore_index));
  dispatch("cross_entropy_forward", c);
  Tensor lc = c.outputs[1].to(Device::cpu());
  return CrossEntropyResult{lc.data<float>()[0], static_cast<std::int64_t>(lc.data<float>()[1]), c.outputs[0]};
}

Tensor softmax_cross_entropy_backward(const CrossEntropyResult& fwd, const Tensor& targets,
                                      float label_smoothing, std::int64_t ignore_index, float dloss) {
  require(fwd.log_probs, "softmax_cross_entropy_backward", "log_probs");
  const std::int64_t N = fwd.log_probs.size(0);
  OpCall c{{fwd.log_probs, contig(targets).reshape({N})}, {like(fwd.log_probs.shape(), fwd.log_probs)}, Attrs()};
  c.attrs.set("smoothing", label_smoothing).set("ignore_index", static_cast<double>(ignore_index))
      .set("scale", fwd.count > 0 ? dloss / static_cast<double>(fwd.count) : 0.0);
  dispatch("cross_entropy_backward", c);
  return c.outputs[0];
}

float bce_with_logits_forward(const Tensor& logits, const Tensor& targets) {
  require(logits, "bce_with_logits_forward", "logits");
  Tensor out = run1("bce_with_logits_forward", {contig(logits), contig(targets)}, f32_like({1}, logits));
  return out.to(Device::cpu()).data<float>()[0];
}

Tensor bce_with_logits_backward(const Tensor& logits, const Tensor& targets, float dloss) {
  return run1("bce_with_logits_backward", {contig(logits), contig(targets)}, like(logits.shape(), logits),
              Attrs().set("scale", logits.numel() ? dloss / static_cast<double>(logits.numel()) : 0.0));
}

}  // namespace benchhost::nn
