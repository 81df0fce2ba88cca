# The Mask R-CNN model (R-50-FPN, RPN, box and mask heads, explicit backward) as a static library,
# included by the plugin's CMakeLists.txt; the tests link it directly.
add_library(benchhost_maskrcnn_model STATIC ${CMAKE_CURRENT_LIST_DIR}/model.cpp)
target_include_directories(benchhost_maskrcnn_model PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(benchhost_maskrcnn_model PUBLIC benchhost::sdk)
set_target_properties(benchhost_maskrcnn_model PROPERTIES CXX_VISIBILITY_PRESET hidden
                      VISIBILITY_INLINES_HIDDEN ON POSITION_INDEPENDENT_CODE ON)
target_compile_options(benchhost_maskrcnn_model PRIVATE -Wall -Wextra -Wno-unused-parameter)
