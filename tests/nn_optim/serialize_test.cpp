#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "benchhost/nn/serialize.hpp"

using namespace benchhost;
namespace fs = std::filesystem;

namespace {

// weight [2,3] + bias [3] (no decay) + bn.{gamma [3], running_mean [3], running_var [3]}
class Tiny : public nn::Module {
 public:
  explicit Tiny(float base = 0.0f, std::int64_t cols = 3) : Module("tiny") {
    std::vector<float> w(2 * cols);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = base + static_cast<float>(i);
    register_parameter("weight", Tensor::from_vector(w, {2, cols}));
    register_parameter("bias", Tensor::from_vector({base, base + 0.5f, base - 0.5f}, {3}), false);
    auto& bn = register_module("bn", std::make_unique<nn::Module>());
    bn.register_parameter("gamma", Tensor::full({3}, 1.0 + base), false);
    bn.register_buffer("running_mean", Tensor::full({3}, 0.25 + base));
    bn.register_buffer("running_var", Tensor::full({3}, 2.0 + base));
  }
};

std::vector<float> all_values(nn::Module& m) {
  std::vector<float> out;
  for (auto* p : m.parameters())
    for (float x : p->value.to_float_vector()) out.push_back(x);
  for (auto& [n, t] : m.buffers())
    for (float x : t->to_float_vector()) out.push_back(x);
  return out;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("nn_optim_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<char> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

template <class T> void poke(std::vector<char>& b, std::size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}

std::string data_error_message(const std::string& path) {
  try {
    nn::load_tensors(path);
  } catch (const DataError& e) {
    return e.message();
  }
  return "(no DataError)";
}

}  // namespace

TEST(Weights, ModuleRoundTripIncludesBuffers) {
  TempDir dir;
  Tiny a(1.0f), b(-7.0f);
  nn::save_weights(a, dir.file("tiny.bhw"));
  EXPECT_FALSE(fs::exists(dir.file("tiny.bhw.tmp")));
  EXPECT_NE(all_values(a), all_values(b));
  auto res = nn::load_weights(b, dir.file("tiny.bhw"));
  EXPECT_EQ(all_values(a), all_values(b));
  EXPECT_EQ(res.loaded.size(), 5u);
  EXPECT_TRUE(res.missing.empty());
  EXPECT_TRUE(res.unexpected.empty());
  auto names = nn::load_tensors(dir.file("tiny.bhw"));
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names[0].name, "weight");
  EXPECT_EQ(names[2].name, "bn.gamma");
  EXPECT_EQ(names[3].name, "bn.running_mean");
}

TEST(Weights, AllDtypesScalarsAndEmptyTensorsRoundTrip) {
  TempDir dir;
  std::vector<nn::NamedTensor> ts = {
      {"f32", Tensor::from_vector({1.5f, -2.0f, 3.25f}, {3})},
      {"f16", Tensor::from_vector({0.5f, 65504.0f}, {2}).to(DType::f16)},
      {"bf16", Tensor::from_vector({1.0f, -3.0f, 1e30f}, {3}).to(DType::bf16)},
      {"i64", Tensor::from_vector_i64({1, -2, 1ll << 40}, {3})},
      {"i32", Tensor::from_vector_i32({7, -8}, {1, 2})},
      {"scalar", Tensor::full({}, 4.0)},
      {"empty", Tensor::zeros({0, 3})},
      {"strided", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1)},
  };
  nn::save_tensors(dir.file("all.bhw"), ts);
  auto back = nn::load_tensors(dir.file("all.bhw"));
  ASSERT_EQ(back.size(), ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    SCOPED_TRACE(ts[i].name);
    EXPECT_EQ(back[i].name, ts[i].name);
    EXPECT_EQ(back[i].tensor.dtype(), ts[i].tensor.dtype());
    EXPECT_EQ(back[i].tensor.shape(), ts[i].tensor.shape());
    if (ts[i].tensor.dtype() == DType::i64) {
      EXPECT_EQ(back[i].tensor.item({2}), static_cast<double>(1ll << 40));
    } else if (ts[i].tensor.numel() > 0) {
      EXPECT_EQ(back[i].tensor.to_float_vector(), ts[i].tensor.to_float_vector());
    }
  }
  EXPECT_THROW(nn::save_tensors(dir.file("dup.bhw"), {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}),
               InvalidArgument);
  EXPECT_THROW(nn::save_tensors(dir.file("noname.bhw"), {{"", Tensor::zeros({1})}}), InvalidArgument);
}

