// nn::LSTM against torch.nn.LSTM (tools/peers/lstm_peer.py, Debian's python3-torch): the same
// weights, input and initial states; the output, the final states and every gradient (input,
// initial states, each parameter) must agree to 1e-5 relative (L2 norm; the largest elementwise
// difference within 1e-4 of the largest value). Torch runs in float64 for the small cases, so
// their differences are our f32 rounding alone, and in float32 at RNN-T size (time). Skipped
// visibly when /usr/bin/python3 has no torch.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "benchhost/nn/lstm.hpp"
#include "common/gradcheck.hpp"
#include "common/lm_peer.hpp"  // have_torch()

namespace benchhost::nn {
namespace {

namespace fs = std::filesystem;
using benchhost::testing::random_tensor;

void write_raw(const fs::path& p, const Tensor& t) {
  const auto v = t.to_float_vector();
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_raw(const fs::path& p, std::size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_TRUE(f.good()) << "could not read " << n << " floats from " << p;
  return v;
}

// Stack per-layer [B, H] tensors into one [L, B, H] buffer.
std::vector<float> stack(const std::vector<Tensor>& ts) {
  std::vector<float> out;
  for (const Tensor& t : ts) {
    const auto v = t.to_float_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

struct Agreement {
  double rel_l2 = 0, max_rel = 0;  // max |a - ref| / max |ref|
};

Agreement compare(const std::vector<float>& got, const std::vector<float>& ref) {
  Agreement a;
  a.rel_l2 = benchhost::testing::relative_l2({got}, {ref});
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - ref[i]));
  }
  a.max_rel = got.size() == ref.size() ? diff / std::max(scale, 1e-30) : INFINITY;
  return a;
}

// One comparison: our module's results for a case, written next to the inputs for the peer.
struct PeerCase {
  std::int64_t T, B, I, H, L;
  bool torch_f64;  // float64 makes the differences ours alone; float32 is faster at RNN-T size
  fs::path dir;
  std::vector<std::pair<std::string, std::vector<float>>> ours;  // (peer file stem, values)
  double ours_ms = 0;
};

void prepare(PeerCase& c) {
  const std::int64_t T = c.T, B = c.B, I = c.I, H = c.H, L = c.L;
  c.dir = fs::temp_directory_path() / fmt::format("bh_lstm_peer_{}_{}x{}x{}x{}x{}", ::getpid(), T, B, I, H, L);
  fs::create_directories(c.dir);
  LSTM m({I, H, L}, nullptr, 0, 17);
  const Tensor x = random_tensor({T, B, I}, 1), dy = random_tensor({T, B, H}, 2);
  std::vector<LstmState> initial, dfinal;
  for (std::int64_t k = 0; k < L; ++k) {
    initial.push_back({random_tensor({B, H}, 10 + k), random_tensor({B, H}, 20 + k)});
    dfinal.push_back({random_tensor({B, H}, 30 + k), random_tensor({B, H}, 40 + k)});
  }
  {
    std::ofstream spec(c.dir / "spec.txt");
    spec << T << " " << B << " " << I << " " << H << " " << L << (c.torch_f64 ? " float64\n" : " float32\n");
  }
  write_raw(c.dir / "x.bin", x);
  write_raw(c.dir / "dy.bin", dy);
  auto column = [](const std::vector<LstmState>& s, bool h) {
    std::vector<Tensor> ts;
    for (const auto& st : s) ts.push_back(h ? st.h : st.c);
    return stack(ts);
  };
  auto write_vec = [&](const char* name, const std::vector<float>& v) {
    std::ofstream f(c.dir / name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  };
  write_vec("h0.bin", column(initial, true));
  write_vec("c0.bin", column(initial, false));
  write_vec("dhT.bin", column(dfinal, true));
  write_vec("dcT.bin", column(dfinal, false));
  for (auto* p : m.parameters()) write_raw(c.dir / (p->name + ".bin"), p->value);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<LstmState> fin, dinit;
  const Tensor y = m.forward(x, initial, &fin);
  const Tensor dx = m.backward(dy, dfinal, &dinit);
  c.ours_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  c.ours = {{"y", y.to_float_vector()},          {"hT", column(fin, true)},    {"cT", column(fin, false)},
            {"dx", dx.to_float_vector()},        {"dh0", column(dinit, true)}, {"dc0", column(dinit, false)}};
  for (auto* p : m.parameters()) c.ours.emplace_back("grad_" + p->name, p->grad.to_float_vector());
}

void compare_with_peer(const PeerCase& c, double tol) {
  SCOPED_TRACE(fmt::format("T {} B {} I {} H {} layers {}", c.T, c.B, c.I, c.H, c.L));
  std::printf("T %ld B %ld I %ld H %ld layers %ld, torch in %s (ours fwd+bwd %.1f ms):\n", static_cast<long>(c.T),
              static_cast<long>(c.B), static_cast<long>(c.I), static_cast<long>(c.H), static_cast<long>(c.L),
              c.torch_f64 ? "float64" : "float32", c.ours_ms);
  for (const auto& [stem, got] : c.ours) {
    const Agreement a = compare(got, read_raw(c.dir / (stem + ".bin"), got.size()));
    EXPECT_LE(a.rel_l2, tol) << stem << " relative L2 " << a.rel_l2;
    EXPECT_LE(a.max_rel, 10 * tol) << stem << " max |diff| / max |torch| " << a.max_rel;
    std::printf("  %-20s rel_l2 %.2e  max|diff|/max|torch| %.2e\n", stem.c_str(), a.rel_l2, a.max_rel);
  }
}

// Three small layers, two medium ones and an RNN-T encoder-sized pair (240 -> 1024 -> 1024) over
// a short sequence, all against one torch process (its start-up is most of the test's time).
TEST(LstmPeer, MultiLayerOutputsStatesAndGradientsMatchTorch) {
  if (!test_support::have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch (apt-get install python3-torch)";
  std::vector<PeerCase> cases = {{6, 3, 7, 5, 3, true, {}, {}, 0}, {9, 2, 16, 24, 2, true, {}, {}, 0},
                                 {20, 4, 240, 1024, 2, false, {}, {}, 0}};
  std::string dirs;
  for (PeerCase& c : cases) {
    prepare(c);
    dirs += " " + c.dir.string();
  }
  const std::string cmd =
      fmt::format("/usr/bin/python3 -W ignore {}/tools/peers/lstm_peer.py check{} 2>&1", BENCHHOST_SOURCE_DIR, dirs);
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << cmd;
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) text += buf;
  const int status = ::pclose(p);
  const double peer_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(status, 0) << "the peer failed: " << text;
  std::printf("peer process (one torch start-up, every case): %.0f ms\n", peer_ms);
  for (const PeerCase& c : cases) {
    compare_with_peer(c, 1e-5);
    fs::remove_all(c.dir);
  }
}

}  // namespace
}  // namespace benchhost::nn
