// spillway/core/host_memory.hpp — what kind of host memory an array lives in. One enum for the whole
// library (the streamed jobs' operands and the Gram module's bit matrices), so that
// `using namespace spillway; using namespace spillway::gram;` sees one name, not two.
#pragma once

#include <spillway/core/enum_name.hpp>

namespace spillway {

/// What kind of host memory an array lives in (or should be allocated in).
enum class host_memory {
  detect,       ///< ask the runtime (cudaPointerGetAttributes) at the start of the job
  page_locked,  ///< pinned (cudaHostAlloc, pinned_buffer) or registered (cudaHostRegister): direct DMA
  pageable,     ///< ordinary memory: staged through pinned buffers
  pinned = page_locked,  ///< the same as page_locked, the word used when spillway allocates it
};

inline const char* to_string(host_memory m) noexcept {
  return ::spillway::detail::enum_name(m, {"detect", "page-locked", "pageable"});
}

}  // namespace spillway
