#pragma once
// A small RNN-T workload on synthetic batches (11 classes, 12 features, 2+2 encoder layers of 16,
// prediction 2 x 8, joint 12; batches of 3 utterances, 9 frames, 4 labels; dropout off), shared by
// the peer, precision and CUDA tests.

#include <string>

#include "workload.hpp"

namespace benchhost::rnnt::test {

inline RunContext small_context(const std::string& precision = "fp32", Device device = Device::cpu()) {
  RunContext ctx;
  ctx.mode = "train";
  ctx.device = device;
  ctx.precision = precision;
  ctx.seed = 5;
  ctx.num_threads = 2;
  ctx.synthetic_data = true;
  ctx.options = declared_options<RnntWorkload>(
      {{"vocab-size", "11"}, {"n-mels", "4"}, {"frame-splicing", "3"}, {"enc-n-hid", "16"}, {"enc-pre-rnn-layers", "2"},
       {"enc-post-rnn-layers", "2"}, {"pred-n-hid", "8"}, {"pred-rnn-layers", "2"}, {"joint-n-hid", "12"},
       {"enc-dropout", "0"}, {"pred-dropout", "0"}, {"joint-dropout", "0"}, {"batch-size", "3"}, {"grad-accumulation", "1"},
       {"synthetic-frames", "9"}, {"synthetic-labels", "4"}});
  return ctx;
}

}  // namespace benchhost::rnnt::test
