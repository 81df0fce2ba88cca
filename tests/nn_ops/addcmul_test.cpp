// mul / addcmul / addcmul_ (op "addcmul"): hand-computed forward values (alpha, broadcast,
// in-place aliasing, strided inputs, f16 / bf16 storage), the documented backward formulas
// against finite differences, and bad operands. CPU-vs-CUDA parity is the registry walk's
// (parity_test.cpp).

#include <cmath>
#include <utility>

#include <gtest/gtest.h>

#include "benchhost/error.hpp"
#include "benchhost/nn/ops.hpp"
#include "benchhost/nn/registry.hpp"
#include "common/gradcheck.hpp"

namespace benchhost::nn {
namespace {

using benchhost::testing::random_tensor;

std::vector<float> values(const Tensor& t) { return t.to_float_vector(); }

TEST(Mul, HandComputedValues) {
  Tensor a = Tensor::from_vector({1, 2, -3, 4, 0.5f, -1}, {2, 3});
  Tensor b = Tensor::from_vector({2, -1, 0.5f, 3, 4, -2}, {2, 3});
  Tensor y = mul(a, b);
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  EXPECT_EQ(values(y), std::vector<float>({2, -2, -1.5f, 12, 2, 2}));
  EXPECT_EQ(values(a), std::vector<float>({1, 2, -3, 4, 0.5f, -1}));  // inputs untouched
}

TEST(Mul, BroadcastsBOverLeadingDims) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({10, -1, 0.5f}, {3});
  EXPECT_EQ(values(mul(a, b)), std::vector<float>({10, -2, 1.5f, 40, -5, 3}));
}

TEST(Mul, StridedInputsAreReadThroughTheirStrides) {
  // at is the transpose of [[1, 2], [3, 4], [5, 6]]: [[1, 3, 5], [2, 4, 6]], not contiguous.
  Tensor at = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}).transpose(0, 1);
  ASSERT_FALSE(at.is_contiguous());
  Tensor b = Tensor::from_vector({1, 10, 100, -1, -10, -100}, {2, 3});
  EXPECT_EQ(values(mul(at, b)), std::vector<float>({1, 30, 500, -2, -40, -600}));
  Tensor c = Tensor::from_vector({1, 1, 1, 1, 1, 1}, {2, 3});
  EXPECT_EQ(values(addcmul(c, b, at, 2.0f)), std::vector<float>({3, 61, 1001, -3, -79, -1199}));
}

TEST(Addcmul, HandComputedValuesWithAlpha) {
  Tensor c = Tensor::from_vector({1, 1, 1, -2}, {4});
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {4});
  Tensor b = Tensor::from_vector({0.5f, -1, 2, 0.25f}, {4});
  Tensor out = addcmul(c, a, b, -0.5f);  // c - 0.5 a b
  EXPECT_EQ(values(out), std::vector<float>({0.75f, 2, -2, -2.5f}));
  EXPECT_EQ(values(c), std::vector<float>({1, 1, 1, -2}));  // c is not modified
  EXPECT_NE(out.raw_data(), c.raw_data());
  EXPECT_EQ(values(addcmul(c, a, b)), std::vector<float>({1.5f, -1, 7, -1}));  // alpha defaults to 1
}

TEST(Addcmul, InPlaceWritesIntoC) {
  Tensor c = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  const void* storage = c.raw_data();
  Tensor a = Tensor::from_vector({1, -1, 2, -2, 3, -3}, {2, 3});
  Tensor b = Tensor::from_vector({2, 0, 1}, {3});  // broadcast
  addcmul_(c, a, b, 3.0f);
  EXPECT_EQ(c.raw_data(), storage);
  EXPECT_EQ(values(c), std::vector<float>({7, 2, 9, -8, 5, -3}));
}

TEST(Addcmul, InPlaceWithCAlsoAnOperand) {
  // x += x * y, and x += 0.5 * x * x: c aliases a, then a and b.
  Tensor x = Tensor::from_vector({1, 2, -3, 4}, {4});
  Tensor y = Tensor::from_vector({1, -1, 2, 0.5f}, {4});
  addcmul_(x, x, y);
  EXPECT_EQ(values(x), std::vector<float>({2, 0, -9, 6}));
  addcmul_(x, x, x, 0.5f);
  EXPECT_EQ(values(x), std::vector<float>({4, 0, 31.5f, 24}));
}

