# KVLAB_CUDA_ONLY=ON: the torch-free kernels (kvlab_kernels), the CUDA kernels
# (kvlab_cuda), paged_decode_test and paged_decode_bench, and nothing that needs
# libtorch, toml++, nlohmann-json or CLI11. For GPU machines that have nvcc but
# not the Debian dev packages (evals/gpu/device-check.sh). Included by the
# top-level CMakeLists.txt, which returns right after.
#
# Third-party sources (an explicit source tree wins over an installed package):
#   KVLAB_GTEST_SOURCE_DIR      a googletest tree (e.g. a copy of /usr/src/googletest)
#   KVLAB_BENCHMARK_SOURCE_DIR  a Google Benchmark tree; otherwise find_package
#                               (CMAKE_PREFIX_PATH may point at an unpacked prefix)
if(NOT KVLAB_HAVE_CUDA)
  message(FATAL_ERROR "KVLAB_CUDA_ONLY=ON needs a CUDA compiler (KVLAB_CUDA=AUTO or ON, nvcc on PATH or CMAKE_CUDA_COMPILER)")
endif()
set(KVLAB_GTEST_SOURCE_DIR "" CACHE PATH "googletest source tree to build instead of find_package(GTest)")
set(KVLAB_BENCHMARK_SOURCE_DIR "" CACHE PATH "Google Benchmark source tree to build instead of find_package(benchmark)")

find_package(Threads REQUIRED)
find_package(OpenMP QUIET)
if(NOT TARGET OpenMP::OpenMP_CXX)
  # kvlab_kernels' loops then run on one thread; nothing here depends on OpenMP.
  message(STATUS "kvlab: OpenMP not found; CPU kernels build single-threaded")
  add_library(OpenMP::OpenMP_CXX INTERFACE IMPORTED)
endif()

set(KVLAB_WARNINGS -Wall -Wextra)

if(KVLAB_BUILD_TESTS)
  if(KVLAB_GTEST_SOURCE_DIR)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory(${KVLAB_GTEST_SOURCE_DIR} ${PROJECT_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
    foreach(t gtest gtest_main)
      if(TARGET ${t})
        target_compile_options(${t} PRIVATE -include cstdint)
      endif()
    endforeach()
  else()
    find_package(GTest REQUIRED)
  endif()
  enable_testing()
  include(GoogleTest)
endif()

if(KVLAB_BUILD_BENCHMARKS)
  if(KVLAB_BENCHMARK_SOURCE_DIR)
    set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_GTEST_TESTS OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_WERROR OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_ENABLE_LIBPFM OFF CACHE BOOL "" FORCE)
    set(BENCHMARK_INSTALL_DOCS OFF CACHE BOOL "" FORCE)
    add_subdirectory(${KVLAB_BENCHMARK_SOURCE_DIR} ${PROJECT_BINARY_DIR}/_deps/benchmark EXCLUDE_FROM_ALL)
    # Older releases (Debian 12's 1.7.1) predate GCC 13's leaner headers.
    foreach(t benchmark benchmark_main)
      if(TARGET ${t})
        target_compile_options(${t} PRIVATE -include cstdint)
      endif()
    endforeach()
  else()
    find_package(benchmark QUIET)
    if(NOT benchmark_FOUND)
      message(WARNING "kvlab: Google Benchmark not found (set KVLAB_BENCHMARK_SOURCE_DIR or CMAKE_PREFIX_PATH): "
                      "paged_decode_bench is not built")
      set(KVLAB_BUILD_BENCHMARKS OFF)
    endif()
  endif()
endif()

# The same as the top-level CMakeLists.txt's, which is not reached in this mode.
function(kvlab_add_test name)
  cmake_parse_arguments(T "" "TEST_PREFIX" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${KVLAB_WARNINGS})
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                       TEST_PREFIX "${T_TEST_PREFIX}"
                       PROPERTIES LABELS "${T_LABELS}" ENVIRONMENT "KVLAB_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# kvlab_kernels (on core/base's kvlab_base) as kernels/CMakeLists.txt defines it: portable (runtime
# dispatch, no -march=native unless KVLAB_NATIVE), since this build may run on another machine.
add_subdirectory(${PROJECT_SOURCE_DIR}/core/base ${PROJECT_BINARY_DIR}/core/base)
include(${PROJECT_SOURCE_DIR}/kernels/cpu_kernels.cmake)

add_subdirectory(${PROJECT_SOURCE_DIR}/kernels/cuda ${PROJECT_BINARY_DIR}/kernels/cuda)
