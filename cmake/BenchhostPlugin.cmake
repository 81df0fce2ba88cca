# benchhost_add_plugin(<name> <sources>...)
# Builds a workload plugin as a MODULE library named <name>.so in the host's plugins directory.
# Used in-tree and, through the installed package, by out-of-tree plugins.
function(benchhost_add_plugin name)
  add_library(${name} MODULE ${ARGN})
  target_link_libraries(${name} PRIVATE benchhost::sdk)
  set_target_properties(${name} PROPERTIES PREFIX "" OUTPUT_NAME ${name}
                        CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  if(DEFINED BENCHHOST_PLUGIN_OUTPUT_DIR)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${BENCHHOST_PLUGIN_OUTPUT_DIR})
  endif()
  # Every plugin of this build, for targets that need them all (the shipped-config test).
  set_property(GLOBAL APPEND PROPERTY BENCHHOST_PLUGIN_TARGETS ${name})
  if(DEFINED BENCHHOST_PLUGIN_INSTALL_DIR)
    install(TARGETS ${name} LIBRARY DESTINATION ${BENCHHOST_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
