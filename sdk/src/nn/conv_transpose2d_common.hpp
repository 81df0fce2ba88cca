#pragma once
// Shared by the 2-d transposed convolution ops (their Tensor-level API in conv_transpose2d.cpp,
// their CPU implementations registered in nn/cpu/conv3d.cpp, CUDA ones in
// nn/cuda/conv3d_cudnn.cpp). Private to the SDK.
//
// Registry calling conventions (inputs -> outputs; "+=" outputs accumulate):
//   conv_transpose2d_forward          {x, w [I,O,KH,KW], bias?} -> {y}
//   conv_transpose2d_backward_data    {dy, w}                   -> {dx}   (x shape = dx shape)
//   conv_transpose2d_backward_weights {dy, x}                   -> {dw +=, dbias +=?}
// Attributes: stride=[h,w], pad=[h,w], layout (0 nchw, 1 nhwc).
//
// Note [2-d transposed convolution as 3-d]
// A 2-d transposed convolution is the 3-d one (nn/conv3d.hpp) with depth 1, kernel depth 1,
// stride 1 and padding 0 in depth: the same bytes read as [N, C, 1, H, W] (NCHW -> NCDHW) or
// [N, 1, H, W, C] (NHWC -> NDHWC), and the weight [I, O, KH, KW] as [I, O, 1, KH, KW]. Every
// implementation (the plain reference, oneDNN's deconvolution primitives, cuDNN) therefore
// converts the call with to_3d() (views: the outputs are written in place) and runs the 3-d
// implementation on it, so the 2-d op has the 3-d op's kernels, checks and caches, and its own
// registry entry, example cases and tolerances (and its own peer check against torch's
// conv_transpose2d, tests/nn_conv/conv_transpose2d_test.cpp).

#include <cstdint>
#include <initializer_list>
#include <string>

#include "benchhost/error.hpp"
#include "benchhost/nn/conv.hpp"
#include "benchhost/nn/registry.hpp"
#include "nn/conv3d_common.hpp"