TEST(Weights, LayoutMatchesTheDocumentedExample) {
  // docs/weights-format.md: one f32 tensor "w" = [1, 2]: data at offset 64, 72 bytes in all.
  TempDir dir;
  nn::save_tensors(dir.file("w.bhw"), {{"w", Tensor::from_vector({1.0f, 2.0f}, {2})}});
  auto b = read_bytes(dir.file("w.bhw"));
  ASSERT_EQ(b.size(), 72u);
  EXPECT_EQ(std::string(b.data(), 8), "BHWEIGHT");
  float data[2];
  std::memcpy(data, b.data() + 64, 8);
  EXPECT_EQ(data[0], 1.0f);
  EXPECT_EQ(data[1], 2.0f);
  std::int64_t dim;
  std::memcpy(&dim, b.data() + 33, 8);
  EXPECT_EQ(dim, 2);
}

TEST(Weights, RejectsTruncatedFilesAtEveryLength) {
  TempDir dir;
  Tiny a;
  nn::save_weights(a, dir.file("good.bhw"));
  auto bytes = read_bytes(dir.file("good.bhw"));
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    write_bytes(dir.file("cut.bhw"), std::vector<char>(bytes.begin(), bytes.begin() + len));
    EXPECT_THROW(nn::load_tensors(dir.file("cut.bhw")), DataError) << "length " << len;
  }
  Tiny b(5.0f);
  const auto before = all_values(b);
  EXPECT_THROW(nn::load_weights(b, dir.file("cut.bhw")), DataError);
  EXPECT_EQ(all_values(b), before) << "a failed load must leave the module unchanged";
}

TEST(Weights, RejectsCorruptHeadersWithoutHugeAllocations) {
  TempDir dir;
  nn::save_tensors(dir.file("w.bhw"), {{"w", Tensor::from_vector({1.0f, 2.0f}, {2})}});
  const auto good = read_bytes(dir.file("w.bhw"));
  const auto bad = dir.file("bad.bhw");
  auto check = [&](const char* what, auto mutate, const char* expect) {
    auto b = good;
    mutate(b);
    write_bytes(bad, b);
    const std::string msg = data_error_message(bad);
    EXPECT_NE(msg.find(expect), std::string::npos) << what << ": " << msg;
    EXPECT_NE(msg.find("bad.bhw"), std::string::npos) << what << " must name the file: " << msg;
  };
  check("magic", [](auto& b) { b[0] = 'X'; }, "bad magic");
  check("version", [](auto& b) { poke<std::uint32_t>(b, 8, 2); }, "version 2");
  check("count", [](auto& b) { poke<std::uint64_t>(b, 16, 1ull << 60); }, "claims");
  check("name length", [](auto& b) { poke<std::uint32_t>(b, 24, 0xffffffffu); }, "name length");
  check("dtype", [](auto& b) { b[29] = 99; }, "dtype code 99");
  check("rank", [](auto& b) { b[30] = 40; }, "dimensions");
  check("dim vs bytes", [](auto& b) { poke<std::int64_t>(b, 33, 1ll << 40); }, "should have");
  check("huge but consistent", [](auto& b) {
    poke<std::int64_t>(b, 33, 1ll << 40);
    poke<std::uint64_t>(b, 41, 4ull << 40);
  }, "truncated");
  check("negative dim", [](auto& b) { poke<std::int64_t>(b, 33, -2); }, "negative");
  check("checksum", [](auto& b) { b[66] ^= 0x01; }, "checksum");
  check("trailing", [](auto& b) { b.push_back(0); }, "unexpected bytes");
  EXPECT_THROW(nn::load_tensors(dir.file("does-not-exist.bhw")), DataError);
}

