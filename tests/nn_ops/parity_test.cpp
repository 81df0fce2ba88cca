// One test that walks the op registry (ggml's test-backend-ops idea): for every op with example
// cases, every implementation on every device type is run on the same inputs and compared with
// the op's plain reference implementation on the CPU. On the CPU this checks the optimised
// implementations (oneDNN, oneTBB kernels) against the plain loops; on a machine with a GPU it
// checks the CUDA implementations; without one the CUDA instances skip, saying why.

#include <gtest/gtest.h>

#include "benchhost/device.hpp"
#include "benchhost/nn/registry.hpp"
#include "common/gradcheck.hpp"
#include "nn_ops/registry_walk.hpp"

namespace benchhost::nn {
namespace {

struct ParityParam {
  std::string op;
  DeviceType device;
};

std::vector<ParityParam> all_params() {
  std::vector<ParityParam> out;
  for (const auto& name : OpRegistry::instance().op_names()) {
    const OpDef* def = OpRegistry::instance().find(name);
    if (!def->make_cases) continue;
    out.push_back({name, DeviceType::cpu});
    out.push_back({name, DeviceType::cuda});
  }
  return out;
}

Device device_of(DeviceType t) { return t == DeviceType::cpu ? Device::cpu() : Device::cuda(0); }

// A copy of the call on `device`: inputs moved there, outputs cloned (accumulating outputs keep
// their starting values).
OpCall copy_to(const OpCall& c, Device device) {
  OpCall out;
  out.attrs = c.attrs;
  for (const Tensor& t : c.inputs) out.inputs.push_back(t.defined() ? t.to(device) : t);
  for (const Tensor& t : c.outputs) out.outputs.push_back(t.defined() ? t.clone().to(device) : t);
  return out;
}

void PrintTo(const ParityParam& p, std::ostream* os) {
  *os << p.op << (p.device == DeviceType::cpu ? " on cpu" : " on cuda");
}

class OpParity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(OpParity, MatchesCpuReference) {
  const ParityParam& p = GetParam();
  const Device device = device_of(p.device);
  std::string why;
  if (!device_available(device, &why)) GTEST_SKIP() << device.str() << " is not available here: " << why;
  const OpDef& def = OpRegistry::instance().get(p.op);
  const OpImpl* ref = cpu_reference(def);
  ASSERT_NE(ref, nullptr) << p.op << " has no CPU reference implementation";

  int compared = 0;
  const auto cases = def.make_cases(20261122);
  ASSERT_FALSE(cases.empty()) << p.op << " has no example cases";
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    OpCall expected = copy_to(cases[ci], Device::cpu());
    ref->run(expected);
    for (const auto& impl : def.impls) {
      if (impl.device != p.device || &impl == ref) continue;
      OpCall got = copy_to(cases[ci], device);
      const std::string refusal = impl.accepts ? impl.accepts(got) : std::string();
      if (!refusal.empty()) {
        // A refusal is allowed only if some other implementation on this device accepts the case.
        EXPECT_NO_THROW(OpRegistry::instance().select(def, got, p.device))
            << p.op << " case " << ci << ": " << impl.name << " refused (" << refusal << ") and no other implementation accepts it";
        continue;
      }
      ASSERT_NO_THROW(impl.run(got)) << p.op << " case " << ci << " on " << impl.name;
      ASSERT_EQ(got.outputs.size(), expected.outputs.size());
      for (std::size_t o = 0; o < got.outputs.size(); ++o) {
        if (!expected.outputs[o].defined()) continue;
        EXPECT_TRUE(benchhost::testing::tensors_close(got.outputs[o].to(Device::cpu()), expected.outputs[o], def.atol, def.rtol))
            << p.op << " case " << ci << " (" << cases[ci].attrs.str() << ") output " << o << ": " << impl.name << " vs " << ref->name;
      }
      ++compared;
    }
  }
  if (compared == 0)
    GTEST_SKIP() << p.op << " has no non-reference implementation on " << device.str() << " to compare";
  RecordProperty("compared_calls", compared);
}

INSTANTIATE_TEST_SUITE_P(Registry, OpParity, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<ParityParam>& info) {
                           return info.param.op + (info.param.device == DeviceType::cpu ? "_cpu" : "_cuda");
                         });

// The ops this issue requires are all registered, each with a CPU reference and example cases.
TEST(OpRegistryContents, EveryRequiredOpIsRegisteredWithReferenceAndCases) {
  for (const char* name : {"matmul", "linear_forward", "bias_backward", "activation_forward", "activation_backward",
                           "layernorm_forward", "layernorm_backward", "softmax_forward", "softmax_backward",
                           "log_softmax_forward", "log_softmax_backward", "dropout_forward", "dropout_backward",
                           "embedding_forward", "embedding_backward", "embedding_backward_sparse", "sdpa_forward",
                           "sdpa_backward", "add", "addcmul", "concat", "split", "permute", "sum", "amax", "amax_backward",
                           "cast", "cross_entropy_forward", "cross_entropy_backward", "bce_with_logits_forward",
                           "bce_with_logits_backward"}) {
    const OpDef* def = OpRegistry::instance().find(name);
    ASSERT_NE(def, nullptr) << name << " is not registered";
    EXPECT_TRUE(static_cast<bool>(def->make_cases)) << name << " has no example cases";
    EXPECT_NE(cpu_reference(*def), nullptr) << name << " has no CPU reference";
    EXPECT_FALSE(def->impls.back().device == DeviceType::cpu && !def->impls.back().is_reference &&
                 def->impls.back().priority > 0)
        << name << ": the reference must come last among CPU implementations";
  }
}

}  // namespace
}  // namespace benchhost::nn
