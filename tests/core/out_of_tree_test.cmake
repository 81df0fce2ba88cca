# Out-of-tree plugin test (ctest: core.out_of_tree_plugin). Installs the build into a temporary
# prefix, builds sdk/examples against the installed package using find_package(benchhost_sdk)
# alone, then runs the installed host on the example plugin.
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "out-of-tree test: ${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f bin/benchhost share/benchhost/tools/mllog_check.py include/benchhost/workload.hpp include/benchhost/version.hpp
          lib/cmake/benchhost_sdk/benchhost_sdkConfig.cmake lib/cmake/benchhost_sdk/BenchhostPlugin.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "out-of-tree test: ${f} was not installed into ${prefix}")
  endif()
endforeach()
step("configure sdk/examples" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/sdk/examples -B ${WORK_DIR}/build -G ${GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)
step("build sdk/examples" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step("benchhost list" ${prefix}/bin/benchhost list --plugin-dir ${WORK_DIR}/build)
if(NOT step_output MATCHES "example")
  message(FATAL_ERROR "out-of-tree test: the installed host does not list the example plugin:\n${step_output}")
endif()
step("benchhost run" ${prefix}/bin/benchhost --plugin-dir ${WORK_DIR}/build --plugin example -o ${WORK_DIR}/report.json
     --mllog ${WORK_DIR}/example.mllog)
# The checker installed with the host accepts a third-party plugin's MLLOG (open division, the
# common rules and the keys the plugin declares).
step("benchhost check-mllog" ${prefix}/bin/benchhost check-mllog --plugin-dir ${WORK_DIR}/build ${WORK_DIR}/example.mllog)
if(NOT step_output MATCHES "benchmark example, open division: compliant")
  message(FATAL_ERROR "out-of-tree test: check-mllog did not accept the example's MLLOG:\n${step_output}")
endif()
file(READ ${WORK_DIR}/report.json report)
string(JSON status GET "${report}" results 0 status)
string(JSON converged GET "${report}" results 0 ttt converged)
if(NOT status STREQUAL "PASSED" OR NOT converged)
  message(FATAL_ERROR "out-of-tree test: the example run did not pass:\n${report}")
endif()
step("benchhost train" ${prefix}/bin/benchhost --plugin-dir ${WORK_DIR}/build --plugin example --mode train -w 1 -i 5)
# `cmake --install` of the plugin lands under the prefix it is given (and DESTDIR): into the host's
# own prefix, where the installed host finds it without --plugin-dir, and into another prefix.
step("install the plugin into the host's prefix" ${CMAKE_COMMAND} --install ${WORK_DIR}/build --prefix ${prefix})
if(NOT EXISTS ${prefix}/bin/plugins/example.so)
  message(FATAL_ERROR "out-of-tree test: the plugin was not installed into ${prefix}/bin/plugins")
endif()
step("benchhost list (installed plugin)" ${prefix}/bin/benchhost list)
if(NOT step_output MATCHES "example")
  message(FATAL_ERROR "out-of-tree test: the installed host does not find the installed plugin:
${step_output}")
endif()
step("install the plugin into another prefix" ${CMAKE_COMMAND} --install ${WORK_DIR}/build --prefix ${WORK_DIR}/other)
step("install the plugin with DESTDIR" ${CMAKE_COMMAND} -E env DESTDIR=${WORK_DIR}/stage
     ${CMAKE_COMMAND} --install ${WORK_DIR}/build --prefix /opt/plugins)
foreach(f ${WORK_DIR}/other/bin/plugins/example.so ${WORK_DIR}/stage/opt/plugins/bin/plugins/example.so)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "out-of-tree test: ${f} was not installed")
  endif()
endforeach()
message(STATUS "out-of-tree plugin built against ${prefix} and ran under the installed host")
file(REMOVE_RECURSE ${WORK_DIR})
