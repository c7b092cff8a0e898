// Uses the installed optional component spillway::mpi (find_package(spillway COMPONENTS mpi)):
// MPI through spillway's environment and communicator, and a collective step that agrees.
#include <spillway/dist.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  spillway::dist::environment env(argc, argv);
  spillway::dist::communicator comm;
  const auto plan =
      spillway::pairwise::split_contiguous(spillway::pairwise::strip_tasks(1000, 64, true), comm.size());
  const int parts =
      spillway::dist::agree(comm, "planning", [&] { return static_cast<int>(plan.parts.size()); });
  std::printf("spillway::mpi: %d rank(s), %d part(s)\n", comm.size(), parts);
  return parts == comm.size() ? 0 : 1;
}
