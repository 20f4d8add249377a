# One OBJECT library per layer folder. A layer may include only headers of the
# layers it DEPENDS on: ember_add_layer scans the layer's sources at configure
# time and stops the build when one includes a layer above it, so the folder
# tree stays the dependency graph (STYLE.md, principle 1).
set(EMBER_ALL_LAYERS core kernels/reference kernels/cpu kernels/cuda autograd nn optim data distributed tools)
set(EMBER_LAYER_TARGETS "")

function(ember_layer_target layer out)
  string(REPLACE "/" "_" name "ember_${layer}")
  set(${out} ${name} PARENT_SCOPE)
endfunction()

function(ember_check_layer_includes layer allowed files)
  foreach(file IN LISTS files)
    if(NOT file)
      continue()
    endif()
    file(STRINGS ${file} includes REGEX [[^#include "]])
    foreach(line IN LISTS includes)
      string(REGEX MATCH [[^#include "([^"]+)"]] _ "${line}")
      set(path "${CMAKE_MATCH_1}")
      foreach(other IN LISTS EMBER_ALL_LAYERS)
        string(FIND "${path}" "${other}/" at)
        if(at EQUAL 0 AND NOT other IN_LIST allowed)
          message(FATAL_ERROR "layer '${layer}' must not include '${path}' (${file}): "
                              "'${other}' is not below it (allowed: ${allowed})")
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()

# CUDA_SOURCES: the layer's .cpp files that include CUDA headers. Without the
# CUDA backend they and every .cu file are left out, and the rest of the layer
# (plain C++, such as the CUDA caching allocator's policy) is still built and tested.
function(ember_add_layer layer)
  cmake_parse_arguments(ARG "" "" "DEPENDS;SOURCES;CUDA_SOURCES" ${ARGN})
  ember_layer_target(${layer} target)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${layer}/*.cpp ${PROJECT_SOURCE_DIR}/${layer}/*.cu)
  list(APPEND sources ${ARG_SOURCES})
  if(NOT EMBER_WITH_CUDA)
    list(FILTER sources EXCLUDE REGEX [[\.cu$]])
    foreach(file IN LISTS ARG_CUDA_SOURCES)
      list(REMOVE_ITEM sources ${PROJECT_SOURCE_DIR}/${layer}/${file})
    endforeach()
  endif()
  if(NOT sources)  # a layer folder not written yet
    return()
  endif()
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${layer}/*.h)
  ember_check_layer_includes(${layer} "${layer};${ARG_DEPENDS}" "${sources};${headers}")
  add_library(${target} OBJECT ${sources})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  target_link_libraries(${target} PUBLIC fmt::fmt nlohmann_json::nlohmann_json PRIVATE ember_warnings OpenMP::OpenMP_CXX)
  foreach(dep IN LISTS ARG_DEPENDS)
    ember_layer_target(${dep} dep_target)
    if(TARGET ${dep_target})
      target_link_libraries(${target} PUBLIC ${dep_target})
    endif()
  endforeach()
  set(EMBER_LAYER_TARGETS ${EMBER_LAYER_TARGETS} ${target} PARENT_SCOPE)
  set(EMBER_LAYER_HEADERS_${target} ${headers} PARENT_SCOPE)
endfunction()

# The installable library: every layer's objects in one shared library.
function(ember_layers_link)
  set(objects "")
  foreach(target IN LISTS EMBER_LAYER_TARGETS)
    list(APPEND objects $<TARGET_OBJECTS:${target}>)
  endforeach()
  add_library(ember SHARED ${objects})
  add_library(ember::ember ALIAS ember)
  target_include_directories(ember PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include> $<INSTALL_INTERFACE:include/ember>)
  target_link_libraries(ember PUBLIC fmt::fmt nlohmann_json::nlohmann_json Threads::Threads
                              PRIVATE OpenMP::OpenMP_CXX DNNL::dnnl)
  if(EMBER_WITH_CUDA)
    target_link_libraries(ember PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt ${EMBER_CUDNN_LIBRARY} ${EMBER_NCCL_LIBRARY})
    target_compile_definitions(ember_core PRIVATE EMBER_WITH_CUDA)
  endif()
  set_target_properties(ember PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
endfunction()
