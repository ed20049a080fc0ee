#include "job_disk.h"

#include <sluice/errors.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "wal.h"

namespace kv {

std::optional<JobDisk> open_job_disk(sluice::Cluster& cluster, const FlowJobOptions& o,
                                     uint32_t rank, bool is_replica, uint32_t incarnation,
                                     bool nopaxos, int* exit_code) {
  JobDisk jd;
  if (!o.resp) {
    if (rank == 0)
      std::fprintf(stderr,
                   "sluice-kv: --data-dir works behind --resp-port only (docs/kv.md, "
                   "Durability)\n");
    *exit_code = 2;
    return std::nullopt;
  }
  std::string why;
  if (is_replica) {
    try {
      jd.disk = std::make_unique<ReplicaDisk>(
          DiskOptions{o.data_dir, o.fsync, o.test_hold_unsynced, o.test_sync_delay_us, nopaxos},
          o.replicas, rank);
      jd.run = jd.disk->runs();
      jd.restored = jd.disk->take_restored();
    } catch (const sluice::Error& e) {
      why = "rank " + std::to_string(rank) + ": " + e.what();
    }
  }
  *exit_code = 1;
  if (incarnation != 0) {
    if (why.empty()) return jd;
    std::fprintf(stderr, "sluice-kv: %s\n", why.c_str());
    return std::nullopt;
  }
  // "RUNS LAST" (LAST: the last slot its files held, - for none), or "!"
  // and why it cannot start.
  std::string mine = "!" + why;
  if (why.empty()) {
    uint64_t last = 0;
    if (jd.restored)
      last = std::max(jd.restored->snapshot_slot,
                      jd.restored->entries.empty() ? 0 : jd.restored->entries.back().slot);
    // (Files written while recovering hold nothing: as none.)
    const bool restored = jd.restored && !jd.restored->recovering;
    mine = std::to_string(jd.run) + " " + (restored ? std::to_string(last) : "-");
  }
  const std::vector<std::string> all = cluster.allgather("kv-data-dir", mine);
  std::string failed;
  for (uint32_t r = 0; r < all.size(); ++r) {
    const std::string& a = all[r];
    if (!a.empty() && a[0] == '!') {
      failed.append(" ").append(std::to_string(r));
    } else if (!a.empty()) {
      const size_t space = a.find(' ');
      // (stoul stops at the space.)
      jd.run = std::max(jd.run, static_cast<uint32_t>(std::stoul(a)));
      if (space != std::string::npos && a[space + 1] != '-') {
        jd.restored_last = std::max<uint64_t>(jd.restored_last, std::stoull(a.substr(space + 1)));
        jd.restored_mask |= 1u << r;
      }
    }
  }
  if (!failed.empty()) {
    if (!why.empty()) std::fprintf(stderr, "sluice-kv: %s\n", why.c_str());
    if (rank == 0)
      std::fprintf(stderr,
                   "sluice-kv: --data-dir %s: the job cannot start: replica rank(s)%s cannot "
                   "use their directories (each says why)\n",
                   o.data_dir.c_str(), failed.c_str());
    return std::nullopt;
  }
  ++jd.run;
  return jd;
}

namespace {

// The replica's run begins on disk (a rewrite of everything it holds), and
// a line says where it keeps its data and what it started from.
template <typename Replica>
void begin_run(JobDisk& jd, Replica& replica, const FlowJobOptions& o, uint32_t rank,
               bool from_disk, bool recover) {
  DurableChanges taken;
  replica.take_durable(&taken);  // begin_run writes them all
  jd.disk->begin_run(jd.run, replica.durable_state());
  std::fprintf(stderr, "sluice-kv: rank %u keeps its data in %s (run %u, --fsync %s, pid %d): %s\n",
               rank, jd.disk->dir().c_str(), jd.run, fsync_mode_name(o.fsync),
               static_cast<int>(::getpid()),
               from_disk ? ("restored from disk: " + jd.disk->loaded()).c_str()
               : recover ? "its files are not there, not used or not whole: recovering from the "
                           "others"
                         : "new");
  std::fflush(stderr);
}

}  // namespace

bool recover_from_others(const JobDisk& jd, uint32_t incarnation) {
  return incarnation > 0 ||
         (jd.disk != nullptr && (!jd.restored || jd.restored->recovering) && jd.run > 1);
}

void start_on_disk(JobDisk& jd, MultiPaxosReplica& replica, const FlowJobOptions& o, uint32_t rank,
                   bool recover) {
  const bool from_disk = jd.restored && !recover;
  if (from_disk) replica.restore(std::move(*jd.restored));
  if (o.fsync != FsyncMode::kAlways)
    replica.require_promises_until(jd.restored_last, jd.restored_mask);
  replica.count_run(jd.run);
  begin_run(jd, replica, o, rank, from_disk, recover);
}

void start_on_disk(JobDisk& jd, NoPaxosReplica& replica, const FlowJobOptions& o, uint32_t rank,
                   bool recover) {
  const bool from_disk = jd.restored && !recover;
  if (from_disk) replica.restore(std::move(*jd.restored));
  if (o.fsync != FsyncMode::kAlways) replica.require_view_changes_from(jd.restored_mask);
  begin_run(jd, replica, o, rank, from_disk, recover);
}

}  // namespace kv