TEST(Addcmul, LargeTensorsMatchAPlainLoop) {
  // Large enough that the oneTBB implementation splits the work (one row, and many rows).
  for (const auto& [a_shape, b_shape] : {std::pair<Shape, Shape>{{50000}, {50000}}, {{1400, 37}, {37}}}) {
    Tensor a = random_tensor(a_shape, 1);
    Tensor b = random_tensor(b_shape, 2);
    Tensor c = random_tensor(a_shape, 3);
    auto av = values(a), bv = values(b), cv = values(c);
    auto got = values(addcmul(c, a, b, 1.5f));
    ASSERT_EQ(got.size(), av.size());
    int bad = 0;
    for (std::size_t i = 0; i < av.size(); ++i) {
      const double want = cv[i] + 1.5 * static_cast<double>(av[i]) * bv[i % bv.size()];
      bad += std::fabs(got[i] - want) > 1e-6 ? 1 : 0;
    }
    EXPECT_EQ(bad, 0) << shape_str(b_shape);
  }
}

TEST(Addcmul, HalfAndBfloat16StorageComputesInF32) {
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor a = Tensor::from_vector({1.5f, -2, 0.25f, 3}, {2, 2}).to(t);
    Tensor b = Tensor::from_vector({2, -0.5f}, {2}).to(t);
    Tensor c = Tensor::from_vector({1, 1, 1, 1}, {2, 2}).to(t);
    Tensor y = mul(a, b);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(values(y), std::vector<float>({3, 1, 0.5f, -1.5f}));
    Tensor z = addcmul(c, a, b, -2.0f);
    EXPECT_EQ(z.dtype(), t);
    EXPECT_EQ(values(z), std::vector<float>({-5, -1, 0, 4}));
    addcmul_(c, a, b, 0.5f);
    EXPECT_EQ(values(c), std::vector<float>({2.5f, 1.5f, 1.25f, 0.25f}));
    // 256 * 256 overflows f16 (max 65504); formed in f32 and halved it is 32768, exact in both.
    Tensor big = Tensor::from_vector({256}, {1}).to(t);
    EXPECT_EQ(values(addcmul(Tensor::zeros({1}).to(t), big, big, 0.5f)), std::vector<float>({32768}));
    // 1 + 2^-12 is neither an f16 nor a bf16 value: rounded once, to nearest even, it is 1.
    Tensor one = Tensor::from_vector({1}, {1}).to(t);
    Tensor tiny = Tensor::from_vector({1.0f / 4096}, {1}).to(t);
    EXPECT_EQ(values(addcmul(one, tiny, one)), std::vector<float>({1.0f}));
  }
}

TEST(Addcmul, EmptyTensorsAreFine) {
  Tensor a = Tensor::empty({0, 3});
  Tensor b = Tensor::empty({3});
  EXPECT_EQ(mul(a, b).shape(), Shape({0, 3}));
}

// ---- backward: the formulas documented in nn/ops.hpp ----

TEST(MulGrad, MatchesFiniteDifferences) {
  auto fwd = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], in[1])}; };
  auto bwd = [](const std::vector<Tensor>& in, const std::vector<Tensor>& dy) {
    return std::vector<Tensor>{mul(dy[0], in[1]), mul(dy[0], in[0])};
  };
  EXPECT_GRADCHECK(fwd, bwd, {random_tensor({3, 5}, 11), random_tensor({3, 5}, 12)});
}

TEST(MulGrad, BroadcastOperandSumsBackToItsShape) {
  auto fwd = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], in[1])}; };
  auto bwd = [](const std::vector<Tensor>& in, const std::vector<Tensor>& dy) {
    return std::vector<Tensor>{mul(dy[0], in[1]), sum_to_shape(mul(dy[0], in[0]), in[1].shape())};
  };
  EXPECT_GRADCHECK(fwd, bwd, {random_tensor({2, 4, 6}, 13), random_tensor({6}, 14)});
}

TEST(AddcmulGrad, MatchesFiniteDifferences) {
  constexpr float kAlpha = -1.5f;
  auto fwd = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{addcmul(in[0], in[1], in[2], kAlpha)}; };
  auto bwd = [](const std::vector<Tensor>& in, const std::vector<Tensor>& dy) {
    // dc = dy; da = alpha * dy * b and db = alpha * dy * a, each one addcmul_ into a zeroed gradient.
    Tensor da = Tensor::zeros(in[1].shape()), db_full = Tensor::zeros(in[1].shape());
    addcmul_(da, dy[0], in[2], kAlpha);
    addcmul_(db_full, dy[0], in[1], kAlpha);
    return std::vector<Tensor>{dy[0], da, sum_to_shape(db_full, in[2].shape())};
  };
  EXPECT_GRADCHECK(fwd, bwd, {random_tensor({4, 7}, 15), random_tensor({4, 7}, 16), random_tensor({4, 7}, 17)});
  EXPECT_GRADCHECK(fwd, bwd, {random_tensor({4, 7}, 18), random_tensor({4, 7}, 19), random_tensor({7}, 20)});
}

