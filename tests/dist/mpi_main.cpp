// main() of the MPI test binaries: MPI up before GoogleTest, down after it. Each rank runs every
// test (they are collective) and prints and returns its own results; mpirun fails when any rank does.
#include <spillway/dist/communicator.hpp>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  spillway::dist::environment env(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
