// Fixtures of the MPI tests (tests/dist/): seeds printed once per job, the same random bit
// matrix on every rank, and a folder every rank of the job reaches.
#pragma once

#include <spillway/dist/communicator.hpp>
#include <spillway/gram/host_gram.hpp>

#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace spillway::dist_test {

/// The test's seed (SPILLWAY_TEST_SEED to vary), mixed with `salt`; rank 0 prints it.
inline std::uint64_t seed(const std::string& salt) {
  std::uint64_t s = 0x5eed5eedULL;
  if (const char* v = std::getenv("SPILLWAY_TEST_SEED")) s = std::strtoull(v, nullptr, 0);
  s ^= std::hash<std::string>{}(salt)*0x9E3779B97F4A7C15ULL;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r == 0)
    std::printf("[ seed     ] %s seed=%llu (set SPILLWAY_TEST_SEED to vary)\n", salt.c_str(),
                static_cast<unsigned long long>(s));
  return s;
}

/// The same random 0/1 matrix on every rank (same seed), density `d`.
inline gram::bit_matrix random_bits(std::int64_t rows, std::int64_t cols, double d, std::uint64_t s) {
  std::mt19937_64 g(s);
  std::vector<std::uint8_t> b(static_cast<std::size_t>(rows * cols));
  for (auto& x : b) x = (g() % 1000) < d * 1000 ? 1 : 0;
  return gram::pack_bits(b.data(), rows, cols);
}

/// A folder every rank can reach (the ranks of these tests share a host): made by rank 0, named to
/// all, removed by rank 0 when the test's ranks are done with it.
class shared_dir {
 public:
  explicit shared_dir(const dist::communicator& c) : c_(c) {
    if (c.rank() == 0) {
      char tmpl[] = "/tmp/spillway_dist_XXXXXX";
      const char* p = mkdtemp(tmpl);
      path_ = p != nullptr ? p : "";
    }
    int len = static_cast<int>(path_.size());
    MPI_Bcast(&len, 1, MPI_INT, 0, c.get());
    path_.resize(static_cast<std::size_t>(len));
    MPI_Bcast(path_.data(), len, MPI_CHAR, 0, c.get());
  }
  shared_dir(const shared_dir&) = delete;
  shared_dir& operator=(const shared_dir&) = delete;
  ~shared_dir() {
    MPI_Barrier(c_.get());
    std::error_code ec;
    if (c_.rank() == 0 && !path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string operator+(const char* rest) const { return path_ + rest; }

 private:
  const dist::communicator& c_;
  std::string path_;
};

}  // namespace spillway::dist_test
