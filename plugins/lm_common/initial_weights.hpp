#pragma once
/// @file plugins/lm_common/initial_weights.hpp  The weights a bert or gpt3 run starts from: the
/// model's own seeded initialisation, or a weight file, and a copy written for the PyTorch peers
/// (tools/peers/{bert,gpt3}_peer.py start from the same file).

#include <vector>

#include "benchhost/device.hpp"
#include "benchhost/nn/module.hpp"
#include "benchhost/options.hpp"
#include "benchhost/precision.hpp"

namespace benchhost::lm {

/// The options init-weights (a file to start from) and save-initial-weights (where to write the
/// weights the run starts from), both nn/serialize.hpp files; "" = not used.
std::vector<OptionSpec> initial_weights_options();

/// Loads `options`' init-weights into `model` (built and initialised on the CPU), saves the
/// weights to save-initial-weights, then moves the model to `device` under `policy`: the same
/// starting weights on every device.
void place_initial_weights(nn::Module& model, const Options& options, Device device, const PrecisionPolicy& policy);

}  // namespace benchhost::lm
