# Run comm_failure_probe under mpirun and check the failure behaviour (see failure_probe.cpp).
# -DMPIRUN -DPROBE -DNP -DMODE -DWORKDIR -DMAX_SECONDS -DEXPECT (a regex over the merged output)
# and optionally -DCOLLECTIVE (the probe's collective #2: allreduce, the default, or alltoall)
file(REMOVE_RECURSE ${WORKDIR})
file(MAKE_DIRECTORY ${WORKDIR})
string(TIMESTAMP t0 "%s")
execute_process(
  # Give SIGTERM handlers 5 s before SIGKILL (OpenMPI default: 1 s, too tight on a loaded CI box).
  COMMAND ${MPIRUN} --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 5
          -np ${NP} ${PROBE} ${MODE} ${WORKDIR} ${COLLECTIVE}
  TIMEOUT ${MAX_SECONDS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
message("---- mpirun output (exit ${rc}, ${elapsed} s) ----\n${out}\n----")
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end within ${MAX_SECONDS} s: ${rc}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0 although a rank failed")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
# Only rank 0 writes: every file is rank 0's (its report after catching the CommError, and/or the
# note its SIGTERM handler writes when the launcher ends the job; both may happen, in either
# order), and at least one says FAILED.
file(GLOB files RELATIVE ${WORKDIR} ${WORKDIR}/*)
if(NOT files)
  message(FATAL_ERROR "rank 0 wrote nothing in ${WORKDIR}")
endif()
set(failed_seen FALSE)
foreach(f ${files})
  if(NOT f MATCHES "^(report_rank0\\.txt|rank0_sigterm)$")
    message(FATAL_ERROR "a file not written by rank 0 appeared in ${WORKDIR}: ${f}")
  endif()
  file(READ ${WORKDIR}/${f} report)
  if(report MATCHES "status FAILED")
    set(failed_seen TRUE)
  endif()
  message("rank 0 wrote ${f}: ${report}")
endforeach()
if(NOT failed_seen)
  message(FATAL_ERROR "no file from rank 0 says status FAILED")
endif()
message("ok: ended in ${elapsed} s with exit ${rc}")
