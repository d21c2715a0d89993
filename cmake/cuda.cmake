# Enables CUDA when nvcc is found; otherwise the project builds CPU-only and
# says so once.
set(KVWELD_HAVE_CUDA OFF)
if(KVWELD_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # sm_90 machine code plus compute_90 PTX; set before enable_language so
    # CMake does not pick its own default.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)  # the .cu files hold kernels only; CMake 3.25 knows no CUDA20 for nvcc
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(KVWELD_HAVE_CUDA ON)
    message(STATUS "kvweld: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  else()
    message(STATUS "kvweld: nvcc not found: building CPU-only")
  endif()
else()
  message(STATUS "kvweld: CUDA backend disabled (KVWELD_CUDA=OFF): building CPU-only")
endif()