TEST(AddcmulGrad, AccumulatesIntoAnExistingGradient) {
  Tensor dy = Tensor::from_vector({1, 2}, {2});
  Tensor b = Tensor::from_vector({3, -1}, {2});
  Tensor da = Tensor::from_vector({10, 10}, {2});
  addcmul_(da, dy, b, 0.5f);  // da += 0.5 dy b
  EXPECT_EQ(values(da), std::vector<float>({11.5f, 9}));
}

// ---- bad operands ----

TEST(MulErrors, ShapeMismatchNamesBothShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 2});
  try {
    mul(a, b);
    FAIL() << "mul of [2, 3] and [3, 2] did not throw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[2, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[3, 2]"), std::string::npos) << what;
  }
  EXPECT_THROW(mul(Tensor::zeros({3}), Tensor::zeros({2, 3})), InvalidArgument);  // only b broadcasts
  EXPECT_THROW(addcmul(Tensor::zeros({3}), a, Tensor::zeros({3})), InvalidArgument);  // c must be a's shape
  Tensor c = Tensor::zeros({2, 2});
  EXPECT_THROW(addcmul_(c, a, a), InvalidArgument);
}

TEST(MulErrors, DtypeMismatchAndUnsupportedDtypes) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_THROW(mul(a, a.to(DType::f16)), InvalidArgument);
  EXPECT_THROW(mul(a.to(DType::bf16), a.to(DType::f16)), InvalidArgument);
  EXPECT_THROW(addcmul(a.to(DType::bf16), a, a), InvalidArgument);
  Tensor i = Tensor::from_vector_i32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THROW(mul(i, i), InvalidArgument);
}

TEST(MulErrors, UndefinedAndStridedDestination) {
  Tensor a = Tensor::zeros({2, 3});
  EXPECT_THROW(mul(Tensor{}, a), InvalidArgument);
  EXPECT_THROW(mul(a, Tensor{}), InvalidArgument);
  EXPECT_THROW(addcmul(Tensor{}, a, a), InvalidArgument);
  Tensor strided = Tensor::zeros({3, 2}).transpose(0, 1);
  EXPECT_THROW(addcmul_(strided, a, a), InvalidArgument);
}

TEST(MulErrors, EveryCpuImplementationRefusesMismatchedShapes) {
  // Called through the registry directly (as the parity walk does), not through mul().
  const OpDef& def = OpRegistry::instance().get("addcmul");
  int tried = 0;
  for (const OpImpl& impl : def.impls) {
    if (impl.device != DeviceType::cpu) continue;
    OpCall call{{Tensor::zeros({2, 3}), Tensor::zeros({2})}, {Tensor::empty({2, 3})}, Attrs()};
    ASSERT_TRUE(!impl.accepts || impl.accepts(call).empty()) << impl.name;
    EXPECT_THROW(impl.run(call), InvalidArgument) << impl.name;
    OpCall mixed{{Tensor::zeros({2, 3}), Tensor::zeros({2, 3}).to(DType::f16)}, {Tensor::empty({2, 3})}, Attrs()};
    EXPECT_THROW(impl.run(mixed), InvalidArgument) << impl.name;
    ++tried;
  }
  EXPECT_GE(tried, 2) << "expected cpu.tbb and cpu.ref";
}

TEST(AddcmulRegistry, RegisteredWithReferenceCasesAndATbbImplementation) {
  const OpDef* def = OpRegistry::instance().find("addcmul");
  ASSERT_NE(def, nullptr);
  ASSERT_TRUE(static_cast<bool>(def->make_cases));
  const auto cases = def->make_cases(1);
  bool has_c = false, has_no_c = false, has_bcast = false, has_f16 = false, has_bf16 = false;
  for (const OpCall& c : cases) {
    (c.inputs.size() > 2 && c.inputs[2].defined() ? has_c : has_no_c) = true;
    has_bcast |= c.inputs[1].numel() < c.inputs[0].numel();
    has_f16 |= c.inputs[0].dtype() == DType::f16;
    has_bf16 |= c.inputs[0].dtype() == DType::bf16;
  }
  EXPECT_TRUE(has_c && has_no_c && has_bcast && has_f16 && has_bf16);
  std::vector<std::string> cpu_impls;
  for (const OpImpl& impl : def->impls)
    if (impl.device == DeviceType::cpu) cpu_impls.push_back(impl.name);
  EXPECT_EQ(cpu_impls, std::vector<std::string>({"cpu.tbb", "cpu.ref"}));
  // Every case, f16 and bf16 included, goes to the parallel implementation.
  for (const OpCall& c : cases) EXPECT_EQ(OpRegistry::instance().select(*def, c, DeviceType::cpu).name, "cpu.tbb");
}

}  // namespace
}  // namespace benchhost::nn
