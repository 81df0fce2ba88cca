# Out-of-tree plugin test (ctest: core.out_of_tree_plugin). Installs the build into a temporary
# prefix and works from the installed copy alone, as a third-party plugin author would: builds the
# example plugins from <prefix>/share/doc/benchhost/examples with find_package(benchhost_sdk), runs
# both under the installed host, trains `classifier` (Fashion-MNIST) to its target with one process
# and, when mpirun and an MPI build are there, with two, checks their MLLOGs with the installed
# checker, and installs the plugins under several prefixes.
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER; optional FASHION_MNIST_DIR.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "out-of-tree test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

# A ttt report must say PASSED and converged, from `devices` processes.
function(expect_converged what report_file devices)
  file(READ ${report_file} report)
  string(JSON status GET "${report}" results 0 status)
  string(JSON converged GET "${report}" results 0 ttt converged)
  string(JSON n GET "${report}" results 0 devices)
  if(NOT status STREQUAL "PASSED" OR NOT converged OR NOT n EQUAL devices)
    message(FATAL_ERROR "out-of-tree test: ${what} did not pass with ${devices} process(es):\n${report}")
  endif()
endfunction()

# `benchhost check-mllog` (the checker installed with the host) must accept a plugin's MLLOG: open
# division, the common rules and the keys the plugin declares.
function(expect_compliant benchmark mllog)
  step("benchhost check-mllog (${benchmark})" ${prefix}/bin/benchhost check-mllog --plugin-dir ${examples} ${mllog})
  if(NOT step_output MATCHES "benchmark ${benchmark}, open division: compliant")
    message(FATAL_ERROR "out-of-tree test: check-mllog did not accept the ${benchmark} MLLOG:\n${step_output}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(examples ${WORK_DIR}/build)
set(docdir ${prefix}/share/doc/benchhost)
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f bin/benchhost share/benchhost/tools/mllog_check.py include/benchhost/workload.hpp include/benchhost/version.hpp
          lib/cmake/benchhost_sdk/benchhost_sdkConfig.cmake lib/cmake/benchhost_sdk/BenchhostPlugin.cmake
          share/doc/benchhost/README.md share/doc/benchhost/plugin-abi.md share/doc/benchhost/cli.md
          share/doc/benchhost/examples/CMakeLists.txt share/doc/benchhost/examples/example_workload.cpp
          share/doc/benchhost/examples/classifier_workload.cpp)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "out-of-tree test: ${f} was not installed into ${prefix} "
                        "(a build configured before the install rule was added: re-run cmake on ${BUILD_DIR})")
  endif()
endforeach()

# The examples as installed, not the source tree's sdk/examples.
step("configure the installed examples" ${CMAKE_COMMAND} -S ${docdir}/examples -B ${examples} -G ${GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)
step("build the installed examples" ${CMAKE_COMMAND} --build ${examples})
step("benchhost list" ${prefix}/bin/benchhost list --plugin-dir ${examples})
if(NOT step_output MATCHES "example" OR NOT step_output MATCHES "classifier")
  message(FATAL_ERROR "out-of-tree test: the installed host does not list the example plugins:\n${step_output}")
endif()

# example: the smallest plugin, no data.
step("benchhost run example" ${prefix}/bin/benchhost --plugin-dir ${examples} --plugin example
     -o ${WORK_DIR}/example.json --mllog ${WORK_DIR}/example.mllog)
expect_converged("the example run" ${WORK_DIR}/example.json 1)
expect_compliant(example ${WORK_DIR}/example.mllog)
step("benchhost train example" ${prefix}/bin/benchhost --plugin-dir ${examples} --plugin example --mode train -w 1 -i 5)

# classifier: time to train on Fashion-MNIST, the way README.md's "Writing a plugin" runs it.
if(NOT FASHION_MNIST_DIR)
  set(FASHION_MNIST_DIR /usr/share/datasets/fashion-mnist)
endif()
if(NOT EXISTS ${FASHION_MNIST_DIR}/train-images-idx3-ubyte.gz OR NOT EXISTS ${FASHION_MNIST_DIR}/t10k-labels-idx1-ubyte.gz)
  message(STATUS "out-of-tree test: classifier runs skipped: no Fashion-MNIST in ${FASHION_MNIST_DIR} "
                 "(apt-get install dataset-fashion-mnist)")
else()
  set(classifier ${prefix}/bin/benchhost --plugin-dir ${examples} --plugin classifier
                 --classifier.data-dir ${FASHION_MNIST_DIR})
  step("benchhost run classifier" ${classifier} -o ${WORK_DIR}/classifier.json --mllog ${WORK_DIR}/classifier.mllog)
  expect_converged("the classifier run" ${WORK_DIR}/classifier.json 1)
  expect_compliant(classifier ${WORK_DIR}/classifier.mllog)
  # Two ranks: DataParallel over the host's communicator, the sampler sharded by rank, the accuracy
  # merged across the ranks in evaluate(). Needs mpirun and a host built with MPI (without MPI each
  # process would run alone and the report would say 1 device).
  find_program(MPIRUN mpirun)
  file(READ ${prefix}/lib/cmake/benchhost_sdk/benchhost_sdkTargets.cmake sdk_targets)
  if(NOT MPIRUN)
    message(STATUS "out-of-tree test: the 2-rank classifier run skipped: no mpirun (apt-get install openmpi-bin)")
  elseif(NOT sdk_targets MATCHES "BENCHHOST_BUILT_WITH_MPI=1")
    message(STATUS "out-of-tree test: the 2-rank classifier run skipped: the SDK was built without MPI")
  else()
    step("mpirun -np 2 benchhost run classifier" ${MPIRUN} --allow-run-as-root --oversubscribe -np 2 ${classifier}
         -o ${WORK_DIR}/classifier2.json --mllog ${WORK_DIR}/classifier2.mllog)
    expect_converged("the 2-rank classifier run" ${WORK_DIR}/classifier2.json 2)
    expect_compliant(classifier ${WORK_DIR}/classifier2.mllog)
  endif()
endif()

# `cmake --install` of the plugins lands under the prefix it is given (and DESTDIR): into the
# host's own prefix, where the installed host finds them without --plugin-dir, and into another.
step("install the plugins into the host's prefix" ${CMAKE_COMMAND} --install ${examples} --prefix ${prefix})
foreach(p example classifier)
  if(NOT EXISTS ${prefix}/bin/plugins/${p}.so)
    message(FATAL_ERROR "out-of-tree test: ${p}.so was not installed into ${prefix}/bin/plugins")
  endif()
endforeach()
step("benchhost list (installed plugins)" ${prefix}/bin/benchhost list)
if(NOT step_output MATCHES "example" OR NOT step_output MATCHES "classifier")
  message(FATAL_ERROR "out-of-tree test: the installed host does not find the installed plugins:\n${step_output}")
endif()
step("install the plugins into another prefix" ${CMAKE_COMMAND} --install ${examples} --prefix ${WORK_DIR}/other)
step("install the plugins with DESTDIR" ${CMAKE_COMMAND} -E env DESTDIR=${WORK_DIR}/stage
     ${CMAKE_COMMAND} --install ${examples} --prefix /opt/plugins)
foreach(f ${WORK_DIR}/other/bin/plugins/example.so ${WORK_DIR}/stage/opt/plugins/bin/plugins/classifier.so)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "out-of-tree test: ${f} was not installed")
  endif()
endforeach()
message(STATUS "out-of-tree plugins built from ${docdir}/examples against ${prefix} and ran under the installed host")
file(REMOVE_RECURSE ${WORK_DIR})
