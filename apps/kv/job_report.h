// apps/kv/job_report.h: the end of a `sluice-kv run` job — what each rank
// reports, how the reports reach rank 0, and rank 0's checks.
//
// Each rank's report is one line of text: a replica's applied log (command
// identities), digest and view; a client's completed operations with their
// whole commands (hex-encoded strings) and times. The lines travel to rank
// 0 on a flow ("kv-report", every other rank -> rank 0, in pieces of at most
// kReportPiece bytes), not through the registry, so a report is as long as
// the run makes it. Rank 0 then checks: equal digests and applied logs on
// all replicas, every client operation in the log exactly once, the log a
// linearization of the clients' history (check_linearization), and prints
// the counts, throughput and latencies.
//
// Thread safety: none (the job's one thread per rank).
#pragma once

#include <sluice/cluster.h>
#include <sluice/flow.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "client.h"
#include "flow_job.h"
#include "store.h"

namespace kv {

inline constexpr size_t kReportPiece = 60 * 1024;

// `view`: the ballot (Multi-Paxos) or leader number (NOPaxos) the replica
// ended in; above 0 means a leader change happened. `executed`, if given,
// replaces the store's executed count and sum (a run on --data-dir counts
// its own clients' commands only: the store remembers earlier runs'). The
// report also holds the client table's entries of run `run` (client_run of
// their identities, command.h; 0 without --data-dir).
std::string replica_report(uint32_t rank, const Store& s, uint64_t view,
                           const std::pair<uint64_t, uint64_t>* executed = nullptr,
                           uint32_t run = 0);
// What run `run`'s clients had take effect in `s`, counted from its client
// table (each client's commands 1 .. its last, since a client's commands
// take effect in order, once: store.h): how many, and the sum of their
// identity_hash. What a NOPaxos replica on --data-dir reports as its run's
// executed commands (its leader executes ahead of the final log and may
// start its store again, so it cannot count them as they execute).
std::pair<uint64_t, uint64_t> run_commands(const Store& s, uint32_t run);
// The reports of every client of a rank, one line each (its completed
// operations with whole commands and times). `expected_ops`: how many each
// had to complete (0: any number, a RESP gateway's).
std::string client_reports(uint32_t rank, const ClientGroup& g, uint64_t expected_ops);

// The kv-report flow among the live ranks (increasing): every other live
// rank -> the first, named "kv-report" + epoch_suffix (flow_epochs.h).
sluice::ShuffleSpec<sluice::Bytes> report_flow(sluice::Cluster& cluster,
                                               const std::vector<uint32_t>& live);

// Declares the report flow among `live` and sends `mine` to its first rank
// (the collector), or, on the collector, collects every live rank's line
// (its own first, then in rank order). Throws sluice::Error if the flow
// fails (code kPeerLost if a rank is lost: the caller may try again without it).
std::vector<std::string> gather_reports(sluice::Cluster& cluster, const std::vector<uint32_t>& live,
                                        const std::string& mine);

// The collector: checks the job from every live rank's report and prints
// the summary; `lost_replicas` are the replicas the job went on without
// (each is named; the others must agree), `lost_gateways` the RESP gateway
// ranks lost, and `gateway_inc` every rank's incarnation now (indexed by
// rank): what the clients of a gateway process that is gone (its rank lost,
// or started again since) had take effect is named and left out of the
// exactly-once count. Returns the exit status (0: every check passed).
int check_job(const std::vector<std::string>& reports, const FlowJobOptions& options,
              uint32_t clients, const std::vector<uint32_t>& lost_replicas,
              const std::vector<uint32_t>& lost_gateways = {},
              const std::vector<uint32_t>& gateway_inc = {});

// The end of the run among its last `members` (their incarnations
// `member_inc`): they first meet (sluice::meet_survivors: a meeting of
// those still there, the same list on each) so that all gather their
// reports (`mine`: this rank's) at the lowest of them, who checks the job
// (`clients` in all); after the check they meet again, and the verdict
// stands once all of them met, the collector past its check: no member
// leaves while the verdict could still be lost with the collector. A member
// lost meanwhile (a replica, or the collector) makes the others begin again
// without it; a lost client rank ends the job without its checks (its
// operations cannot be checked again). Returns the exit status: the
// collector's verdict on the collector, 0 on the others.
int collect_verdict(sluice::Cluster& cluster, const FlowJobOptions& o,
                    const std::vector<uint32_t>& members, const std::vector<uint32_t>& member_inc,
                    const std::string& mine, uint32_t clients);

}  // namespace kv
