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
