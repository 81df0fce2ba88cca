#include "initial_weights.hpp"

#include "benchhost/nn/serialize.hpp"

namespace benchhost::lm {

std::vector<OptionSpec> initial_weights_options() {
  return {string_option("init-weights", "", "weight file to start from (nn/serialize.hpp format)"),
          string_option("save-initial-weights", "", "write the initial weights here (for the PyTorch peer)")};
}

void place_initial_weights(nn::Module& model, const Options& options, Device device, const PrecisionPolicy& policy) {
  if (const auto w = options.get_string("init-weights"); !w.empty()) nn::load_weights(model, w);
  if (const auto w = options.get_string("save-initial-weights"); !w.empty()) nn::save_weights(model, w);
  model.to(device);  // initialised on the CPU: the same weights on every device
  model.set_precision(policy);
}

}  // namespace benchhost::lm