TEST(Weights, MismatchesAgainstTheModelAreClearErrors) {
  TempDir dir;
  Tiny a(1.0f);
  nn::save_weights(a, dir.file("tiny.bhw"));
  // Shape mismatch names the tensor and both shapes; the module is unchanged.
  Tiny wide(3.0f, 4);
  const auto before = all_values(wide);
  try {
    nn::load_weights(wide, dir.file("tiny.bhw"));
    ADD_FAILURE() << "shape mismatch accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("'weight'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[2, 3]"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("[2, 4]"), std::string::npos) << e.message();
  }
  EXPECT_EQ(all_values(wide), before);

  // Missing names: strict refuses and lists them; non-strict loads the rest and reports them.
  auto subset = nn::load_tensors(dir.file("tiny.bhw"));
  subset.erase(subset.begin() + 1);  // drop "bias"
  subset.push_back({"head.weight", Tensor::zeros({1})});
  nn::save_tensors(dir.file("subset.bhw"), subset);
  Tiny b(9.0f);
  try {
    nn::load_weights(b, dir.file("subset.bhw"));
    ADD_FAILURE() << "missing name accepted in strict mode";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("bias"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("head.weight"), std::string::npos) << e.message();
  }
  auto res = nn::load_weights(b, dir.file("subset.bhw"), /*strict=*/false);
  EXPECT_EQ(res.missing, std::vector<std::string>{"bias"});
  EXPECT_EQ(res.unexpected, std::vector<std::string>{"head.weight"});
  EXPECT_EQ(b.parameters()[0]->value.to_float_vector(), a.parameters()[0]->value.to_float_vector());
  EXPECT_EQ(b.parameters()[1]->value.to_float_vector()[0], 9.0f);  // bias untouched

  // dtype mismatch
  auto halfs = nn::load_tensors(dir.file("tiny.bhw"));
  halfs[0].tensor = halfs[0].tensor.to(DType::f16);
  nn::save_tensors(dir.file("f16.bhw"), halfs);
  EXPECT_THROW(nn::load_weights(b, dir.file("f16.bhw")), InvalidArgument);
}

TEST(Weights, ParameterCountsAndSummary) {
  Tiny t;
  auto c = nn::count_parameters(t);
  EXPECT_EQ(c.total, 12);
  EXPECT_EQ(c.total, t.num_parameters());
  EXPECT_EQ(c.tensors, 3);
  EXPECT_EQ(c.with_decay, 6);
  EXPECT_EQ(c.without_decay, 6);
  EXPECT_EQ(c.buffer_elements, 6);
  EXPECT_EQ(c.bytes, 48);
  const std::string grouped = nn::parameter_summary(t, 1);
  EXPECT_NE(grouped.find("(root)"), std::string::npos) << grouped;
  EXPECT_NE(grouped.find("bn"), std::string::npos) << grouped;
  EXPECT_NE(grouped.find("total: 12 parameters in 3 tensors"), std::string::npos) << grouped;
  const std::string flat = nn::parameter_summary(t, 0);
  EXPECT_NE(flat.find("bn.gamma"), std::string::npos) << flat;
  EXPECT_NE(flat.find("[2, 3]"), std::string::npos) << flat;
}

