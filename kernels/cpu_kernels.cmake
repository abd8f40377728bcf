# kvlab_kernels: the CPU kernels, for kernels/CMakeLists.txt and the
# KVLAB_CUDA_ONLY build (kernels/cuda/cuda_only.cmake), which include this file.
#
# Portable by default: everything is compiled for baseline x86-64 except the
# vector kernels, which are compiled three times, once per kernel path
# (KVLAB_ISA_LEVEL 0 scalar, 1 avx2, 2 avx512: kernels/cpu_isa.h), each copy
# in its own namespace and switched to its instructions by #pragma GCC target
# (kernels/cpu_isa_begin.h); kernels/cpu_dispatch.cpp picks a copy at run time.
# KVLAB_NATIVE=ON adds -march=native to all of it (a binary for this host only).
set(KVLAB_ISA_KERNEL_SOURCES
  ${PROJECT_SOURCE_DIR}/kernels/attention_cpu.cpp
  ${PROJECT_SOURCE_DIR}/kernels/attention_kivi_cpu.cpp
  ${PROJECT_SOURCE_DIR}/kernels/attention_quant_cpu.cpp
  ${PROJECT_SOURCE_DIR}/kernels/linear_bf16.cpp
  ${PROJECT_SOURCE_DIR}/kernels/page_bounds_cpu.cpp
)
# The fuzz build (KVLAB_FUZZ: clang with ASan + UBSan) compiles the kernels at
# -O1: its targets fuzz parsers, not kernels, and clang's UBSan at -O3 spends
# over half an hour on one kernel file.
if(KVLAB_FUZZ)
  set(_kvlab_kernel_opt -O1)
else()
  set(_kvlab_kernel_opt -O3)
endif()
# Page scores are the same bits on every path (kernels/page_bounds.h): no
# multiply-add contraction, which the avx2/avx512 copies (and -march=native)
# would otherwise apply to their products and sums.
set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/page_bounds_cpu.cpp PROPERTIES COMPILE_OPTIONS -ffp-contract=off)
set(_kvlab_isa_names scalar avx2 avx512)
set(_kvlab_isa_objects)
foreach(_level RANGE 2)
  list(GET _kvlab_isa_names ${_level} _name)
  add_library(kvlab_kernels_${_name} OBJECT ${KVLAB_ISA_KERNEL_SOURCES})
  target_include_directories(kvlab_kernels_${_name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(kvlab_kernels_${_name} PRIVATE kvlab_base OpenMP::OpenMP_CXX)
  target_compile_definitions(kvlab_kernels_${_name} PRIVATE KVLAB_ISA_LEVEL=${_level})
  target_compile_options(kvlab_kernels_${_name} PRIVATE ${KVLAB_WARNINGS} ${_kvlab_kernel_opt})
  if(KVLAB_NATIVE)
    target_compile_options(kvlab_kernels_${_name} PRIVATE -march=native)
  endif()
  list(APPEND _kvlab_isa_objects $<TARGET_OBJECTS:kvlab_kernels_${_name}>)
endforeach()

add_library(kvlab_kernels STATIC
  ${PROJECT_SOURCE_DIR}/kernels/attention_reference.cpp
  ${PROJECT_SOURCE_DIR}/kernels/attention_cpu_plan.cpp
  ${PROJECT_SOURCE_DIR}/kernels/append_kv.cpp
  ${PROJECT_SOURCE_DIR}/kernels/kv_encoding.cpp
  ${PROJECT_SOURCE_DIR}/kernels/attention_encoded.cpp
  ${PROJECT_SOURCE_DIR}/kernels/cpu_isa.cpp
  ${PROJECT_SOURCE_DIR}/kernels/cpu_dispatch.cpp
  ${_kvlab_isa_objects}
)
target_include_directories(kvlab_kernels PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvlab_kernels PUBLIC kvlab_base OpenMP::OpenMP_CXX)
target_compile_options(kvlab_kernels PRIVATE ${KVLAB_WARNINGS} ${_kvlab_kernel_opt})
if(KVLAB_NATIVE)
  target_compile_options(kvlab_kernels PRIVATE -march=native)
endif()
