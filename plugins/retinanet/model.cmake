# The RetinaNet model (ResNeXt50_32x4d + FPN P3-P7 + shared heads, explicit backward) as a static
# library, included by the plugin's CMakeLists.txt; the tests link it directly.
add_library(benchhost_retinanet_model STATIC ${CMAKE_CURRENT_LIST_DIR}/model.cpp)
target_include_directories(benchhost_retinanet_model PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(benchhost_retinanet_model PUBLIC benchhost::sdk PRIVATE OpenMP::OpenMP_CXX)
set_target_properties(benchhost_retinanet_model PROPERTIES CXX_VISIBILITY_PRESET hidden
                      VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
target_compile_options(benchhost_retinanet_model PRIVATE -Wall -Wextra -Wno-unused-parameter)
