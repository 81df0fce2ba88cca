#pragma once
/// @file plugins/lm_common/model_costs.hpp  What a BERT or GPT-3 shape costs, counted without
/// building the model: parameter counts, FLOPs per sample and the memory a training run needs
/// per device.
///
/// Note [Counting parameters]
/// Both models are stacks of the SDK's TransformerBlock, whose parameters per layer are
///   qkv 3H^2 + 3H, attention out H^2 + H, fc1 HF + F, fc2 FH + H, two LayerNorms 4H
///   = 4H^2 + 2HF + 9H + F   (= 12H^2 + 13H with F = 4H).
/// BERT adds token (V H), position (P H) and segment (2 H) embeddings with their LayerNorm (2H),
/// the pooler (H^2 + H), the masked-LM head (transform H^2 + H, LayerNorm 2H, output bias V;
/// its decoder weight is the token embedding, tied) and the NSP classifier (2H + 2).
/// BERT-large (V 30522, P 512, H 1024, F 4096, 24 layers) has 336,226,108 parameters: the
/// encoder with pooler is 335,141,888 (the "335M" usually quoted) and the pre-training heads
/// add 1,084,220. GPT-3 adds token (V H) and learned position (P H) embeddings and a final
/// LayerNorm (2H); the output projection is the token embedding (tied). The GPT-3 paper's sizes
/// (Table 2.1) follow with V = 50257 and P = 2048: 125M -> 125,226,240 ... 175B ->
/// 174,604,259,328. A test checks these formulas against a real (small) model's
/// Module::num_parameters().

#include <cstdint>
#include <string>

namespace benchhost::lm {

struct ModelShape {
  std::int64_t layers = 0;
  std::int64_t hidden = 0;
  std::int64_t heads = 0;
  std::int64_t ffn = 0;
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;
  std::int64_t seq_len = 0;
};

/// Parameters of one TransformerBlock.
std::int64_t transformer_layer_parameters(const ModelShape& s);
/// BERT for pre-training (encoder, pooler, MLM head with tied decoder, NSP head).
std::int64_t bert_parameters(const ModelShape& s);
/// BERT encoder + pooler only (the conventional "335M" figure for BERT-large).
std::int64_t bert_encoder_parameters(const ModelShape& s);
/// GPT-3 with tied output embedding and learned positions.
std::int64_t gpt_parameters(const ModelShape& s);

/// Note [FLOPs per sample]
/// Training costs 6 FLOPs per parameter per token that passes through it (2 forward, 4
/// backward) plus the attention score and context matmuls, 12 L H T per token (PaLM's MFU
/// formula; causal masking is not discounted, as is customary). BERT runs its MLM head only on
/// the `max_predictions` masked positions (as MLPerf's reference does), so the head's matmuls
/// count for those positions, and pooler + NSP once per sample. Embedding lookups are free.
/// Inference is one third (the forward pass).
double bert_train_flops_per_sample(const ModelShape& s, std::int64_t max_predictions);
double gpt_train_flops_per_sample(const ModelShape& s);

/// What training needs per device, and the parallelism that would make it fit.
struct MemoryPlan {
  std::int64_t parameters = 0;
  double state_bytes = 0;       ///< weights + gradients + Adam/LAMB moments (+ master copy)
  double activation_bytes = 0;  ///< one micro-batch of `micro_batch` samples, no recomputation
  double total_bytes = 0;       ///< on one device without model parallelism
  double device_bytes = 0;      ///< the device's memory
  bool fits = false;
  std::int64_t tensor_parallel = 1, pipeline_parallel = 1;  ///< smallest split that would fit
  double per_device_bytes_split = 0;  ///< with that split
  std::string message;                ///< human-readable summary (the refusal text when !fits)
};

/// Note [Memory plan]
/// State: 16 bytes per parameter under mixed precision (bf16/fp16 weights 2 + gradients 2 +
/// fp32 master 4 + two fp32 moments 8, the ZeRO paper's count) and 16 under fp32 (weights 4 +
/// gradients 4 + moments 8). Activations per layer per sample, after Korthikanti et al. 2022
/// (no recomputation, no sequence parallelism): T H (34 + 5 a T / H) bytes at 16 bits, twice
/// that at fp32; plus the logits, T V x 4 bytes (x2 with their gradient). Model parallelism: tensor
/// parallel up to 8 (one node) splits both, pipeline parallel (a power of two dividing the layer
/// count where possible) splits layers; data parallel replicates.
MemoryPlan plan_gpt_memory(const ModelShape& s, std::int64_t micro_batch, bool mixed_precision,
                           double device_bytes, const std::string& device_name);


}  // namespace benchhost::lm
