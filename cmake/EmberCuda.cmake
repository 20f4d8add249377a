# The CUDA backend: built when nvcc is found (EMBER_CUDA=AUTO) or forced ON.
# Shared cudart and never the driver stub, so binaries start on machines
# without a driver; sm_90 (SASS plus PTX) unless the user picks architectures.
include(CheckLanguage)
set(EMBER_WITH_CUDA OFF)
if(EMBER_CUDA STREQUAL "AUTO")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(EMBER_WITH_CUDA ON)
  endif()
elseif(EMBER_CUDA)
  set(EMBER_WITH_CUDA ON)
endif()

if(EMBER_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # C++20 as in the host code: Debian's CMake 3.25 predates nvcc 13 and does not
  # know its CUDA20 flag, so CMake is told the dialect needs no option and the
  # flag is given by hand. --expt-relaxed-constexpr lets device code call
  # numeric_limits and the other constexpr library functions.
  set(CMAKE_CUDA_STANDARD_COMPUTED_DEFAULT 20)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "")
  # fmt's compile-time format checks are consteval, which nvcc 13 cannot
  # evaluate: .cu files check formats at run time (the .cpp files still do it
  # at compile time), and fmt, which turns constexpr off under nvcc, is told
  # nvcc's host compiler handles it.
  string(APPEND CMAKE_CUDA_FLAGS " -std=c++20 --expt-relaxed-constexpr -DFMT_CONSTEVAL= -DFMT_USE_CONSTEXPR=1")
  # The vendor libraries of the backend. NCCL and cuDNN come with the toolkit
  # image here, not as CMake packages, so they are found by name.
  find_library(EMBER_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib REQUIRED)
  find_path(EMBER_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  find_library(EMBER_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(EMBER_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  message(STATUS "ember: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "ember: CUDA backend OFF")
endif()
