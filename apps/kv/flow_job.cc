#include "flow_job.h"

#include <sluice/errors.h>
#include <sluice/flow.h>
#include <sluice/worker.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "codec.h"
#include "history.h"
#include "job_report.h"
#include "resp_gateway.h"

namespace kv {
namespace {

uint64_t now_us() {
  // CLOCK_MONOTONIC: comparable between the processes of one host, which is
  // what the real-time part of the linearizability check needs.
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
uint64_t now_ms() { return now_us() / 1000; }

}  // namespace

int run_flow_job(sluice::Cluster& cluster, const FlowJobOptions& o) {
  const uint32_t rank = cluster.rank(), world = cluster.world_size();
  if (o.replicas == 0 || o.replicas % 2 == 0 || world <= o.replicas) {
    if (rank == 0)
      std::fprintf(stderr,
                   "sluice-kv: %u replicas need an odd count and at least one more rank for a "
                   "client; this job has %u ranks (use sluice run -n %u or more)\n",
                   o.replicas, world, o.replicas + 1);
    return 2;
  }
  const Config config{o.replicas};
  const uint32_t clients = world - o.replicas;  // client ranks
  const uint32_t per_rank = std::max<uint32_t>(1, o.clients_per_rank);
  const bool is_replica = rank < o.replicas;
  const bool nopaxos = o.protocol == Protocol::kNoPaxos;
  // Client i (0-based over the job) is on client rank i / per_rank.
  auto rank_of = [&](uint32_t id) {
    return id < o.replicas ? id : o.replicas + (id - config.client_id(0)) / per_rank;
  };

  std::vector<uint32_t> replica_ranks;
  for (uint32_t r = 0; r < o.replicas; ++r) replica_ranks.push_back(r);
  auto msg_spec = sluice::shuffle_bytes("kv-msg")
                      .sources(cluster.all_ranks())
                      .targets(cluster.all_ranks())
                      .explicit_targets()
                      .segment_bytes(64 * 1024);
  auto accept_spec = sluice::replicate_bytes("kv-accept")
                         .sources(cluster.ranks(replica_ranks))
                         .targets(cluster.ranks(replica_ranks))
                         .segment_bytes(64 * 1024);
  // NOPaxos: the ordered replicate flow is the ordered unreliable
  // multicast. One request per segment (Latency), so that a sequence
  // number names exactly one request: message number = sequence + 1.
  std::vector<uint32_t> client_ranks;
  for (uint32_t r = o.replicas; r < world; ++r) client_ranks.push_back(r);
  auto order_spec = sluice::replicate_bytes("kv-order")
                        .sources(cluster.ranks(client_ranks))
                        .targets(cluster.ranks(replica_ranks))
                        .ordered()
                        .optimize(sluice::Optimize::kLatency)
                        .segment_bytes(1024);
  const sluice::BytesShuffleSpec report_spec = report_flow(cluster);
  sluice::DeclaredFlow report_declared = cluster.declare(report_spec);
  sluice::DeclaredFlow msg_flow = cluster.declare(msg_spec);
  sluice::DeclaredFlow accept_flow, order_flow;
  if (is_replica && !nopaxos) accept_flow = cluster.declare(accept_spec);
  if (nopaxos) order_flow = cluster.declare(order_spec);

  ClusterOptions workload;
  workload.replicas = o.replicas;
  workload.clients = clients * per_rank;
  workload.ops_per_client = o.ops_per_client;
  workload.keys = o.keys;
  workload.seed = o.seed;
  workload.workload = o.workload;
  workload.zipf = o.zipf;
  workload.value_bytes = o.value_bytes;

  std::unique_ptr<MultiPaxosReplica> replica;
  std::unique_ptr<NoPaxosReplica> np;
  std::unique_ptr<ClientGroup> client;
  if (is_replica && nopaxos) {
    NoPaxosOptions no;
    no.seed = o.seed;
    no.sync_ms = o.heartbeat_ms;
    no.view_timeout_ms = o.election_timeout_ms;
    // Lost sequence numbers surface after the flow's gap timeout; our own
    // gap search may take as long as a round trip on a loaded machine.
    no.gap_timeout_ms = 200;
    np = std::make_unique<NoPaxosReplica>(config, rank, no);
  } else if (is_replica) {
    MultiPaxosOptions mo;
    mo.seed = o.seed;
    mo.heartbeat_ms = o.heartbeat_ms;
    mo.election_timeout_ms = o.election_timeout_ms;
    mo.max_resend = 128;  // keeps every message well inside a 64 KiB segment
    replica = std::make_unique<MultiPaxosReplica>(config, rank, mo);
  } else {
    client = std::make_unique<ClientGroup>();
    for (uint32_t k = 0; k < per_rank; ++k) {
      const uint32_t index = (rank - o.replicas) * per_rank + k;
      client->add(std::make_unique<Client>(
          config, o.protocol, index,
          o.resp ? std::vector<Command>{} : generate_ops(workload, index), o.retry_ms,
          o.window != 0 ? o.window
          : o.resp      ? static_cast<uint32_t>(kClientWindow)
                        : 1));
    }
  }
  // A RESP front end instead of a workload (resp_gateway.h).
  std::unique_ptr<RespGateway> gateway;
  if (client && o.resp) {
    const uint32_t port = o.resp_port == 0 ? 0 : o.resp_port + (rank - o.replicas);
    if (port > 65535) {
      throw sluice::Error(sluice::ErrorCode::kInvalidArgument,
                          "sluice-kv: --resp-port " + std::to_string(o.resp_port) +
                              " leaves no TCP port for client rank " + std::to_string(rank));
    }
    gateway = std::make_unique<RespGateway>(static_cast<uint16_t>(port));
    std::fprintf(stderr, "sluice-kv: rank %u serves RESP on TCP port %u\n", rank,
                 static_cast<unsigned>(gateway->port()));
    std::fflush(stderr);
  }
  Node& node = np        ? static_cast<Node&>(*np)
               : replica ? static_cast<Node&>(*replica)
                         : static_cast<Node&>(*client);
  // (A client rank's control messages name its first client.)
  const uint32_t self_id = is_replica ? rank : config.client_id((rank - o.replicas) * per_rank);

  std::string failure;
  Outbox out;
  std::set<uint32_t> clients_done, finished;
  uint64_t finish_slot = 0;
  uint32_t finish_leader = 0;
  bool finish_known = false, finish_sent = false, closed = false;

  std::mt19937_64 loss_rng(o.test_drop_seed * 1000003 + rank);
  std::bernoulli_distribution lose(o.test_drop);
  uint64_t received = 0, lost = 0;
  auto drop = [&] {
    ++received;
    if (o.test_drop <= 0 || !lose(loss_rng)) return false;
    ++lost;
    return true;
  };

  auto deliver = [&](sluice::RecordBatch batch, bool from_accept) {
    if (client) {
      const uint64_t us = now_us();
      client->set_now(us / 1000);
      client->set_clock_us(us);
    }
    for (std::span<const std::byte> rec : batch) {
      Message m;
      std::string why;
      if (!decode(rec, &m, &why)) {
        failure = "rank " + std::to_string(rank) + ": " + why;
        continue;
      }
      if (from_accept) {
        if (m.from == self_id) continue;  // a replicate flow brings our own back
        m.to = self_id;
      }
      switch (m.type) {
        case MsgType::kDone:
          clients_done.insert(m.from);
          break;
        case MsgType::kFinish:
          finish_known = true;
          finish_slot = m.a;
          finish_leader = m.from;
          break;
        case MsgType::kFinished:
          finished.insert(m.from);
          break;
        default:
          if (!closed && !drop()) node.receive(m, out);
      }
    }
  };

  uint64_t gaps = 0;
  // A request from the ordered flow: stamped with its place in the one
  // order every replica sees.
  auto deliver_ordered = [&](sluice::RecordBatch batch, const sluice::BatchInfo& info) {
    size_t n = 0;
    for (std::span<const std::byte> rec : batch) {
      Message m;
      std::string why;
      if (!decode(rec, &m, &why) || ++n > 1) {
        failure = "rank " + std::to_string(rank) + ": kv-order: " +
                  (why.empty() ? "more than one request under one sequence number" : why);
        return;
      }
      m.type = MsgType::kOrdered;
      m.from = config.sequencer_id();
      m.to = self_id;
      m.session = 1;
      m.a = info.sequence + 1;
      if (!closed && !drop()) node.receive(m, out);
    }
  };

  sluice::Worker w(sluice::IdleStrategy{0, 16});
  w.add(cluster.target(msg_spec, 0), [&](sluice::RecordBatch b) { deliver(b, false); });
  sluice::BytesSource msg_src = cluster.source(msg_spec, 0);
  sluice::BytesSource accept_src, order_src;
  sluice::Worker::InputId order_input = 0;
  if (is_replica && !nopaxos) {
    w.add(cluster.target(accept_spec, 0), [&](sluice::RecordBatch b) { deliver(b, true); });
    accept_src = cluster.source(accept_spec, 0);
  }
  if (is_replica && nopaxos) {
    // A gap (a client died holding a sequence number) needs no handling
    // here: the next request's number shows the replica the hole, which
    // starts gap agreement.
    order_input = w.add(
        cluster.target(order_spec, 0),
        [&](sluice::RecordBatch b, const sluice::BatchInfo& info) { deliver_ordered(b, info); },
        [&](uint64_t) { ++gaps; });
  }
  if (client && nopaxos) order_src = cluster.source(order_spec, 0);

  std::vector<std::byte> buf;
  auto check = [&](sluice::Status st, sluice::BytesSource& s, const char* what) {
    if (st != sluice::Status::kOk && failure.empty())
      failure = "rank " + std::to_string(rank) + ": " + what + ": " + s.error();
  };
  // Sends the outbox; an Accept goes once on the replicate flow for all
  // followers (the protocol addresses one copy to each). A push or flush
  // that waits for credit delivers inputs meanwhile, whose handlers add to
  // the outbox: so it is swapped out before sending, and sending goes on
  // until it stays empty.
  auto flush = [&]() -> size_t {
    if (closed) {
      out.clear();
      return 0;
    }
    size_t n = 0;
    const uint32_t first_follower = self_id == 0 ? 1 : 0;
    Outbox sending;
    while (!out.empty()) {
      sending.clear();
      sending.swap(out);
      n += sending.size();
      bool msg = false, acc = false, ord = false;
      for (const Message& m : sending) {
        if (m.type == MsgType::kAccept) {
          if (m.to != first_follower) continue;
          encode(m, buf);
          check(w.push(accept_src, std::span<const std::byte>(buf)), accept_src,
                "push to kv-accept");
          acc = true;
        } else if (m.type == MsgType::kRequest && m.to == config.sequencer_id()) {
          encode(m, buf);
          check(w.push(order_src, std::span<const std::byte>(buf)), order_src, "push to kv-order");
          ord = true;
        } else {
          encode(m, buf);
          check(w.push_to(msg_src, rank_of(m.to), std::span<const std::byte>(buf)), msg_src,
                "push to kv-msg");
          msg = true;
        }
      }
      if (msg) check(w.flush(msg_src), msg_src, "flush kv-msg");
      if (acc) check(w.flush(accept_src), accept_src, "flush kv-accept");
      if (ord) check(w.flush(order_src), order_src, "flush kv-order");
      if (!failure.empty()) break;
    }
    return n;
  };
  auto control = [&](MsgType t, uint32_t to, uint64_t a) {
    Message m;
    m.type = t;
    m.from = self_id;
    m.to = to;
    m.a = a;
    out.push_back(m);
  };
  auto close_all = [&] {
    flush();
    check(w.close(msg_src), msg_src, "close kv-msg");
    if (accept_src) check(w.close(accept_src), accept_src, "close kv-accept");
    if (order_src) check(w.close(order_src), order_src, "close kv-order");
    closed = true;
  };

  const uint64_t started = now_ms();
  uint64_t traced_retries = 0;
  while (!w.done() && failure.empty()) {
    size_t work = w.poll();
    if (gateway && !closed) work += gateway->poll(*client);
    if (!closed) {
      const uint64_t us = now_us();
      if (client) client->set_clock_us(us);
      node.tick(us / 1000, out);
      if (o.on_progress && is_replica)
        o.on_progress(rank, np ? np->is_leader() : replica->is_leader(),
                      (np ? np->store() : replica->store()).applied().size());
      if (o.trace_retries && client && client->retries() != traced_retries) {
        traced_retries = client->retries();
        std::fprintf(stderr,
                     "sluice-kv: rank %u: retry %" PRIu64 " at +%" PRIu64
                     " ms, %zu operations completed\n",
                     rank, traced_retries, now_ms() - started, client->completed());
      }
      work += flush();
      if (client && client->done() && (!gateway || gateway->finished())) {
        for (uint32_t r = 0; r < o.replicas; ++r) control(MsgType::kDone, r, 0);
        close_all();
      } else if (is_replica && clients_done.size() == clients &&
                 (!nopaxos || w.status(order_input) != sluice::Status::kOk)) {
        // (NOPaxos: only once the ordered flow has ended, so that a late
        // retry cannot still land in one log and not another.)
        const bool leader = np ? np->is_leader() : replica->is_leader();
        const uint64_t settled = np ? np->sync_point() : replica->commit_index();
        const uint64_t length = np ? np->log_size() : replica->log_size();
        if (leader && !finish_sent && settled == length) {
          finish_sent = true;
          finish_slot = settled;
          for (uint32_t r = 0; r < o.replicas; ++r)
            if (r != rank) control(MsgType::kFinish, r, finish_slot);
          work += flush();
        }
        if (finish_sent && finished.size() == o.replicas - 1) close_all();
        if (!finish_sent && finish_known && settled >= finish_slot) {
          control(MsgType::kFinished, finish_leader, 0);
          close_all();
        }
      }
    }
    // A gateway with nothing in flight waits for its sockets (nothing can
    // come on the flows for it then); else the worker idles on the flows.
    if (gateway && !closed && work == 0 && client->done() && !gateway->finished()) {
      gateway->wait(std::chrono::milliseconds(10));
    } else {
      w.idle(work);
    }
  }
  if (failure.empty() && w.done()) {
    for (size_t i = 0; i < w.num_inputs(); ++i)
      if (w.status(static_cast<sluice::Worker::InputId>(i)) != sluice::Status::kEndOfFlow)
        failure = "rank " + std::to_string(rank) + ": input " + std::to_string(i) + ": " +
                  w.error(static_cast<sluice::Worker::InputId>(i));
  }
  if (o.test_drop > 0)
    std::fprintf(stderr,
                 "sluice-kv: rank %u: test hook lost %" PRIu64 " of %" PRIu64
                 " protocol messages received\n",
                 rank, lost, received);
  if (np && (o.test_drop > 0 || np->gaps_recovered() + np->gaps_committed() > 0))
    std::fprintf(stderr,
                 "sluice-kv: rank %u: gap agreement: %" PRIu64 " requests recovered, %" PRIu64
                 " no-ops committed\n",
                 rank, np->gaps_recovered(), np->gaps_committed());
  if (!failure.empty()) {
    std::fprintf(stderr, "sluice-kv: %s\n", failure.c_str());
    return 1;
  }

  const std::string mine = np ? replica_report(rank, np->store(), np->view())
                           : replica
                               ? replica_report(rank, replica->store(), replica->ballot())
                               : client_reports(rank, *client, gateway ? 0 : o.ops_per_client);
  const std::vector<std::string> all = gather_reports(cluster, report_spec, mine);
  if (rank != 0) return 0;
  return check_job(all, o, clients * per_rank);
}

}  // namespace kv
