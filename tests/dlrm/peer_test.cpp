// A few training steps of the plugin's model match tools/peers/dlrm_peer.py (PyTorch 1.13, same
// weights through a benchhost weight file, same batches from the same generated files).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "benchhost/nn/serialize.hpp"
#include "benchhost/optim/optimizer.hpp"
#include "benchhost/threading.hpp"
#include "criteo.hpp"
#include "model.hpp"
#include "synthetic.hpp"

using namespace benchhost;
namespace fs = std::filesystem;

namespace {

bool python_has_torch() {
  return std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") == 0;
}

std::string run(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  while (pipe && fgets(buf, sizeof buf, pipe.get())) out += buf;
  return out;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

TEST(DlrmPeer, FiveStepsMatchPyTorch) {
  if (!fs::exists("/usr/bin/python3") || !python_has_torch())
    GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not installed: PyTorch peer check skipped";
  const fs::path dir = fs::temp_directory_path() / fmt::format("bh_dlrm_peer_{}", ::getpid());
  fs::remove_all(dir);
  criteo::SyntheticOptions g;
  g.out_dir = (dir / "data").string();
  g.train_days = 1;
  g.rows_per_day = 2048;
  g.eval_rows = 64;
  g.seed = 7;
  for (std::int64_t n : criteo::mlperf_table_sizes()) g.table_sizes.push_back(std::min<std::int64_t>(n, 400));
  criteo::generate_synthetic(g);

  dlrm::DlrmConfig c;
  c.table_sizes = g.table_sizes;
  c.hotness.assign(criteo::mlperf_multi_hot_sizes().begin(), criteo::mlperf_multi_hot_sizes().end());
  c.embedding_dim = 8;
  c.bottom_mlp = {32, 16, 8};
  c.top_mlp = {64, 32, 16, 8, 1};
  c.cross_layers = 3;
  c.cross_rank = 16;
  const std::int64_t batch = 256, steps = 5;
  const float lr = 0.1f;
  set_num_threads(1);
  dlrm::DlrmDcnV2 model(c);
  model.initialize(3);
  const std::string weights = (dir / "init.bhw").string();
  nn::save_weights(model, weights);

  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/tools/peers/dlrm_peer.py check --data-dir {} --num-days 2 --weights {} "
      "--table-sizes {} --multi-hot-sizes {} --embedding-dim {} --bottom-mlp {} --top-mlp {} "
      "--cross-layers {} --cross-rank {} --batch {} --lr {} --steps {} --threads 1",
      BENCHHOST_SOURCE_DIR, g.out_dir, weights, join(c.table_sizes), join(c.hotness),
      c.embedding_dim, join(c.bottom_mlp), join(c.top_mlp), c.cross_layers, c.cross_rank, batch, lr,
      steps);
  const std::string out = run(cmd);
  nlohmann::json peer;
  try {
    peer = nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    FAIL() << "peer output is not JSON: " << out << "\ncommand: " << cmd;
  }

  criteo::CriteoMultiHot train(g.out_dir, 2, criteo::CriteoMultiHot::Split::train, c.table_sizes);
  optim::AdagradOptions ao;
  ao.epsilon = 1e-10f;
  optim::Adagrad opt(model.parameters(), ao);
  auto b = criteo::make_batch(batch, c.hotness);
  for (std::int64_t t = 0; t < steps; ++t) {
    train.read_rows(t * batch, batch, b);
    Tensor logits = model.forward(b.dense, b.sparse);
    const float loss = nn::bce_with_logits_forward(logits, b.labels);
    model.backward(nn::bce_with_logits_backward(logits, b.labels));
    opt.step(lr);
    model.zero_grad_fast();
    const double want = peer["losses"][t].get<double>();
    EXPECT_NEAR(loss, want, 2e-5 + 2e-4 * std::fabs(want)) << "step " << t;
  }
  for (auto* p : model.parameters()) {
    double sum = 0;
    for (float v : p->value.to_float_vector()) sum += std::fabs(v);
    ASSERT_TRUE(peer["param_abs_sums"].contains(p->name)) << p->name;
    const double want = peer["param_abs_sums"][p->name].get<double>();
    EXPECT_NEAR(sum, want, 1e-4 * std::fabs(want) + 1e-5) << p->name;
  }
  fs::remove_all(dir);
}
