// The rank program of launcher_faults_test: a rank that joins the job (so
// that `sluice run --kill/--stop` count from its start) and otherwise only
// waits. It prints "rank R joined as incarnation I", then waits --seconds S
// (default 3) in 20 ms ticks, and prints "rank R (incarnation I) done,
// longest pause P ms": the longest gap between two ticks, which is how long
// the process was stopped (SIGSTOP). It leaves the job and exits 0; a peer
// lost meanwhile changes nothing.
//
//   sluice-test-fault-rank [--seconds S]
#include <sluice/sluice.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include "support/job_args.h"

int main(int argc, char** argv) {
  double seconds = 3;
  sluice::testing::JobArgs(argc, argv, "[--seconds S]").value("--seconds", &seconds).parse();
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    const uint32_t rank = cluster.rank();
    const uint32_t incarnation = cluster.incarnation(rank);
    std::printf("rank %u joined as incarnation %u\n", rank, incarnation);
    using Clock = std::chrono::steady_clock;  // counts on while the process is stopped
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(seconds));
    Clock::duration longest{0};
    for (auto last = Clock::now(); last < until;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const auto now = Clock::now();
      longest = std::max(longest, now - last);
      last = now;
    }
    std::printf("rank %u (incarnation %u) done, longest pause %lld ms\n", rank, incarnation,
                static_cast<long long>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(longest).count()));
    return cluster.leave() == sluice::Status::kOk ? 0 : 1;
  } catch (const std::exception& e) {
    return sluice::testing::fail(std::string("fault rank: ") + e.what());
  }
}