namespace benchhost::nn::conv_transpose2d_detail {

inline Attrs conv_transpose2d_attrs(const Conv2dSpec& s) {
  Attrs a;
  a.set_ints("stride", {s.stride_h, s.stride_w});
  a.set_ints("pad", {s.pad_h, s.pad_w});
  a.set("layout", s.layout == ImageLayout::nhwc ? 1.0 : 0.0);
  return a;
}

inline Conv2dSpec conv_transpose2d_spec(const Attrs& a) {
  Conv2dSpec s;
  const auto& st = a.get_ints("stride");
  const auto& pd = a.get_ints("pad");
  if (st.size() == 2) s.stride_h = st[0], s.stride_w = st[1];
  if (pd.size() == 2) s.pad_h = pd[0], s.pad_w = pd[1];
  s.layout = a.get_int("layout", 0) == 1 ? ImageLayout::nhwc : ImageLayout::nchw;
  return s;
}

/// The 3-d spec of a 2-d one (depth: stride 1, padding 0).
inline Conv3dSpec spec_3d(const Conv2dSpec& s) {
  Conv3dSpec t;
  t.stride_h = s.stride_h;
  t.stride_w = s.stride_w;
  t.pad_h = s.pad_h;
  t.pad_w = s.pad_w;
  t.layout = s.layout == ImageLayout::nhwc ? VolumeLayout::ndhwc : VolumeLayout::ncdhw;
  return t;
}

/// [N, C, H, W] -> [N, C, 1, H, W]; [N, H, W, C] -> [N, 1, H, W, C].
inline Shape activation_3d(const Shape& s, ImageLayout layout) {
  if (s.size() != 4) return s;
  return layout == ImageLayout::nchw ? Shape{s[0], s[1], 1, s[2], s[3]} : Shape{s[0], 1, s[1], s[2], s[3]};
}

/// [I, O, KH, KW] -> [I, O, 1, KH, KW].
inline Shape weight_3d(const Shape& s) {
  if (s.size() != 4) return s;
  return {s[0], s[1], 1, s[2], s[3]};
}

/// Validates a 2-d call's shapes and spec (naming `op`) and returns the geometry of its 3-d
/// view (Note [2-d transposed convolution as 3-d]).
inline conv3d_detail::Conv3dGeometry conv_transpose2d_geometry(const Shape& x_shape, const Shape& w_shape,
                                                               const Conv2dSpec& s, const char* op) {
  BH_CHECK_AS(InvalidArgument, x_shape.size() == 4, "{}: input must be a 4-d {} tensor, got shape {}", op,
              image_layout_name(s.layout), shape_str(x_shape));
  BH_CHECK_AS(InvalidArgument, w_shape.size() == 4, "{}: weight must be 4-d ([I, O, KH, KW]), got {}", op,
              shape_str(w_shape));
  BH_CHECK_AS(InvalidArgument, s.dilation_h == 1 && s.dilation_w == 1 && s.groups == 1,
              "{}: dilation {}x{} and groups {} are not supported (1 only, as Mask R-CNN's mask head)", op,
              s.dilation_h, s.dilation_w, s.groups);
  return conv3d_detail::conv3d_geometry(activation_3d(x_shape, s.layout), weight_3d(w_shape), spec_3d(s), true,
                                        op);
}

/// What a tensor of a 2-d call is: an activation, a weight, or a channel vector (unchanged).
enum class Role : std::uint8_t { act, weight, vec };

inline Tensor view_3d(const Tensor& t, Role role, ImageLayout layout) {
  if (!t.defined() || t.dim() != 4 || role == Role::vec) return t;
  return t.view(role == Role::act ? activation_3d(t.shape(), layout) : weight_3d(t.shape()));
}

/// The 3-d call on the same memory (contiguous tensors: views; outputs written in place).
inline OpCall to_3d(const OpCall& call, std::initializer_list<Role> in, std::initializer_list<Role> out) {
  const Conv2dSpec s = conv_transpose2d_spec(call.attrs);
  OpCall c;
  std::size_t i = 0;
  for (Role r : in) {
    if (i < call.inputs.size()) c.inputs.push_back(view_3d(call.inputs[i], r, s.layout));
    ++i;
  }
  i = 0;
  for (Role r : out) {
    if (i < call.outputs.size()) c.outputs.push_back(view_3d(call.outputs[i], r, s.layout));
    ++i;
  }
  c.attrs = conv3d_detail::conv3d_attrs(spec_3d(s));
  return c;
}

/// The roles of each op's tensors.
inline OpCall forward_3d(const OpCall& c) { return to_3d(c, {Role::act, Role::weight, Role::vec}, {Role::act}); }
inline OpCall backward_data_3d(const OpCall& c) { return to_3d(c, {Role::act, Role::weight}, {Role::act}); }
inline OpCall backward_weights_3d(const OpCall& c) {
  return to_3d(c, {Role::act, Role::act}, {Role::weight, Role::vec});
}

/// A 3-d implementation run on the 2-d call's 3-d view (the accepts test too).
inline OpImpl on_3d_view(OpImpl impl, OpCall (*to_3d)(const OpCall&)) {
  impl.run = [run = impl.run, to_3d](OpCall& call) {
    OpCall c = to_3d(call);
    run(c);
  };
  if (impl.accepts)
    impl.accepts = [accepts = impl.accepts, to_3d](const OpCall& call) -> std::string {
      for (const auto* list : {&call.inputs, &call.outputs})
        for (const Tensor& t : *list)
          if (t.defined() && !t.is_contiguous()) return "needs contiguous tensors (seen as 3-d views)";
      return accepts(to_3d(call));
    };
  return impl;
}

}  // namespace benchhost::nn::conv_transpose2d_detail
