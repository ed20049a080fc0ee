// sluice-kv: the replicated key-value store. `sluice-kv run` is one rank of
// a `sluice run` job (Multi-Paxos or NOPaxos replicas and clients over
// sluice flows, flow_job.h); `sluice-kv simulate` runs either protocol on the
// deterministic simulated network, the way the tests do (docs/kv.md). The
// options are in options.cc; `sluice-kv run --help` lists them.
#include <signal.h>
#include <sluice/job.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "cluster_sim.h"
#include "flow_job.h"
#include "history.h"
#include "options.h"

namespace {

// What a RESP gateway's settings risk, said once before the job starts.
void warn_about_exposure(const kv::FlowJobOptions& o) {
  const kv::GatewayOptions& g = o.gateway;
  if (!o.resp) return;
  if (g.requirepass.empty() && !g.protected_mode)
    std::fprintf(stderr,
                 "sluice-kv run: warning: --protected-mode no without a password: any client "
                 "that reaches the port can read, write and delete every key\n");
  if (g.bind == "0.0.0.0" || g.bind == "::")
    std::fprintf(stderr, "sluice-kv run: warning: --resp-bind %s listens on every interface%s\n",
                 g.bind.c_str(),
                 g.requirepass.empty()
                     ? (g.protected_mode
                            ? "; without --requirepass, protected mode still refuses every client "
                              "that is not on loopback"
                            : "")
                     : "; clients must AUTH");
}

// Test switch (SLUICE_TEST_KV_HOOKS=1, options.cc): the leader prints once that it has applied `n`
// entries; a fault test's launcher kills a rank from that line (sluice run --faults-after).
void install_applied_mark(kv::FlowJobOptions& o, uint64_t n) {
  auto said = std::make_shared<bool>(false);
  auto before = o.on_progress;
  o.on_progress = [n, said, before](uint32_t rank, bool leader, uint64_t applied) {
    if (before) before(rank, leader, applied);
    if (*said || !leader || applied < n) return;
    *said = true;
    std::fprintf(stderr, "test hook: leader rank %u applied %llu entries\n", rank,
                 static_cast<unsigned long long>(applied));
    std::fflush(stderr);
  };
}

// Test switches (SLUICE_TEST_KV_HOOKS=1, options.cc): rank 0, the first leader, once it has applied
// `after` entries, stops for `ms` (past the election timeout). Its worker thread sleeps (its
// control thread keeps the rank alive, as a long pause would), or with `sigstop` the whole process
// stops (SIGSTOP, every thread, heartbeats too) and a forked child sends SIGCONT after `ms`.
void install_leader_stall(kv::FlowJobOptions& o, uint64_t ms, uint64_t after, bool sigstop) {
  auto stalled = std::make_shared<bool>(false);
  o.on_progress = [ms, after, stalled, sigstop](uint32_t rank, bool leader, uint64_t applied) {
    if (*stalled || rank != 0 || !leader || applied < after) return;
    *stalled = true;
    std::fprintf(stderr, "test hook: leader rank %u %s for %llu ms after %llu entries\n", rank,
                 sigstop ? "stops (SIGSTOP)" : "stalls", static_cast<unsigned long long>(ms),
                 static_cast<unsigned long long>(applied));
    std::fflush(stderr);
    if (!sigstop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return;
    }
    const pid_t self = ::getpid();
    const pid_t waker = ::fork();
    if (waker == 0) {  // async-signal-safe calls only: the parent has threads
      const struct timespec pause {
        static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000
      };
      ::nanosleep(&pause, nullptr);
      ::kill(self, SIGCONT);
      ::_exit(0);
    }
    if (waker < 0) {
      std::perror("test hook: fork");
      return;
    }
    ::raise(SIGSTOP);
    ::waitpid(waker, nullptr, 0);
    std::fprintf(stderr, "test hook: leader rank %u continues (SIGCONT)\n", rank);
  };
}

int simulate(const kv::SimulateCommand& c) {
  const kv::ClusterOptions& o = c.cluster;
  kv::SimCluster cluster(o);
  // The two faults in time order.
  auto crash_leader = [&] {
    cluster.net().run(c.crash_at - cluster.net().now(), [] { return false; });
    int l = cluster.leader();
    if (l >= 0) {
      std::printf("crashing leader replica %d at %llu ms\n", l,
                  static_cast<unsigned long long>(cluster.net().now()));
      cluster.net().crash(static_cast<uint32_t>(l));
    }
  };
  auto restart_follower = [&] {
    cluster.net().run(c.restart_at - cluster.net().now(), [] { return false; });
    const int l = cluster.leader();
    for (uint32_t k = 1; k <= o.replicas && o.replicas > 1; ++k) {
      const uint32_t r = (static_cast<uint32_t>(l < 0 ? 0 : l) + k) % o.replicas;
      if (static_cast<int>(r) == l || cluster.net().is_down(r)) continue;
      std::printf("restarting follower replica %u without its state at %llu ms\n", r,
                  static_cast<unsigned long long>(cluster.net().now()));
      cluster.restart(r);
      break;
    }
  };
  if (c.crash_at > 0 && (c.restart_at == 0 || c.crash_at <= c.restart_at)) crash_leader();
  if (c.restart_at > 0) restart_follower();
  if (c.crash_at > c.restart_at && c.restart_at > 0) crash_leader();
  bool done = cluster.run_until_done(600000);
  cluster.quiesce();
  std::string rep = cluster.check_replicas();
  std::string res = cluster.check_results();
  uint64_t completed = cluster.history().size();
  std::printf("protocol %s, %u replicas, %u clients x %u ops, drop %.3f, seed %llu\n",
              o.protocol == kv::Protocol::kMultiPaxos ? "multipaxos" : "nopaxos", o.replicas,
              o.clients, o.ops_per_client, o.sim.drop_rate,
              static_cast<unsigned long long>(o.seed));
  std::printf("completed %llu ops in %llu simulated ms; messages delivered %llu, lost %llu\n",
              static_cast<unsigned long long>(completed),
              static_cast<unsigned long long>(cluster.net().now()),
              static_cast<unsigned long long>(cluster.net().delivered()),
              static_cast<unsigned long long>(cluster.net().dropped()));
  for (uint32_t r = 0; r < o.replicas; ++r) {
    if (cluster.net().is_down(r)) {
      std::printf("replica %u: crashed\n", r);
      continue;
    }
    std::printf("replica %u: applied %zu entries, %zu keys, digest %016llx\n", r,
                cluster.store(r).applied().size(), cluster.store(r).size(),
                static_cast<unsigned long long>(cluster.store(r).digest()));
  }
  std::printf("replicas agree: %s\n", rep.empty() ? "yes" : rep.c_str());
  std::printf("history linearizable (log as witness): %s\n", res.empty() ? "yes" : res.c_str());
  if (!done) std::printf("FAILED: clients did not finish\n");
  std::string why;
  if (!c.history.empty() && !kv::write_history(c.history, cluster.history(), &why))
    throw std::runtime_error(why);
  return done && rep.empty() && res.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  sluice::Job job("sluice-kv", "A replicated key-value store (Multi-Paxos, NOPaxos) on flows",
                  sluice::kFlagCluster);
  kv::Commands commands;
  kv::add_commands(job.cli(), &commands);
  if (std::optional<int> status = job.parse(argc, argv)) return *status;
  if (commands.simulating) return job.run_local([&] { return simulate(commands.simulate); });

  kv::RunCommand& run = commands.run;
  warn_about_exposure(run.job);
  if (run.stall_ms > 0) install_leader_stall(run.job, run.stall_ms, run.stall_after, run.sigstop);
  if (run.mark_applied > 0) install_applied_mark(run.job, run.mark_applied);
  // A restarted replica restores its state and enters the next view
  // (flow_job.cc); a restarted client says it cannot go on.
  job.set_rejoin(true);
  return job.run([&](sluice::JobContext& ctx) { return kv::run_flow_job(ctx.cluster(), run.job); });
}
