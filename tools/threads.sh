# Sourced by tools/bench_*.sh once they have set $threads: benchhost and its PyTorch peer measure
# under the same threading settings, which the log records (Note [Threads of a run],
# core/environment.cpp). OMP_NUM_THREADS sizes every OpenMP team (oneDNN's under both, PyTorch's
# intra-op pool), OPENBLAS_NUM_THREADS the peer's BLAS pool; the OpenMP wait policy is whatever the
# caller set (OMP_WAIT_POLICY=PASSIVE tools/bench_x.sh), for both sides alike.
export OMP_NUM_THREADS=$threads
export OPENBLAS_NUM_THREADS=$threads
echo "threading: OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS" \
     "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset (libgomp: spin, then sleep)}, load average $(cut -d' ' -f1-3 /proc/loadavg)"
