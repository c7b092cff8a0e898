# Default CUDA architectures for spillway's own tests, benchmarks and examples (never for the
# spillway target, whose consumers choose their own).
#
# - CMAKE_CUDA_ARCHITECTURES given by the user (cache or -D): used as is.
# - a GPU present: its compute capability, with 9.0 mapped to "90a" (plain "native" would give
#   "90", which compiles the wgmma paths out) and other x.y to "xy".
# - no GPU (or no nvidia-smi): "90a-virtual", PTX for the target the project is measured on
#   (H100/H200) and no SASS: nothing on this machine can run device code, so the tests compile
#   every kernel to PTX (the CUDA front end and its checks) without ptxas, which was ~45% of a test
#   translation unit's compile time; copied to a 9.0 GPU, the binaries run after the driver compiles
#   the PTX on first load. Give CMAKE_CUDA_ARCHITECTURES=90a for SASS (the `gpu` preset does).
function(spillway_default_cuda_architectures)
  if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    message(STATUS "spillway: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES} (given)")
    return()
  endif()
  set(archs "")
  find_program(SPILLWAY_NVIDIA_SMI nvidia-smi)
  if(SPILLWAY_NVIDIA_SMI)
    execute_process(COMMAND ${SPILLWAY_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
      OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND caps)
      string(REPLACE "\n" ";" caps "${caps}")
      foreach(cap IN LISTS caps)
        string(STRIP "${cap}" cap)
        if(cap MATCHES "^([0-9]+)\\.([0-9]+)$")
          set(a "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
          if(a STREQUAL "90")
            set(a "90a")
          endif()
          list(APPEND archs ${a})
        endif()
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
  endif()
  if(archs STREQUAL "")
    set(archs "90a-virtual")
    message(STATUS "spillway: no GPU found; CUDA architectures default to 90a-virtual (PTX only, no ptxas)")
  else()
    message(STATUS "spillway: CUDA architectures ${archs} (from the GPUs present)")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${archs}" CACHE STRING "CUDA architectures for spillway's own binaries")
endfunction()
