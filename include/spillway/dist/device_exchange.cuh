// spillway/dist/device_exchange.cuh — top-k lists to their owners GPU to GPU, for ranks on one
// host: each rank's merged lists (n x k device entries) lie in a buffer the other processes map
// (CUDA IPC), and each owner copies its rows of every rank that touched them over NVLink, merges
// them on its GPU and brings only its own rows to the host. What the host exchange
// (dist/host_gram.hpp: lists_to_owners) does with an n x k copy down per rank, a pack, the
// shared-memory segments and a merge on the host.
#pragma once

#include <spillway/core/device.hpp>
#include <spillway/core/device_buffer.hpp>
#include <spillway/core/error.hpp>
#include <spillway/core/stream.hpp>
#include <spillway/dist/agree.hpp>
#include <spillway/dist/communicator.hpp>
#include <spillway/dist/gram_split.hpp>
#include <spillway/dist/host_gram.hpp>
#include <spillway/pairwise/pair_job.cuh>
#include <spillway/pairwise/sink_kernels.cuh>
#include <spillway/pairwise/sinks/topk.cuh>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <vector>

namespace spillway::dist::detail {

/// This process's buffer on one device that other processes of the host map: cudaMalloc'd (IPC
/// handles cover cudaMalloc allocations, not the stream-ordered pools), kept for the process's
/// life and grown only at a job's start, when no other rank has it mapped (every job that maps it
/// closes its mappings before its last barrier).
struct ipc_export {
  int device = -1;
  void* ptr = nullptr;
  std::size_t bytes = 0;
  cudaIpcMemHandle_t handle{};
};

/// The export buffer of `device`, at least `bytes` long.
inline ipc_export& ipc_export_of(int device, std::size_t bytes) {
  static std::mutex m;
  static std::list<ipc_export> all;  // one per device this process used (a list: references stay valid)
  std::lock_guard<std::mutex> l(m);
  ipc_export* e = nullptr;
  for (auto& x : all)
    if (x.device == device) e = &x;
  if (e == nullptr) {
    e = &all.emplace_back();
    e->device = device;
  }
  if (e->bytes < bytes) {
    device_guard g(device);
    if (e->ptr != nullptr) SPILLWAY_CUDA_TRY(cudaFree(e->ptr));
    e->ptr = nullptr;
    e->bytes = 0;
    SPILLWAY_CUDA_TRY(cudaMalloc(&e->ptr, bytes));
    e->bytes = bytes;
    SPILLWAY_CUDA_TRY(cudaIpcGetMemHandle(&e->handle, e->ptr));
  }
  return *e;
}

/// One job's mappings of the other ranks' export buffers (closed when it ends).
struct ipc_lists {
  bool on = false;
  int device = -1;
  ipc_export* mine = nullptr;
  std::vector<void*> peer;  ///< per rank: its export buffer mapped here, or nullptr
  ipc_lists() = default;
  ipc_lists(const ipc_lists&) = delete;
  ipc_lists& operator=(const ipc_lists&) = delete;
  ~ipc_lists() { close(); }
  void close() noexcept {
    if (device < 0) return;
    int prev = 0;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(device);
    for (void*& p : peer) {
      if (p != nullptr) (void)cudaIpcCloseMemHandle(p);
      p = nullptr;
    }
    (void)cudaSetDevice(prev);
  }
};

/// Whether a top-k job's lists can go to their owners GPU to GPU: asked for, every rank on one host
/// and several of them, every rank computing strips and owning rows. The same on every rank.
inline bool device_exchange_possible(const communicator& c, const gram_split& sp, bool asked) {
  if (!asked || c.size() < 2 || !c.one_host()) return false;
  for (int q = 0; q < c.size(); ++q)
    if (!sp.computes(q) || sp.rows_of(q) == 0) return false;
  return true;
}

/// Sets up the exchange of a job's lists GPU to GPU (collective): this rank's export buffer for
/// n x k entries of `entry_bytes` on `device`, every rank's handle to every rank, the buffers of
/// the ranks whose lists meet this rank's rows mapped here. `x.on` where every rank managed (a GPU
/// that cannot map another's memory leaves it off on every rank: the host exchange then runs).
inline void open_ipc_lists(const communicator& c, const gram_split& sp, int device, std::int64_t n, int k,
                           std::size_t entry_bytes, ipc_lists& x) {
  const int P = c.size(), me = c.rank();
  // No rank may grow (free) its export buffer while another still maps it: a job that failed
  // closes its mappings while it unwinds, before it can reach this.
  SPILLWAY_MPI_TRY(MPI_Barrier(c.get()));
  x.device = device;
  x.peer.assign(static_cast<std::size_t>(P), nullptr);
  struct wire {
    cudaIpcMemHandle_t h;
    int ok;
  };
  wire mine{};
  try {
    x.mine = &ipc_export_of(device, static_cast<std::size_t>(n) * static_cast<std::size_t>(k) * entry_bytes);
    mine.h = x.mine->handle;
    mine.ok = 1;
  } catch (const cuda_error&) {
    (void)cudaGetLastError();
  }
  std::vector<wire> all(static_cast<std::size_t>(P));
  SPILLWAY_MPI_TRY(MPI_Allgather(&mine, static_cast<int>(sizeof(wire)), MPI_BYTE, all.data(), static_cast<int>(sizeof(wire)),
                                 MPI_BYTE, c.get()));
  int ok = 1;
  for (const auto& w : all) ok = ok && w.ok;
  if (ok) {
    device_guard g(device);
    for (int q = 0; q < P; ++q) {
      if (q == me || !sp.lists_meet(q, me)) continue;
      void* p = nullptr;
      if (cudaIpcOpenMemHandle(&p, all[static_cast<std::size_t>(q)].h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
        (void)cudaGetLastError();
        ok = 0;
        break;
      }
      x.peer[static_cast<std::size_t>(q)] = p;
    }
  }
  int every = 0;
  SPILLWAY_MPI_TRY(MPI_Allreduce(&ok, &every, 1, MPI_INT, MPI_MIN, c.get()));
  x.on = every != 0;
  if (!x.on) x.close();
}

/// This rank's rows' final lists from the n x k device lists of its GPU, GPU to GPU (open_ipc_lists
/// first; collective): `lists_of()` returns them merged and ready (on `device`; e.g. a top-k sink's
/// slots merged), and they are copied into the export buffer; every rank waits for all (a
/// barrier); then it copies its rows of each rank whose lists meet them from that rank's buffer
/// over the peer link (exchange), merges them with its own on its GPU and copies only its rows to
/// the host through the pinned block of `host_of()` (a topk_host_side of this rank's rows; merge);
/// last, its mappings are closed and every rank waits again, so that no buffer is rewritten while
/// read.
template <class V, class Lists, class Host>
pairwise::topk_result<V> ipc_lists_to_owners(const communicator& c, const gram_split& sp, int device,
                                             stream_view s, std::int64_t n, int k, bool larger,
                                             Lists&& lists_of, Host&& host_of, ipc_lists& x,
                                             gram_phases& ph) {
  namespace pd = pairwise::detail;
  using entry = pd::topk_entry<V>;
  const int me = c.rank(), P_ = c.size();
  const std::int64_t r0 = sp.first_row(me), rows = sp.rows_of(me);
  const std::size_t per_row = static_cast<std::size_t>(k), cnt = static_cast<std::size_t>(rows) * per_row;
  const auto t0 = std::chrono::steady_clock::now();
  const entry* own = nullptr;
  agree(c, "merging its top-k lists on its GPU", [&] {
    device_guard g(device);
    own = lists_of();
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(x.mine->ptr, own, static_cast<std::size_t>(n) * per_row * sizeof(entry),
                                      cudaMemcpyDeviceToDevice, s.value()));
    s.synchronize();
  });
  SPILLWAY_MPI_TRY(MPI_Barrier(c.get()));
  ph.collect_seconds = seconds_since(t0);
  // What comes to the host: this rank's rows only (in the merge step below).
  ph.collect_bytes = static_cast<double>(cnt) * static_cast<double>(sizeof(V) + 8);
  const auto t1 = std::chrono::steady_clock::now();
  device_guard g(device);
  std::vector<int> from;  // the ranks whose lists of this rank's rows are merged here
  for (int q = 0; q < P_; ++q)
    if (q != me && sp.lists_meet(q, me)) from.push_back(q);
  device_buffer<entry> gathered;
  agree(c, "copying its rows' lists from the other GPUs", [&] {
    gathered = device_buffer<entry>((1 + from.size()) * cnt, s);
    SPILLWAY_CUDA_TRY(cudaMemcpyAsync(gathered.data(), own + r0 * k, cnt * sizeof(entry),
                                      cudaMemcpyDeviceToDevice, s.value()));
    for (std::size_t i = 0; i < from.size(); ++i) {
      const auto* src = static_cast<const entry*>(x.peer[static_cast<std::size_t>(from[i])]) + r0 * k;
      SPILLWAY_CUDA_TRY(cudaMemcpyAsync(gathered.data() + (i + 1) * cnt, src, cnt * sizeof(entry), cudaMemcpyDefault, s.value()));
    }
    s.synchronize();
  });
  double sent = 0.0;
  for (int q = 0; q < P_; ++q)
    if (q != me && sp.lists_meet(me, q)) sent += static_cast<double>(sp.rows_of(q)) * static_cast<double>(k) * sizeof(entry);
  ph.sent_bytes = sent;
  ph.received_bytes = static_cast<double>(from.size() * cnt * sizeof(entry));
  ph.exchange_seconds = seconds_since(t1);
  const auto t2 = std::chrono::steady_clock::now();
  pd::topk_host_side<V> host = host_of();
  pairwise::topk_result<V>& r = host.result;
  agree(c, "merging its rows' lists on its GPU", [&] {
    if (r.rows != rows) throw logic_error("dist top-k: the result's rows do not match this rank's rows");
    pd::merge_topk_device(gathered.data(), rows, k, static_cast<int>(1 + from.size()), cnt, larger, s);
    pd::export_lists_to_host(gathered.data(), cnt, r.values.data(), r.indices.data(),
                             static_cast<std::byte*>(host.stage.data()), s);
    s.synchronize();
  });
  x.close();
  SPILLWAY_MPI_TRY(MPI_Barrier(c.get()));
  ph.merge_seconds = seconds_since(t2);
  return std::move(r);
}

/// The same for a top-k pair job (pairwise's topk_sink): its slots merged on the device, its host
/// side started while the strips ran.
template <class V, class P, class S>
pairwise::topk_result<V> ipc_lists_to_owners(const communicator& c, const gram_split& sp,
                                             pairwise::detail::pair_job<V, P, S>& job, ipc_lists& x,
                                             gram_phases& ph) {
  namespace pd = pairwise::detail;
  const int k = job.sink.topk.k;
  const std::int64_t rows = sp.rows_of(c.rank());
  auto& dc = *job.ctx.at(0);  // one GPU per rank
  return ipc_lists_to_owners<V>(
      c, sp, dc.device, dc.setup->view(), job.prod.rows(false), k, job.prod.larger(),
      [&job] {
        (void)job.sink.merge_slots(job);
        return reinterpret_cast<const pd::topk_entry<V>*>(job.sink.dev.at(0).state.data());
      },
      [&job, rows, k] {
        return job.sink.host.valid() ? job.sink.host.get()
                                     : pd::topk_host_side<V>{pd::empty_topk<V>(rows, k), {}};
      },
      x, ph);
}

}  // namespace spillway::dist::detail
