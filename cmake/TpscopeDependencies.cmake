# SPDX-License-Identifier: Apache-2.0
# Every dependency is a package made for the job (scripts/setup installs them):
#   CUDA toolkit (runtime, cuBLAS, NCCL), NVML's header (toolkit or NVIDIA's nvidia-nvml-dev wheel),
#   Debian's CLI11, nlohmann-json, fmt (its headers: src/common/fmt_lib.cc holds its compiled part),
#   toml++, GoogleTest.
find_package(CUDAToolkit 12.0 REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(CLI11 REQUIRED)

# NCCL ships beside the toolkit here, or in /usr (Debian/Ubuntu libnccl-dev).
find_path(TPSCOPE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_ROOT}/include PATHS /usr/include)
find_library(TPSCOPE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_ROOT}/lib PATHS /usr/lib/x86_64-linux-gnu)
if(NOT TPSCOPE_NCCL_INCLUDE_DIR OR NOT TPSCOPE_NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL not found: install it (scripts/setup does) or set NCCL_ROOT")
endif()
add_library(tpscope::nccl INTERFACE IMPORTED)
target_include_directories(tpscope::nccl INTERFACE ${TPSCOPE_NCCL_INCLUDE_DIR})
target_link_libraries(tpscope::nccl INTERFACE ${TPSCOPE_NCCL_LIBRARY})

# NVML: only the header is needed at build time; the library is dlopened at run time.
find_path(TPSCOPE_NVML_INCLUDE_DIR nvml.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/.deps/nvml/nvidia/cu13/include
        ${PROJECT_SOURCE_DIR}/.deps/nvml/nvidia/cu12/include)
if(NOT TPSCOPE_NVML_INCLUDE_DIR)
  message(FATAL_ERROR "nvml.h not found: run scripts/setup (it installs NVIDIA's nvidia-nvml-dev header into .deps/)")
endif()
