#include "model_costs.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace benchhost::lm {

std::int64_t transformer_layer_parameters(const ModelShape& s) {
  const std::int64_t H = s.hidden, F = s.ffn;
  return 4 * H * H + 2 * H * F + 9 * H + F;
}

std::int64_t bert_encoder_parameters(const ModelShape& s) {
  const std::int64_t H = s.hidden;
  const std::int64_t embeddings = s.vocab * H + s.max_positions * H + 2 * H + 2 * H;
  const std::int64_t pooler = H * H + H;
  return embeddings + s.layers * transformer_layer_parameters(s) + pooler;
}

std::int64_t bert_parameters(const ModelShape& s) {
  const std::int64_t H = s.hidden;
  const std::int64_t mlm_head = H * H + H + 2 * H + s.vocab;  // transform, LayerNorm, output bias
  const std::int64_t nsp_head = 2 * H + 2;
  return bert_encoder_parameters(s) + mlm_head + nsp_head;
}

std::int64_t gpt_parameters(const ModelShape& s) {
  const std::int64_t H = s.hidden;
  return s.vocab * H + s.max_positions * H + s.layers * transformer_layer_parameters(s) + 2 * H;
}

double bert_train_flops_per_sample(const ModelShape& s, std::int64_t max_predictions) {
  const double H = static_cast<double>(s.hidden), T = static_cast<double>(s.seq_len);
  const double layer_matmul_params = 4 * H * H + 2 * H * static_cast<double>(s.ffn);
  const double encoder = 6 * s.layers * layer_matmul_params * T + 12.0 * s.layers * H * T * T;
  const double mlm = 6 * static_cast<double>(max_predictions) * (H * H + H * static_cast<double>(s.vocab));
  const double pooler_nsp = 6 * (H * H + 2 * H);
  return encoder + mlm + pooler_nsp;
}

double gpt_train_flops_per_sample(const ModelShape& s) {
  const double H = static_cast<double>(s.hidden), T = static_cast<double>(s.seq_len);
  const double matmul_params =
      s.layers * (4 * H * H + 2 * H * static_cast<double>(s.ffn)) + H * static_cast<double>(s.vocab);
  return 6 * matmul_params * T + 12.0 * s.layers * H * T * T;
}

namespace {

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

// One micro-batch of activations, Note [Memory plan].
double activation_bytes(const ModelShape& s, std::int64_t micro_batch, bool mixed_precision) {
  const double T = static_cast<double>(s.seq_len), H = static_cast<double>(s.hidden);
  const double a = static_cast<double>(s.heads);
  const double act_scale = mixed_precision ? 1.0 : 2.0;
  const double per_layer = T * H * (34.0 + 5.0 * a * T / H) * act_scale;
  const double logits = 2.0 * T * static_cast<double>(s.vocab) * 4.0;
  return static_cast<double>(micro_batch) * (per_layer * static_cast<double>(s.layers) + logits);
}

// The smallest tensor x pipeline split under which `p` fits `device_bytes` (TP first, up to 8
// within a node, then PP), into p; false when none does.
bool find_model_parallel_split(const ModelShape& s, double device_bytes, MemoryPlan& p) {
  for (std::int64_t pp = 1; pp <= s.layers; pp *= 2) {
    for (std::int64_t tp = 1; tp <= 8; tp *= 2) {
      if (s.heads % tp != 0) continue;
      // Pipeline stages hold 1/pp of the layers; with 1F1B the first stage keeps pp micro-batches
      // of its activations alive, so activations per device stay ~ one micro-batch of all layers / tp.
      const double per_device = p.state_bytes / static_cast<double>(tp * pp) + p.activation_bytes / static_cast<double>(tp);
      if (per_device <= 0.9 * device_bytes) {
        p.tensor_parallel = tp;
        p.pipeline_parallel = pp;
        p.per_device_bytes_split = per_device;
        return true;
      }
    }
  }
  return false;
}

// Why a plan that does not fit is refused, and the parallelism that would make it fit (`split`).
std::string refusal(const MemoryPlan& p, const ModelShape& s, std::int64_t micro_batch, const std::string& device_name,
                    bool split) {
  const double state_gib = gib(p.state_bytes), act_gib = gib(p.activation_bytes);
  if (split)
    return fmt::format(
        "GPT-3 with {} parameters (layers {}, hidden {}, heads {}, sequence {}) needs {:.1f} GiB per device "
        "without model parallelism ({:.1f} GiB of weights, gradients and Adam state at 16 bytes/parameter + "
        "{:.1f} GiB of activations for a micro-batch of {}), but {} has {:.1f} GiB. It would take tensor "
        "parallelism {} x pipeline parallelism {} = {} devices per model replica ({:.1f} GiB each; data "
        "parallelism then multiplies that by the number of replicas), and this build trains on one device per "
        "replica (data parallelism only). Use a smaller configs/gpt3/*.conf (e.g. 125m.conf or mini.conf).",
        p.parameters, s.layers, s.hidden, s.heads, s.seq_len, gib(p.total_bytes), state_gib, act_gib, micro_batch,
        device_name, gib(p.device_bytes), p.tensor_parallel, p.pipeline_parallel,
        p.tensor_parallel * p.pipeline_parallel, gib(p.per_device_bytes_split));
  return fmt::format(
      "GPT-3 with {} parameters needs {:.1f} GiB per device ({:.1f} GiB state + {:.1f} GiB activations), "
      "but {} has {:.1f} GiB, and even tensor parallelism 8 x pipeline parallelism {} would not fit it. "
      "Use a smaller configs/gpt3/*.conf.",
      p.parameters, gib(p.total_bytes), state_gib, act_gib, device_name, gib(p.device_bytes), s.layers);
}

}  // namespace

MemoryPlan plan_gpt_memory(const ModelShape& s, std::int64_t micro_batch, bool mixed_precision,
                           double device_bytes, const std::string& device_name) {
  MemoryPlan p;
  p.parameters = gpt_parameters(s);
  p.state_bytes = 16.0 * static_cast<double>(p.parameters);
  p.activation_bytes = activation_bytes(s, micro_batch, mixed_precision);
  p.total_bytes = p.state_bytes + p.activation_bytes;
  p.device_bytes = device_bytes;
  p.fits = device_bytes > 0 && p.total_bytes <= 0.9 * device_bytes;  // 10% for workspace/fragmentation
  if (p.fits) {
    p.per_device_bytes_split = p.total_bytes;
    p.message = fmt::format("GPT-3 with {} parameters needs {:.1f} GiB for training state and {:.1f} GiB of "
                            "activations per micro-batch of {}: fits in {:.1f} GiB of {}",
                            p.parameters, gib(p.state_bytes), gib(p.activation_bytes), micro_batch, gib(device_bytes),
                            device_name);
    return p;
  }
  const bool split = find_model_parallel_split(s, device_bytes, p);
  p.message = refusal(p, s, micro_batch, device_name, split);
  return p;
}

}  // namespace benchhost::lm
