# Tests of spillway::dist and its split planner (included from tests/CMakeLists.txt).
#   spillway_dist_plan_host_tests  the split planner (pairwise/split_plan.hpp), the ranks' split by predicted
#                                  seconds (dist/gram_split.hpp) and the owners' list merge
#                                  (dist/topk_lists.hpp): MPI-free, plain host tests
#   spillway_dist_tests            the MPI host tests (g++, no nvcc), run under mpirun -np 1, 2 and 3
#   spillway_dist_header_check     each MPI header of include/spillway/dist/ (.hpp) compiles on its own
#   spillway_dist_gpu_tests        the GPU path, one GPU per rank (nvcc; SPILLWAY_MPI_GPU_TESTS, on in
#                                  the "gpu" preset's builds through SPILLWAY_SM80_CHECKS; run by
#                                  scripts/gpu-check.sh mpi)

spillway_add_gtest(spillway_dist_plan_host_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/split_plan_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gram_split_test.cpp)
gtest_discover_tests(spillway_dist_plan_host_tests DISCOVERY_MODE PRE_TEST PROPERTIES LABELS "host" ENVIRONMENT "${spillway_test_env}")

if(NOT TARGET spillway::mpi)
  message(STATUS "spillway: no MPI: the tests of spillway::dist (label mpi) are not built")
  return()
endif()

# Every header of the component on its own, through the plain C++ compiler (.cuh: the example
# spillway-gram-mpi compiles dist/gram.cuh with nvcc).
file(GLOB dist_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_SOURCE_DIR}/include/spillway/dist/*.hpp ${PROJECT_SOURCE_DIR}/include/spillway/dist.hpp)
set(dist_hdir ${CMAKE_CURRENT_BINARY_DIR}/dist_header_check)
set(dist_header_srcs "")
foreach(h IN LISTS dist_headers)
  string(MAKE_C_IDENTIFIER "${h}" id)
  file(CONFIGURE OUTPUT ${dist_hdir}/${id}.cpp CONTENT "#include <${h}>\n#include <${h}>  // include guard check\n")
  list(APPEND dist_header_srcs ${dist_hdir}/${id}.cpp)
endforeach()
list(LENGTH dist_headers n_dist_headers)
file(CONFIGURE OUTPUT ${dist_hdir}/main.cpp CONTENT
  "#include <cstdio>\nint main() { std::printf(\"1 passed, 0 failed: ${n_dist_headers} MPI headers compile on their own\\\\n\"); return 0; }\n")
add_executable(spillway_dist_header_check ${dist_header_srcs} ${dist_hdir}/main.cpp)
spillway_project_options(spillway_dist_header_check)
target_link_libraries(spillway_dist_header_check PRIVATE spillway::mpi)
set_target_properties(spillway_dist_header_check PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
add_test(NAME dist_header_check COMMAND spillway_dist_header_check)
set_tests_properties(dist_header_check PROPERTIES LABELS "host;mpi")

# How mpirun is called: OpenMPI refuses root (CI runs as root) unless told, needs --oversubscribe
# for more ranks than cores, and in containers its shared-memory single-copy path (CMA) fails.
set(SPILLWAY_MPIEXEC_FLAGS "")
set(SPILLWAY_MPIEXEC_ENV "OMP_NUM_THREADS=1")
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE spillway_mpiexec_version ERROR_QUIET)
if(spillway_mpiexec_version MATCHES "Open MPI|OpenRTE" OR MPI_CXX_LIBRARY_VERSION_STRING MATCHES "Open MPI")
  set(SPILLWAY_MPIEXEC_FLAGS --oversubscribe --mca btl_vader_single_copy_mechanism none)
  list(APPEND SPILLWAY_MPIEXEC_ENV "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endif()
set(SPILLWAY_MPIEXEC_FLAGS "${SPILLWAY_MPIEXEC_FLAGS}" PARENT_SCOPE)
set(SPILLWAY_MPIEXEC_ENV "${SPILLWAY_MPIEXEC_ENV}" PARENT_SCOPE)

function(spillway_add_mpi_gtest name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES} ${CMAKE_CURRENT_LIST_DIR}/mpi_main.cpp)
  spillway_project_options(${name})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE spillway::mpi GTest::gtest)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()

spillway_add_mpi_gtest(spillway_dist_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/dist_host_test.cpp)
foreach(np IN ITEMS 1 2 3)
  add_test(NAME dist_mpi_np${np}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${SPILLWAY_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
      $<TARGET_FILE:spillway_dist_tests> --gtest_color=no ${MPIEXEC_POSTFLAGS})
  # TIMEOUT: a rank left waiting in a collective fails the test instead of hanging CI.
  set_tests_properties(dist_mpi_np${np} PROPERTIES LABELS "host;mpi" TIMEOUT 120 PROCESSORS ${np}
    ENVIRONMENT "${spillway_test_env};${SPILLWAY_MPIEXEC_ENV}")
endforeach()

option(SPILLWAY_MPI_GPU_TESTS "Build the GPU tests of spillway::dist (nvcc; one GPU per rank)" ${SPILLWAY_SM80_CHECKS})
if(SPILLWAY_MPI_GPU_TESTS)
  spillway_add_mpi_gtest(spillway_dist_gpu_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/dist_gpu_test.cu)
  add_test(NAME dist_mpi_gpu_np1
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${SPILLWAY_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
      $<TARGET_FILE:spillway_dist_gpu_tests> --gtest_color=no ${MPIEXEC_POSTFLAGS})
  set_tests_properties(dist_mpi_gpu_np1 PROPERTIES LABELS "gpu;mpi" TIMEOUT 300
    ENVIRONMENT "${spillway_test_env};${SPILLWAY_MPIEXEC_ENV}")
endif()