TEST(Weights, PythonPeerModuleRoundTrip) {
  const char* py = "/usr/bin/python3";
  if (!fs::exists(py)) GTEST_SKIP() << py << " is missing";
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "numpy is missing for /usr/bin/python3";
  TempDir dir;
  nn::save_tensors(dir.file("in.bhw"), {
      {"w", Tensor::from_vector({1.5f, -2.0f, 3.25f, 4.0f}, {2, 2})},
      {"h", Tensor::from_vector({0.5f, -1.0f}, {2}).to(DType::f16)},
      {"b", Tensor::from_vector({1.0f, -3.0f, 0.15625f}, {3}).to(DType::bf16)},
      {"ids", Tensor::from_vector_i64({3, 1ll << 40}, {2})},
  });
  // The Python side reads, checks, transforms and writes; C++ reads its output.
  const std::string script = dir.file("peer.py");
  {
    std::ofstream f(script);
    f << "import sys\n"
      << "sys.path.insert(0, '" << BENCHHOST_SOURCE_DIR << "/tools/peers')\n"
      << "import numpy as np, weights\n"
      << "d = weights.load(sys.argv[1], raw=True)\n"
      << "assert list(d) == ['w', 'h', 'b', 'ids'], list(d)\n"
      << "assert d['w'].dtype == np.float32 and d['w'].shape == (2, 2)\n"
      << "assert d['h'].dtype == np.float16 and float(d['h'][1]) == -1.0\n"
      << "assert isinstance(d['b'], weights.BF16)\n"
      << "assert weights.bf16_bits_to_float32(d['b'].view(np.ndarray))[2] == 0.15625\n"
      << "assert int(d['ids'][1]) == 1 << 40\n"
      << "f = weights.load(sys.argv[1])\n"
      << "assert f['b'].dtype == np.float32 and f['b'][1] == -3.0\n"
      << "d['w'] = d['w'] * 2\n"
      << "d['py.extra'] = np.arange(6, dtype=np.int32).reshape(2, 3)\n"
      << "try:\n"
      << "    import torch\n"
      << "    t = weights.to_torch(d)\n"
      << "    assert t['b'].dtype == torch.bfloat16 and float(t['b'][2]) == 0.15625\n"
      << "    d = weights.from_torch(t)\n"
      << "except ImportError:\n"
      << "    print('torch missing: skipped the torch conversion')\n"
      << "weights.save(sys.argv[2], d)\n";
  }
  const std::string cmd = std::string(py) + " " + script + " " + dir.file("in.bhw") + " " +
                          dir.file("out.bhw");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto out = nn::load_tensors(dir.file("out.bhw"));
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].name, "w");
  EXPECT_EQ(out[0].tensor.to_float_vector(), (std::vector<float>{3.0f, -4.0f, 6.5f, 8.0f}));
  EXPECT_EQ(out[1].tensor.dtype(), DType::f16);
  EXPECT_EQ(out[1].tensor.to_float_vector(), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(out[2].tensor.dtype(), DType::bf16);
  EXPECT_EQ(out[2].tensor.to_float_vector(), (std::vector<float>{1.0f, -3.0f, 0.15625f}));
  EXPECT_EQ(out[3].tensor.dtype(), DType::i64);
  EXPECT_EQ(out[3].tensor.item({1}), static_cast<double>(1ll << 40));
  EXPECT_EQ(out[4].name, "py.extra");
  EXPECT_EQ(out[4].tensor.dtype(), DType::i32);
  EXPECT_EQ(out[4].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(out[4].tensor.item({1, 2}), 5.0);
  // A corrupt file is refused by the Python reader too.
  auto bytes = read_bytes(dir.file("out.bhw"));
  bytes[bytes.size() - 1] ^= 0x10;
  write_bytes(dir.file("corrupt.bhw"), bytes);
  const std::string bad = std::string(py) + " -c \"import sys; sys.path.insert(0, '" +
                          BENCHHOST_SOURCE_DIR + "/tools/peers'); import weights; weights.load('" +
                          dir.file("corrupt.bhw") + "')\" 2>/dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0) << "weights.py accepted a corrupt file";
}

// A pretrained part (Tiny's "bn." subtree) from a file that names it without the prefix and holds
// more: all of it copied, the rest of the module untouched; a missing tensor, a wrong shape or an
// integer tensor is a DataError naming the file and the tensor, and nothing changes.
TEST(Weights, PretrainedPartByPrefix) {
  TempDir dir;
  Tiny m(0.0f);
  const std::vector<float> before = all_values(m);
  nn::save_tensors(dir.file("part.bhw"), {{"gamma", Tensor::full({3}, 4.0)},
                                          {"running_mean", Tensor::full({3}, 5.0)},
                                          {"running_var", Tensor::full({3}, 6.0)},
                                          {"fc.weight", Tensor::full({7}, 1.0)}});
  EXPECT_EQ(nn::load_pretrained_part(m, dir.file("part.bhw"), "bn.", "test part"), 3u);
  const std::vector<float> after = all_values(m);
  for (std::size_t i = 0; i < 9; ++i) EXPECT_EQ(after[i], before[i]);  // weight and bias kept
  EXPECT_EQ(m.parameters()[2]->value.to_float_vector(), (std::vector<float>{4, 4, 4}));
  EXPECT_EQ(m.buffers()[1].second->to_float_vector(), (std::vector<float>{6, 6, 6}));

  Tiny fresh(0.0f);
  const std::vector<float> untouched = all_values(fresh);
  auto error_of = [&](const std::vector<nn::NamedTensor>& ts) {
    nn::save_tensors(dir.file("bad.bhw"), ts);
    try {
      nn::load_pretrained_part(fresh, dir.file("bad.bhw"), "bn.", "test part");
    } catch (const DataError& e) {
      return e.message();
    }
    return std::string("(no DataError)");
  };
  std::string msg = error_of({{"gamma", Tensor::full({3}, 4.0)}, {"running_mean", Tensor::full({3}, 5.0)}});
  EXPECT_NE(msg.find("has no tensor 'running_var'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad.bhw"), std::string::npos) << msg;
  msg = error_of({{"gamma", Tensor::full({4}, 4.0)}, {"running_mean", Tensor::full({3}, 5.0)}, {"running_var", Tensor::full({3}, 6.0)}});
  EXPECT_NE(msg.find("'gamma' has shape [4], the model needs [3]"), std::string::npos) << msg;
  msg = error_of({{"gamma", Tensor::from_vector_i64({1, 2, 3}, {3})}, {"running_mean", Tensor::full({3}, 5.0)},
                  {"running_var", Tensor::full({3}, 6.0)}});
  EXPECT_NE(msg.find("expected a floating type"), std::string::npos) << msg;
  EXPECT_EQ(all_values(fresh), untouched);
}
