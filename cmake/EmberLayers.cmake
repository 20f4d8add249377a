# One OBJECT library per layer folder. A layer may include only headers of the
# layers it DEPENDS on: ember_add_layer scans the layer's sources at configure
# time and stops the build when one includes a layer above it, so the folder
# tree stays the dependency graph (STYLE.md, principle 1).
set(EMBER_ALL_LAYERS core kernels/reference kernels/cpu kernels/cuda autograd nn optim data distributed tools)
set(EMBER_LAYER_TARGETS "")
set(EMBER_CUDA_LAYER_TARGETS "")  # the layers' CUDA parts: the plugin libember_cuda

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

# CUDA_SOURCES: the layer's .cpp files that include CUDA headers. They and
# every .cu file make the target <target>_gpu, which goes into the CUDA plugin
# libember_cuda (Note [CUDA backend plugin] in core/README.md); without the
# CUDA backend they are left out. The rest of the layer (plain C++, such as
# the CUDA caching allocator's policy) is in libember and tested in every build.
function(ember_add_layer layer)
  cmake_parse_arguments(ARG "" "" "DEPENDS;SOURCES;CUDA_SOURCES" ${ARGN})
  ember_layer_target(${layer} target)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${layer}/*.cpp ${PROJECT_SOURCE_DIR}/${layer}/*.cu)
  list(APPEND sources ${ARG_SOURCES})
  set(gpu_sources ${sources})
  list(FILTER gpu_sources INCLUDE REGEX [[\.cu$]])
  foreach(file IN LISTS ARG_CUDA_SOURCES)
    list(APPEND gpu_sources ${PROJECT_SOURCE_DIR}/${layer}/${file})
  endforeach()
  list(REMOVE_ITEM sources ${gpu_sources})
  if(NOT EMBER_WITH_CUDA)
    set(gpu_sources "")
  endif()
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${layer}/*.h)
  ember_check_layer_includes(${layer} "${layer};${ARG_DEPENDS}" "${sources};${gpu_sources};${headers}")
  set(parts "")
  if(sources)  # none: a layer folder not written yet
    add_library(${target} OBJECT ${sources})
    set(EMBER_LAYER_TARGETS ${EMBER_LAYER_TARGETS} ${target} PARENT_SCOPE)
    list(APPEND parts ${target})
  endif()
  if(gpu_sources)
    add_library(${target}_gpu OBJECT ${gpu_sources})
    set(EMBER_CUDA_LAYER_TARGETS ${EMBER_CUDA_LAYER_TARGETS} ${target}_gpu PARENT_SCOPE)
    list(APPEND parts ${target}_gpu)
  endif()
  foreach(part IN LISTS parts)
    target_include_directories(${part} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
    target_link_libraries(${part} PUBLIC fmt::fmt nlohmann_json::nlohmann_json PRIVATE ember_warnings OpenMP::OpenMP_CXX)
    foreach(dep IN LISTS ARG_DEPENDS)
      ember_layer_target(${dep} dep_target)
      if(TARGET ${dep_target})
        target_link_libraries(${part} PUBLIC ${dep_target})
      endif()
    endforeach()
  endforeach()
  set(EMBER_LAYER_HEADERS_${target} ${headers} PARENT_SCOPE)
endfunction()

# The installable library: every layer's objects in one shared library, and
# with CUDA the layers' CUDA parts in a second one, libember_cuda, which
# libember loads on first use (Note [CUDA backend plugin] in core/README.md).
function(ember_layers_link)
  set(objects "")
  foreach(target IN LISTS EMBER_LAYER_TARGETS)
    list(APPEND objects $<TARGET_OBJECTS:${target}>)
  endforeach()
  add_library(ember SHARED ${objects})
  # In the build tree ember::ember also builds the plugin, which libember
  # loads at run time but does not link (the plugin links libember).
  add_library(ember_in_build_tree INTERFACE)
  target_link_libraries(ember_in_build_tree INTERFACE ember)
  add_library(ember::ember ALIAS ember_in_build_tree)
  target_include_directories(ember PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include> $<INSTALL_INTERFACE:include/ember>)
  target_link_libraries(ember PUBLIC fmt::fmt nlohmann_json::nlohmann_json Threads::Threads
                              PRIVATE OpenMP::OpenMP_CXX DNNL::dnnl)
  set_target_properties(ember PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
  if(EMBER_WITH_CUDA)
    set(cuda_objects "")
    foreach(target IN LISTS EMBER_CUDA_LAYER_TARGETS)
      list(APPEND cuda_objects $<TARGET_OBJECTS:${target}>)
    endforeach()
    add_library(ember_cuda SHARED ${cuda_objects})
    add_library(ember::cuda ALIAS ember_cuda)
    target_link_libraries(ember_cuda PUBLIC ember
                          PRIVATE OpenMP::OpenMP_CXX CUDA::cudart CUDA::cublas CUDA::cublasLt
                                  ${EMBER_CUDNN_LIBRARY} ${EMBER_NCCL_LIBRARY})
    set_target_properties(ember_cuda PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
                                                EXPORT_NAME cuda)
    add_dependencies(ember_in_build_tree ember_cuda)
    target_compile_definitions(ember_core PRIVATE EMBER_WITH_CUDA)
    # libember looks for the plugin beside itself under its soname (on one
    # file, so that core's other objects keep their compiler-cache entries).
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/core/cuda_backend.cpp APPEND PROPERTY COMPILE_DEFINITIONS
                 EMBER_CUDA_PLUGIN_FILE="$<TARGET_SONAME_FILE_NAME:ember_cuda>")
  endif()
endfunction()
