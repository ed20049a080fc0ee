// apps/kv/job_disk.h: a flow job's start on `sluice-kv run --data-dir DIR`
// (docs/kv.md, Durability): each replica opens its directory
// (replica_disk.h), every rank learns the job's run number, which replicas
// restored files and the highest slot any of them held; then a replica of
// either protocol is brought up on its files.
//
// Thread safety: the job's thread.
#pragma once

#include <sluice/cluster.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "flow_job.h"
#include "multipaxos.h"
#include "nopaxos.h"
#include "replica_disk.h"

namespace kv {

struct JobDisk {
  std::unique_ptr<ReplicaDisk> disk;  // this replica's directory (null on a client rank)
  std::optional<RestoredState> restored;
  uint32_t run = 0;            // this run's number (one more than any replica's files count)
  uint64_t restored_last = 0;  // the highest slot any replica's files held
  uint32_t restored_mask = 0;  // a bit per replica that restored files
};

// Opens the job's --data-dir (every rank calls it). A replica that cannot
// use its directory says why and the others are told (an allgather), and
// the job ends: nullopt, with the exit code in *exit_code (2: a combination
// --data-dir does not support; 1: a directory refused). `nopaxos`: the
// replicas run NOPaxos (their files say which protocol wrote them). A restarted replica
// (incarnation > 0) recovers from the others as without a disk and keeps
// the run its first process began.
std::optional<JobDisk> open_job_disk(sluice::Cluster& cluster, const FlowJobOptions& o,
                                     uint32_t rank, bool is_replica, uint32_t incarnation,
                                     bool nopaxos, int* exit_code);

// Brings `replica` up on its files: restored from them unless it recovers
// from the others (`recover`), held to the promises of every replica that
// restored files (--fsync everysec or no), its run begun on disk; says so
// on stderr.
void start_on_disk(JobDisk& jd, MultiPaxosReplica& replica, const FlowJobOptions& o, uint32_t rank,
                   bool recover);
// The same for NOPaxos (nopaxos.h, Durability): restored from its files
// unless it recovers from the others.
void start_on_disk(JobDisk& jd, NoPaxosReplica& replica, const FlowJobOptions& o, uint32_t rank,
                   bool recover);
// Whether this replica recovers from the others instead of starting from
// its files: a restarted process (`incarnation` above 0), or, in a run
// after the first, one whose files are not there or were written while it
// was recovering (they hold nothing it may go on from).
bool recover_from_others(const JobDisk& jd, uint32_t incarnation);

}  // namespace kv
