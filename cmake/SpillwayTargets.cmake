# Helpers for spillway's own binaries (tests, benchmarks, examples). Not installed.

find_package(OpenMP COMPONENTS CXX)

# Warnings are errors for the project's own code; third-party headers come in as system includes.
function(spillway_project_options target)
  target_link_libraries(${target} PRIVATE spillway::spillway)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror -lineinfo>)
  if(OpenMP_CXX_FOUND)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:${OpenMP_CXX_FLAGS}>
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${OpenMP_CXX_FLAGS}>)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  endif()
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

# The first python3 — the venv scripts/setup.sh makes, else the system's (SPILLWAY_SYSTEM_PYTHON,
# which other tests use too) — that can run `imports` (e.g. "import numpy"), into `out`; empty
# when none can.
function(spillway_find_python out imports)
  find_program(SPILLWAY_VENV_PYTHON python3 HINTS ${PROJECT_SOURCE_DIR}/.venv/bin NO_DEFAULT_PATH)
  find_program(SPILLWAY_SYSTEM_PYTHON python3)
  set(found "")
  foreach(py IN ITEMS "${SPILLWAY_VENV_PYTHON}" "${SPILLWAY_SYSTEM_PYTHON}")
    if(py AND found STREQUAL "")
      execute_process(COMMAND ${py} -c "${imports}" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
      if(rc EQUAL 0)
        set(found "${py}")
      endif()
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()
