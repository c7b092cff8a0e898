# ctest driver: install spillway into a fresh prefix, then configure, build and run
# examples/consumer against it with find_package(spillway CONFIG REQUIRED).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
# Three OpenMP threads asked for: the consumer reports how many threads a host map really used.
execute_process(COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=3 ${WORK_DIR}/build/spillway_consumer
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "consumer said: ${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer exited with ${rc}")
endif()
if(NOT out MATCHES "spillway [0-9]+\\.[0-9]+\\.[0-9]+")
  message(FATAL_ERROR "the consumer did not report the installed version")
endif()
if(WITH_OPENMP AND NOT out MATCHES "host map threads used: 3")
  message(FATAL_ERROR "the installed target did not carry OpenMP: the consumer's host map did not use 3 threads")
endif()
# The optional component: installed where spillway found MPI; then find_package(... mpi) gives
# spillway::mpi and a program using <spillway/dist.hpp> builds and runs (one rank, no mpirun).
if(EXISTS ${prefix}/lib/cmake/spillway/spillwayMpiTargets.cmake OR EXISTS ${prefix}/lib64/cmake/spillway/spillwayMpiTargets.cmake)
  if(NOT EXISTS ${WORK_DIR}/build/spillway_consumer_mpi)
    message(FATAL_ERROR "spillway was installed with spillway::mpi but the consumer did not get the target")
  endif()
  execute_process(COMMAND ${WORK_DIR}/build/spillway_consumer_mpi RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "MPI consumer said: ${out}${err}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "spillway::mpi: 1 rank\\(s\\), 1 part\\(s\\)")
    message(FATAL_ERROR "the spillway::mpi consumer failed (${rc})")
  endif()
endif()
