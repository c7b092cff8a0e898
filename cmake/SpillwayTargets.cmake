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
