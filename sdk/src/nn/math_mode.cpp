// Per-thread math modes (Note [Math modes] in benchhost/nn/math_mode.hpp).
#include "benchhost/nn/math_mode.hpp"

namespace benchhost::nn {
namespace {
thread_local bool t_tf32 = false;
}  // namespace

bool tf32_enabled() noexcept { return t_tf32; }

bool set_tf32_enabled(bool on) noexcept {
  const bool previous = t_tf32;
  t_tf32 = on;
  return previous;
}

}  // namespace benchhost::nn
