#include "job_report.h"

#include <sluice/errors.h>
#include <sluice/job.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "cluster_sim.h"
#include "flow_epochs.h"
#include "history.h"

namespace kv {

namespace {

// A string as one word: "-" for empty, else its bytes in hex.
std::string hex(const std::string& s) {
  if (s.empty()) return "-";
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * s.size());
  for (const unsigned char ch : s) {
    out.push_back(digits[ch >> 4]);
    out.push_back(digits[ch & 15]);
  }
  return out;
}

bool unhex(const std::string& w, std::string* out) {
  out->clear();
  if (w == "-") return true;
  if (w.size() % 2 != 0) return false;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (size_t i = 0; i < w.size(); i += 2) {
    const int hi = nibble(w[i]), lo = nibble(w[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
  }
  return true;
}

std::string client_report(uint32_t rank, const Client& c, uint64_t expected_ops) {
  std::ostringstream o;
  o << "C " << rank << " " << c.completed_count() << " " << c.retries() << " " << expected_ops
    << " " << c.completed_sum() << " " << c.history().size();
  for (const Completed& h : c.history()) {
    o << " " << h.cmd.client << " " << h.cmd.seq << " " << static_cast<int>(h.cmd.op) << " "
      << h.invoked_ms << " " << h.completed_ms << " " << h.invoked_us << " " << h.completed_us
      << " " << (h.result.ok | h.result.refused << 1) << " " << hex(h.cmd.key) << " "
      << hex(h.cmd.value) << " " << hex(h.cmd.expected) << " " << hex(h.result.value) << " "
      << h.cmd.now_ms << " " << h.cmd.deadline_ms << " " << static_cast<int>(h.cmd.ttl) << " "
      << static_cast<int>(h.cmd.ttl_if);
  }
  return o.str();
}

}  // namespace

std::pair<uint64_t, uint64_t> run_commands(const Store& s, uint32_t run) {
  std::pair<uint64_t, uint64_t> out{0, 0};
  s.for_each_client([&](uint64_t c) {
    if (client_run(c) != run) return;
    const uint64_t last = s.last_seq(c);
    out.first += last;
    for (uint64_t q = 1; q <= last; ++q) out.second += identity_hash(c, q);
  });
  return out;
}

std::string replica_report(uint32_t rank, const Store& s, uint64_t view,
                           const std::pair<uint64_t, uint64_t>* executed, uint32_t run) {
  std::ostringstream o;
  AppliedSummary a = s.summary();
  if (executed != nullptr) std::tie(a.executed, a.executed_sum) = *executed;
  o << "R " << rank << " " << view << " " << s.digest() << " " << a.entries << " " << a.chain << " "
    << a.executed << " " << a.executed_sum << " " << s.applied().size();
  for (const auto& [c, q] : s.applied()) o << " " << c << ":" << q;
  // This run's clients and the last command of each that took effect.
  std::vector<std::pair<uint64_t, uint64_t>> table;
  s.for_each_client([&](uint64_t c) {
    if (client_run(c) == run) table.emplace_back(c, s.last_seq(c));
  });
  o << " " << table.size();
  for (const auto& [c, q] : table) o << " " << c << ":" << q;
  return o.str();
}

std::string client_reports(uint32_t rank, const ClientGroup& g, uint64_t expected_ops) {
  std::string out;
  for (size_t i = 0; i < g.size(); ++i) {
    if (i > 0) out.push_back('\n');
    out.append(client_report(rank, g.client(i), expected_ops));
  }
  return out;
}

sluice::ShuffleSpec<sluice::Bytes> report_flow(sluice::Cluster& cluster,
                                               const std::vector<uint32_t>& live) {
  const std::vector<uint32_t> others(live.begin() + 1, live.end());
  return sluice::shuffle<sluice::Bytes>("kv-report" + epoch_suffix(cluster.world_size(), live))
      .sources(cluster.ranks(others))
      .targets(cluster.ranks({live[0]}))
      .segment_bytes(64 * 1024);
}

std::vector<std::string> gather_reports(sluice::Cluster& cluster, const std::vector<uint32_t>& live,
                                        const std::string& mine) {
  const uint32_t rank = cluster.rank();
  auto fail = [](const char* what, sluice::Status s, const std::string& error) {
    const sluice::ErrorCode code = s == sluice::Status::kPeerLost  ? sluice::ErrorCode::kPeerLost
                                   : s == sluice::Status::kTimeout ? sluice::ErrorCode::kTimeout
                                                                   : sluice::ErrorCode::kInternal;
    throw sluice::Error(
        code, std::string("kv-report: ") + what + ": " + sluice::to_string(s) + ": " + error);
  };
  if (live.size() == 1) return {mine};
  const sluice::ShuffleSpec<sluice::Bytes> spec = report_flow(cluster, live);
  sluice::DeclaredFlow flow = cluster.declare(spec);
  if (rank != live[0]) {
    sluice::Source<sluice::Bytes> out = cluster.source(spec, 0);
    for (size_t at = 0; at < mine.size(); at += kReportPiece) {
      const size_t n = std::min(kReportPiece, mine.size() - at);
      const sluice::Status s = out.push(std::as_bytes(std::span(mine.data() + at, n)));
      if (s != sluice::Status::kOk) fail("push", s, out.error());
    }
    const sluice::Status s = out.close();
    if (s != sluice::Status::kOk) fail("close", s, out.error());
    return {};
  }
  // Records of one source arrive in the order pushed (per-source FIFO), so
  // a source's pieces concatenate back into its line.
  std::vector<std::string> lines(live.size());
  lines[0] = mine;
  {
    sluice::Target<sluice::Bytes> in = cluster.target(spec, 0);
    while (auto batch = in.consume()) {
      const uint32_t from = in.last_source();  // index in the spec's sources: live[from + 1]
      for (std::span<const std::byte> rec : *batch)
        lines.at(from + 1).append(reinterpret_cast<const char*>(rec.data()), rec.size());
    }
    if (in.status() != sluice::Status::kEndOfFlow) fail("consume", in.status(), in.error());
  }
  return lines;
}

int check_job(const std::vector<std::string>& reports, const FlowJobOptions& o, uint32_t clients,
              const std::vector<uint32_t>& lost_replicas,
              const std::vector<uint32_t>& lost_gateways,
              const std::vector<uint32_t>& gateway_inc) {
  std::vector<std::string> problems;
  std::vector<uint32_t> replica_of;  // the rank of each log
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> logs;
  std::vector<AppliedSummary> summaries;
  std::vector<uint64_t> digests;
  std::vector<Completed> history;
  std::vector<Command> commands;
  uint64_t retries = 0, completed = 0, completed_sum = 0;
  uint32_t reported_clients = 0;  // the client lines (a lost gateway's are missing)
  // Whether every client sent its whole history and every replica its
  // applied log (a workload's job; a RESP gateway's holds neither).
  bool whole = true;
  // The first replica's client table: (identity, last seq) of this run's clients.
  using ClientTable = std::vector<std::pair<uint64_t, uint64_t>>;
  std::optional<ClientTable> table;
  std::vector<std::string> lines;  // a client rank's report holds a line per client
  for (const std::string& report : reports) {
    std::istringstream all(report);
    for (std::string line; std::getline(all, line);) lines.push_back(line);
  }
  for (const std::string& line : lines) {
    std::istringstream in(line);
    std::string kind;
    uint32_t r = 0;
    in >> kind >> r;
    if (kind == "R") {
      uint64_t digest = 0, n = 0, view = 0;
      AppliedSummary a;
      in >> view >> digest >> a.entries >> a.chain >> a.executed >> a.executed_sum >> n;
      auto pairs = [&in](uint64_t count) {
        std::vector<std::pair<uint64_t, uint64_t>> out;
        for (uint64_t i = 0; in && i < count; ++i) {
          std::string id;
          in >> id;
          const size_t colon = id.find(':');
          if (colon == std::string::npos) {
            in.setstate(std::ios::failbit);
            break;
          }
          out.emplace_back(std::stoull(id.substr(0, colon)), std::stoull(id.substr(colon + 1)));
        }
        return out;
      };
      std::vector<std::pair<uint64_t, uint64_t>> log = pairs(n);
      uint64_t table_size = 0;
      in >> table_size;
      if (!table) table = pairs(table_size);
      if (!in) problems.push_back("replica " + std::to_string(r) + "'s report is malformed");
      whole = whole && n == a.entries;
      logs.push_back(std::move(log));
      summaries.push_back(a);
      digests.push_back(digest);
      replica_of.push_back(r);
      std::printf("replica %u: applied %" PRIu64 " entries, digest %016" PRIx64 ", view %" PRIu64
                  "\n",
                  r, a.entries, digest, view);
      continue;
    }
    ++reported_clients;
    uint64_t count = 0, rt = 0, expected = 0, sum = 0, n = 0;
    in >> count >> rt >> expected >> sum >> n;
    retries += rt;
    completed += count;
    completed_sum += sum;
    whole = whole && n == count;
    for (uint64_t i = 0; i < n; ++i) {
      Completed c;
      int op = 0, ok = 0, ttl = 0, ttl_if = 0;
      std::string key, value, want, result;
      in >> c.cmd.client >> c.cmd.seq >> op >> c.invoked_ms >> c.completed_ms >> c.invoked_us >>
          c.completed_us >> ok >> key >> value >> want >> result >> c.cmd.now_ms >>
          c.cmd.deadline_ms >> ttl >> ttl_if;
      c.cmd.ttl = static_cast<Ttl>(ttl);
      c.cmd.ttl_if = static_cast<uint8_t>(ttl_if);
      if (!in || !unhex(key, &c.cmd.key) || !unhex(value, &c.cmd.value) ||
          !unhex(want, &c.cmd.expected) || !unhex(result, &c.result.value)) {
        problems.push_back("client rank " + std::to_string(r) + "'s report is malformed");
        break;
      }
      c.cmd.op = static_cast<Op>(op);
      c.result.ok = (ok & 1) != 0;
      c.result.refused = (ok & 2) != 0;
      commands.push_back(c.cmd);
      history.push_back(c);
    }
    if (expected != 0 && count != expected)
      problems.push_back("client rank " + std::to_string(r) + " completed " +
                         std::to_string(count) + " of " + std::to_string(expected) + " operations");
  }
  for (uint32_t r : lost_replicas) std::printf("replica %u: lost; the job went on without it\n", r);
  if (logs.empty() || logs.size() + lost_replicas.size() != o.replicas) {
    std::printf("MISMATCH: %zu replica reports and %zu lost replicas, of %u\n", logs.size(),
                lost_replicas.size(), o.replicas);
    std::printf("job: FAILED\n");
    return 1;
  }
  // On --data-dir each replica counts the commands of this run's clients
  // it executed itself (replica_report): one that installed a snapshot
  // during the run counts fewer, those the snapshot holds. The logs are
  // compared without the counts then, and the highest count is the log's.
  const bool per_run = !o.data_dir.empty();
  auto same_log = [per_run](const AppliedSummary& x, const AppliedSummary& y) {
    return per_run ? x.entries == y.entries && x.chain == y.chain : x == y;
  };
  for (size_t i = 1; i < logs.size(); ++i) {
    const std::string first = std::to_string(replica_of[0]) + "'s";
    if (logs[i] != logs[0] || !same_log(summaries[i], summaries[0]))
      problems.push_back("replica " + std::to_string(replica_of[i]) +
                         "'s applied log differs from replica " + first);
    if (digests[i] != digests[0])
      problems.push_back("replica " + std::to_string(replica_of[i]) +
                         "'s digest differs from replica " + first);
  }
  // Exactly once: the replicas executed each completed operation, and
  // nothing else (an order-independent sum over the identities, and the
  // count).
  AppliedSummary a = summaries[0];
  // A gateway process that died (its rank lost, or started again as a new
  // client: `gateway_inc`) took its connections with it: what its clients
  // had take effect is each client's commands 1 .. its last seq (a client's
  // commands take effect in order, once: store.h), whose outcome reached no
  // one or went with the process. Those are left out of the exactly-once
  // count.
  uint64_t gone_count = 0, gone_sum = 0;
  if (o.resp && table) {
    const uint32_t per_rank = std::max<uint32_t>(1, o.clients_per_rank);
    const Config config{o.replicas};
    struct Gone {
      bool lost = false;  // the rank is lost (else: started again since)
      uint64_t operations = 0;
    };
    std::map<std::pair<uint32_t, uint32_t>, Gone> gone;  // by (rank, incarnation)
    for (const auto& [identity, last] : *table) {
      if (client_node(identity) < config.client_id(0)) continue;
      const uint32_t r = o.replicas + (client_node(identity) - config.client_id(0)) / per_rank;
      const bool lost =
          std::find(lost_gateways.begin(), lost_gateways.end(), r) != lost_gateways.end();
      const bool old =
          r < gateway_inc.size() && client_incarnation(identity) != (gateway_inc[r] & 0xffff);
      if (!lost && !old) continue;
      Gone& g = gone[{r, client_incarnation(identity)}];
      g.lost = lost;
      g.operations += last;
      gone_count += last;
      for (uint64_t q = 1; q <= last; ++q) gone_sum += identity_hash(identity, q);
    }
    for (const auto& [who, g] : gone) {
      const uint64_t n = g.operations;
      std::printf("gateway rank %u, incarnation %u: %s; the %" PRIu64
                  " operation%s its clients had take effect %s not counted\n",
                  who.first, who.second, g.lost ? "lost" : "started again since", n,
                  n == 1 ? "" : "s", n == 1 ? "is" : "are");
    }
  }
  for (const AppliedSummary& s : summaries)
    if (per_run && s.executed > a.executed) a = s;
  a.executed -= gone_count;
  a.executed_sum -= gone_sum;
  if (a.executed != completed || a.executed_sum != completed_sum)
    problems.push_back("the log executed " + std::to_string(a.executed) +
                       " distinct operations, the clients completed " + std::to_string(completed) +
                       (a.executed == completed ? " (same count, other operations)" : ""));
  if (whole) {
    const std::string lin = check_linearization(logs[0], commands, history);
    if (!lin.empty()) problems.push_back(lin);
  }
  std::string why;
  if (whole && !o.history.empty() && !write_history(o.history, history, &why))
    problems.push_back(why);
  if (!o.resp) {
    std::printf("clients: %u x %u operations completed (%" PRIu64 " in all, %" PRIu64
                " retries); log: %" PRIu64 " entries, %" PRIu64 " distinct operations\n",
                clients, o.ops_per_client, completed, retries, a.entries, a.executed);
  } else {
    std::printf("clients: %u RESP gateway clients completed %" PRIu64 " operations (%" PRIu64
                " retries); log: %" PRIu64 " entries, %" PRIu64 " distinct operations\n",
                reported_clients, completed, retries, a.entries, a.executed);
  }
  for (const std::string& line : latency_report(history)) std::printf("%s\n", line.c_str());
  std::printf("replicas agree: %s\n", problems.empty() ? "yes" : "no");
  for (const std::string& p : problems) std::printf("MISMATCH: %s\n", p.c_str());
  if (!problems.empty()) {
    std::printf("job: FAILED\n");
  } else if (whole) {
    std::printf(
        "job: every operation completed exactly once; replicas identical; history "
        "linearizable\n");
  } else {
    // (A gateway holds no history; with --history each streamed its own,
    // which kv-porcupine checks.)
    std::printf("job: every operation completed exactly once; replicas identical\n");
  }
  return problems.empty() ? 0 : 1;
}

int collect_verdict(sluice::Cluster& cluster, const FlowJobOptions& o,
                    const std::vector<uint32_t>& members, const std::vector<uint32_t>& member_inc,
                    const std::string& mine, uint32_t clients) {
  const uint32_t rank = cluster.rank(), world = cluster.world_size();
  std::vector<uint32_t> candidates = members;
  for (uint32_t attempt = 0;; ++attempt) {
    const std::string round = std::to_string(attempt);
    const std::vector<uint32_t> now =
        sluice::meet_survivors(cluster, "kv-reporters-" + round, candidates, member_inc);
    // (Against the run's members: a client lost in an earlier round is
    // missing from the candidates too.)
    for (uint32_t r : members) {
      if (r >= o.replicas && !o.resp && std::find(now.begin(), now.end(), r) == now.end()) {
        std::fprintf(stderr,
                     "sluice-kv: rank %u: client rank %u was lost before every member had the "
                     "verdict: its operations cannot be checked again, so the job ends without "
                     "its checks\n",
                     rank, r);
        return 1;
      }
    }
    if (rank == now[0]) {
      std::fprintf(stderr,
                   "sluice-kv: rank %u: the run is done; collecting the reports of ranks%s\n", rank,
                   ranks_text(now).c_str());
      std::fflush(stderr);
    }
    std::optional<int> verdict;
    try {
      const std::vector<std::string> all = gather_reports(cluster, now, mine);
      if (rank == now[0]) {
        std::vector<uint32_t> lost_gateways;
        if (o.resp)
          for (uint32_t r : lost_ranks(world, now, world))
            if (r >= o.replicas) lost_gateways.push_back(r);
        verdict = check_job(all, o, clients, lost_ranks(world, now, o.replicas), lost_gateways,
                            member_inc);
      }
      std::fflush(stdout);
    } catch (const sluice::Error& e) {
      if (e.code() != sluice::ErrorCode::kPeerLost) throw;
      std::fprintf(stderr, "sluice-kv: rank %u: reports: %s; again without the lost rank\n", rank,
                   e.what());
    }
    const std::vector<uint32_t> met =
        sluice::meet_survivors(cluster, "kv-verdict-" + round, now, member_inc);
    // Every member met, the collector past its check (a collector whose
    // gather failed did so because a member was lost, who did not meet).
    if (met == now) return rank == now[0] ? verdict.value_or(1) : 0;
    std::fprintf(stderr,
                 "sluice-kv: rank %u: ranks%s met after the reports, of%s; the reports go again\n",
                 rank, ranks_text(met).c_str(), ranks_text(now).c_str());
    candidates = met;
  }
}

}  // namespace kv
