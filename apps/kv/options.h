// apps/kv/options.h: the command line of sluice-kv, its subcommands `run`
// (one rank of a `sluice run` job, flow_job.h) and `simulate` (the seeded
// simulated network, cluster_sim.h). options.cc adds them to the command's
// CLI11 app; only that file includes CLI11.
//
// Thread safety: plain values, filled in by the parse on main()'s thread.
#pragma once

#include <cstdint>
#include <string>

#include "cluster_sim.h"
#include "flow_job.h"

namespace CLI {
class App;
}

namespace kv {

// `sluice-kv run`.
struct RunCommand {
  FlowJobOptions job;
  // Test switch (SLUICE_TEST_KV_HOOKS=1) only: rank 0, the first leader, once
  // it has applied stall_after entries, stops for stall_ms (past the
  // election timeout): its worker thread sleeps, or (sigstop) the whole
  // process stops (SIGSTOP) and a forked child continues it. 0: never.
  uint64_t stall_ms = 0;
  uint64_t stall_after = 0;
  bool sigstop = false;
  // Test switch: the leader says once that it has applied this many
  // entries ("test hook: leader rank R applied N entries"), where a fault
  // test's launcher times its kill from (sluice run --faults-after); no rank
  // is told of the fault. 0: never.
  uint64_t mark_applied = 0;
};

// `sluice-kv simulate`.
struct SimulateCommand {
  ClusterOptions cluster;   // defaults: 4 clients x 200 ops on 8 keys, 1% lost
  uint64_t crash_at = 0;    // --crash-leader-at MS; 0: never
  uint64_t restart_at = 0;  // --restart-follower-at MS; 0: never
  std::string history;      // --history FILE; empty: none
};

struct Commands {
  RunCommand run;
  SimulateCommand simulate;
  bool simulating = false;  // `simulate` was given (else `run`)
};

// Adds `run` and `simulate` (one of them required) to `app`, writing their
// values into *commands, which must outlive the parse. The parse throws
// sluice::UsageError (through CLI11) for values that do not fit together,
// e.g. --value-bytes over --max-value-bytes.
void add_commands(CLI::App& app, Commands* commands);

}  // namespace kv
