// The kernel-path choice as a pure function of compute capability and the code a build carries.
#include <spillway/gram/kernel_path.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using spillway::gram::kernel_path;
using spillway::gram::resolve_kernel_path;

kernel_path resolved(kernel_path req, int cc, bool bmma, bool bgmma, bool expect_ok = true) {
  kernel_path out = kernel_path::automatic;
  EXPECT_EQ(resolve_kernel_path(req, cc, bmma, bgmma, out), expect_ok)
      << spillway::gram::to_string(req) << " cc=" << cc;
  return out;
}

TEST(GramKernelPath, AutomaticPicksTheFastestAvailable) {
  EXPECT_EQ(resolved(kernel_path::automatic, 90, true, true), kernel_path::wgmma);
  EXPECT_EQ(resolved(kernel_path::automatic, 90, true, false), kernel_path::mma_sync);  // plain sm_90 build
  EXPECT_EQ(resolved(kernel_path::automatic, 100, true, false), kernel_path::mma_sync);
  EXPECT_EQ(resolved(kernel_path::automatic, 120, true, false), kernel_path::mma_sync);
  EXPECT_EQ(resolved(kernel_path::automatic, 80, true, false), kernel_path::mma_sync);
  EXPECT_EQ(resolved(kernel_path::automatic, 86, true, false), kernel_path::mma_sync);
  EXPECT_EQ(resolved(kernel_path::automatic, 75, false, false), kernel_path::popc);
  EXPECT_EQ(resolved(kernel_path::automatic, 80, false, false), kernel_path::popc);  // sm_75-only build
}

TEST(GramKernelPath, ForcedPathsAreRefusedWhereTheyCannotRun) {
  resolved(kernel_path::wgmma, 90, true, true);
  resolved(kernel_path::wgmma, 90, true, false, false);
  resolved(kernel_path::wgmma, 100, true, true, false);  // sm_90a code does not run on Blackwell
  resolved(kernel_path::wgmma, 80, true, false, false);
  resolved(kernel_path::mma_sync, 75, false, false, false);
  resolved(kernel_path::mma_sync, 80, false, false, false);
  EXPECT_EQ(resolved(kernel_path::mma_sync, 90, true, true), kernel_path::mma_sync);
  EXPECT_EQ(resolved(kernel_path::popc, 75, false, false), kernel_path::popc);
  EXPECT_EQ(resolved(kernel_path::popc, 90, true, true), kernel_path::popc);
}

TEST(GramKernelPath, Names) {
  EXPECT_EQ(std::string(spillway::gram::to_string(kernel_path::automatic)), "automatic");
  EXPECT_EQ(std::string(spillway::gram::to_string(kernel_path::wgmma)), "wgmma");
  EXPECT_EQ(std::string(spillway::gram::to_string(kernel_path::mma_sync)), "mma_sync");
  EXPECT_EQ(std::string(spillway::gram::to_string(kernel_path::popc)), "popc");
}

}  // namespace
