#pragma once
/// @file threading.hpp  One knob for the SDK's CPU thread count.
///
/// Note [Two thread pools]
/// CPU ops run on two runtimes: oneTBB (our elementwise and row-wise code, the data pipeline)
/// and OpenMP (Debian's oneDNN is built with the OpenMP CPU runtime). set_num_threads(n) limits
/// both: a process-wide tbb::global_control, and omp_set_num_threads for the calling thread
/// (which is the thread that calls oneDNN). Call it once from the main/training thread before
/// the run; a later call replaces the previous limit.
/// Idle OpenMP workers spin (GNU OpenMP's default) and then compete with oneTBB workers and other
/// processes for cores; libgomp reads its wait policy only from the environment at load time, so
/// on shared or oversubscribed machines launch with OMP_WAIT_POLICY=passive (measured: the
/// transformer block at 2 threads on a loaded 2-core machine ran 2x faster).

namespace benchhost {

/// Limit CPU parallelism to n threads (n >= 1; InvalidArgument otherwise). n = 0 restores the
/// default (all hardware threads).
void set_num_threads(int n);
/// The current limit (the hardware concurrency unless set_num_threads was called).
int get_num_threads();

}  // namespace benchhost
