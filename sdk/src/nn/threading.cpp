// set_num_threads / get_num_threads: see benchhost/threading.hpp Note [Two thread pools].

#include "benchhost/threading.hpp"

#include <memory>
#include <mutex>

#include <omp.h>
#include <tbb/global_control.h>
#include <tbb/info.h>

#include "benchhost/error.hpp"

namespace benchhost {

namespace {
std::mutex g_mutex;
std::unique_ptr<tbb::global_control> g_control;
int g_threads = 0;
}  // namespace

void set_num_threads(int n) {
  BH_CHECK_AS(InvalidArgument, n >= 0, "thread count must be >= 1 (or 0 for the default), got {}", n);
  std::lock_guard lock(g_mutex);
  // The effective TBB limit is the minimum over live global_control objects: drop the old one
  // first so that the limit can also be raised.
  g_control.reset();
  if (n == 0) {
    omp_set_num_threads(omp_get_num_procs());
    g_threads = 0;
    return;
  }
  g_control = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                    static_cast<std::size_t>(n));
  omp_set_num_threads(n);
  g_threads = n;
}

int get_num_threads() {
  std::lock_guard lock(g_mutex);
  return g_threads > 0 ? g_threads : tbb::info::default_concurrency();
}

}  // namespace benchhost
