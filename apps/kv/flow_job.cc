#include "flow_job.h"

#include <sluice/errors.h>
#include <sluice/flow.h>
#include <sluice/job.h>
#include <sluice/worker.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "codec.h"
#include "history.h"
#include "job_disk.h"
#include "job_gateway.h"
#include "job_report.h"
#include "resp_gateway.h"
#include "silent_peers.h"

namespace kv {
namespace {

// The flows' segments hold one message. Every message is bounded in bytes
// and takes at least one item whatever its size (message.h): so a segment
// holds that bound plus the largest command or result (`entry` bytes) and
// the message around it. kv-msg and kv-accept: kMaxBatchBytes (NOPaxos's log
// messages: kMaxMessageBytes) and one entry; kv-order: one NOPaxos batch
// (kMaxOrderedBatchBytes of commands, or one command of the largest size).
// (A segment's pages are touched only as far as it is filled: small
// messages in large segments cost no memory.)
uint32_t msg_segment_bytes(uint64_t entry) {
  return static_cast<uint32_t>((64 * 1024 + entry + 4096 + 7) / 8 * 8);
}
uint32_t order_segment_bytes(uint64_t entry) {
  return static_cast<uint32_t>((kMaxOrderedBatchBytes + entry + 2048 + 7) / 8 * 8);
}

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
  // A restarted process (sluice run --restarts) has none of its old state.
  // A replica recovers it from the others (message.h, Recovery); a RESP
  // gateway serves again as a new client (its old connections went with its
  // process); a workload's client operations and history went with it, so
  // its rank cannot rejoin.
  const uint32_t incarnation = cluster.incarnation(rank);
  if (incarnation > 0 && rank >= o.replicas && !o.resp) {
    std::fprintf(stderr,
                 "sluice-kv: rank %u is a restarted client (incarnation %u): a client's operations "
                 "went with its process, so it cannot rejoin; only replicas can (docs/kv.md)\n",
                 rank, incarnation);
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

  ClusterOptions workload;
  workload.replicas = o.replicas;
  workload.clients = clients * per_rank;
  workload.ops_per_client = o.ops_per_client;
  workload.keys = o.keys;
  workload.seed = o.seed;
  workload.workload = o.workload;
  workload.zipf = o.zipf;
  workload.value_bytes = o.value_bytes;

  // A gateway's job runs for as long as it is used: its replicas keep no
  // identity of what they applied (the checks use their summaries).
  StoreOptions store_options;
  store_options.maxmemory = o.maxmemory;
  store_options.max_result_bytes = o.max_entry_bytes;
  store_options.keep_applied = !o.resp;
  // --data-dir (job_disk.h): each replica's files, the run's number, and
  // which replicas restored files up to which slot.
  JobDisk jd;
  if (!o.data_dir.empty()) {
    int exit_code = 0;
    std::optional<JobDisk> opened =
        open_job_disk(cluster, o, rank, is_replica, incarnation, nopaxos, &exit_code);
    if (!opened) return exit_code;
    jd = std::move(*opened);
  }
  ReplicaDisk* const disk = jd.disk.get();
  const uint32_t run = jd.run;
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
    no.recover = recover_from_others(jd, incarnation);
    no.snapshot_every = o.snapshot_every;
    no.nonce = incarnation;
    no.store = store_options;
    np = std::make_unique<NoPaxosReplica>(config, rank, no);
    if (disk != nullptr) start_on_disk(jd, *np, o, rank, no.recover);
  } else if (is_replica) {
    MultiPaxosOptions mo;
    mo.seed = o.seed;
    mo.heartbeat_ms = o.heartbeat_ms;
    mo.election_timeout_ms = o.election_timeout_ms;
    mo.max_resend = 128;  // keeps every message well inside a 64 KiB segment
    // (A replica whose files are gone while others' are there lost what
    // it promised: it recovers from the others, as a restarted one does.)
    mo.recover = recover_from_others(jd, incarnation);
    mo.snapshot_every = o.snapshot_every;
    mo.nonce = incarnation;
    mo.store = store_options;
    replica = std::make_unique<MultiPaxosReplica>(config, rank, mo);
    if (disk != nullptr) start_on_disk(jd, *replica, o, rank, mo.recover);
  } else {
    client = std::make_unique<ClientGroup>();
    for (uint32_t k = 0; k < per_rank; ++k) {
      const uint32_t index = (rank - o.replicas) * per_rank + k;
      client->add(std::make_unique<Client>(
          config, o.protocol, index,
          o.resp ? std::vector<Command>{} : generate_ops(workload, index), o.retry_ms,
          o.window != 0 ? o.window
          : o.resp      ? static_cast<uint32_t>(kClientWindow)
                        : 1,
          o.batch));
    }
    if (run > 0 || incarnation > 0)
      for (size_t k = 0; k < client->size(); ++k) client->client(k).set_run(run, incarnation);
  }
  // A RESP front end instead of a workload (job_gateway.h).
  std::unique_ptr<RespGateway> gateway;
  if (o.resp && !start_gateways(cluster, o, clients, client != nullptr, incarnation > 0, &gateway))
    return 1;
  Node& node = np        ? static_cast<Node&>(*np)
               : replica ? static_cast<Node&>(*replica)
                         : static_cast<Node&>(*client);
  // (A client rank's control messages name its first client.)
  auto first_client_of = [&](uint32_t r) { return config.client_id((r - o.replicas) * per_rank); };
  const uint32_t self_id = is_replica ? rank : first_client_of(rank);

  std::string failure;
  Outbox out;
  std::set<uint32_t> clients_done, finished;
  uint64_t finish_slot = 0;
  uint32_t finish_from = 0;  // the leader that sent the final slot
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

  // The flows of the current epoch: every epoch's flows hold the ranks that
  // were alive when it began (see the file comment).
  Epoch ep;
  // How this rank's pushes treat a peer that takes nothing (silent_peers.h).
  SilentPeers silent(o.election_timeout_ms);
  auto deliver = [&](sluice::RecordBatch batch, bool from_accept) {
    const uint64_t us = now_us();
    if (client) {
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
      if (const int t = ep.target_of(rank_of(m.from)); t >= 0)
        silent.heard(static_cast<uint32_t>(t), us / 1000);
      switch (m.type) {
        case MsgType::kDone:
          // A replica counts the client ranks that finished; a gateway
          // hears that another one received SHUTDOWN, which ends the job.
          if (is_replica) clients_done.insert(m.from);
          if (gateway) gateway->stop();
          break;
        case MsgType::kFinish:
          finish_known = true;
          finish_slot = m.a;
          finish_from = m.from;
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
  // order every replica sees. Each epoch's ordered flow is a new sequencer,
  // hence a new NOPaxos session; a run on --data-dir numbers its sessions
  // above every earlier run's, which its replicas may have restored.
  const uint64_t sessions_from = run > 1 ? static_cast<uint64_t>(run - 1) << 32 : 0;
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
      m.session = sessions_from + ep.session;
      m.a = info.sequence + 1;
      if (!closed && !drop()) node.receive(m, out);
    }
  };

  std::vector<std::byte> buf;
  // A failed push, flush or close ends the epoch; it is a failure of the job
  // only if no rank turns out to be lost (end_epoch below).
  auto check = [&](sluice::Status st, sluice::Source<sluice::Bytes>& s, const char* what) {
    if (st != sluice::Status::kOk && ep.broken.empty())
      ep.broken = "rank " + std::to_string(rank) + ": " + what + ": " + s.error();
  };
  // Sends the outbox; an Accept goes once on the replicate flow for all
  // followers (the protocol addresses one copy to each; the copy for the
  // first live follower is the one sent). A message to a lost rank is
  // dropped, as the network would. A push or flush that waits for credit
  // delivers inputs meanwhile, whose handlers add to the outbox: so it is
  // swapped out before sending, and sending goes on until it stays empty.
  // A peer that takes nothing holds back no message to the others
  // (silent_peers.h).
  bool closing = false;
  auto push_msg = [&](uint32_t target, const Message& m) {
    const std::span<const std::byte> bytes(buf);
    sluice::Status st;
    if (closing && SilentPeers::job_message(m.type)) {
      st = ep.w.push_to(ep.msg_src, target, bytes);
    } else if (silent.stuck(target)) {
      st = ep.msg_src.try_push_to(target, bytes);
    } else {
      // (A full ring of a peer already quiet is not waited for.)
      st = ep.msg_src.try_push_to(target, bytes);
      if (st == sluice::Status::kWouldBlock && !silent.quiet(target, now_ms()))
        st = ep.w.push_to(ep.msg_src, target, bytes,
                          std::chrono::steady_clock::now() + silent.wait());
    }
    if (st == sluice::Status::kOk) {
      silent.sent(target);
    } else if (st == sluice::Status::kTimeout || st == sluice::Status::kWouldBlock) {
      silent.refused(target, m, now_ms());
    } else {
      check(st, ep.msg_src, "push to kv-msg");
    }
  };
  Message order_batch;
  order_batch.type = MsgType::kRequest;
  order_batch.from = self_id;
  order_batch.to = config.sequencer_id();
  size_t order_bytes = 0;
  auto push_order_batch = [&] {
    encode(order_batch, buf);
    check(ep.w.push(ep.order_src, std::span<const std::byte>(buf)), ep.order_src,
          "push to kv-order");
    order_batch.cmds.clear();
    order_bytes = 0;
  };
  // Whether the registry's view differs from the epoch's: a member lost or
  // restarted, or a rank outside it alive again.
  auto changed = [&] {
    for (uint32_t r = 0; r < world; ++r) {
      const bool alive = cluster.alive(r);
      if (ep.member(r) ? !alive || cluster.incarnation(r) != ep.inc[r] : alive) return true;
    }
    return false;
  };
  // A flush waits for credit, delivering inputs meanwhile; in slices, so
  // that a change of the job's ranks ends the epoch here too. (A peer whose
  // set-up of this epoch failed before it made its end of a flow never
  // returns credit; it is waiting for this rank in the next epoch's
  // declaration, and only the change of ranks says so.)
  auto flush_source = [&](sluice::Source<sluice::Bytes>& src, const char* what) {
    for (;;) {
      const sluice::Status st =
          ep.w.flush(src, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
      if (st != sluice::Status::kTimeout) return check(st, src, what);
      if (changed()) {
        if (ep.broken.empty()) ep.broken = "the job's ranks changed";
        return;
      }
    }
  };
  // --data-dir: what the replica changed reaches its disk (as --fsync says)
  // before the messages that follow from it leave: one record and one sync
  // for all of a round's changes (group commit).
  DurableChanges changes;
  auto persist = [&] {
    if (disk && (replica ? replica->take_durable(&changes) : np->take_durable(&changes)))
      disk->save(changes);
  };
  // Sends what the protocol said (`out`). A push that waits for room hands
  // the inputs to their handlers meanwhile, which may say more: `rounds`
  // bounds how many times it sends what came meanwhile, so that the worker
  // loop (the timers, the progress hook) runs between them; the rest goes
  // at the next call. Closing sends it all.
  auto flush = [&](size_t rounds = std::numeric_limits<size_t>::max()) -> size_t {
    silent.take_due(out, now_ms(), closing);
    if (closed || out.empty()) persist();
    if (closed) {
      out.clear();
      return 0;
    }
    size_t n = 0;
    Outbox sending;
    while (!out.empty() && ep.broken.empty() && rounds-- > 0) {
      sending.clear();
      sending.swap(out);
      persist();
      n += sending.size();
      bool msg = false, acc = false, ord = false;
      for (Message& m : sending) {
        if (!ep.broken.empty()) break;
        if (m.type == MsgType::kAccept && !silent.accepts_on_msg()) {
          if (m.to != ep.first_follower) continue;
          encode(m, buf);
          // (Not waited for when a follower is already quiet.)
          const std::span<const std::byte> bytes(buf);
          sluice::Status st = ep.w.push(ep.accept_src, bytes, sluice::Clock::now());
          if (st == sluice::Status::kTimeout && !silent.a_follower_quiet(now_ms()))
            st = ep.w.push(ep.accept_src, bytes, sluice::Clock::now() + silent.wait());
          if (st != sluice::Status::kTimeout) {
            check(st, ep.accept_src, "push to kv-accept");
            acc = true;
            continue;
          }
          // This copy goes on kv-msg (those to the other followers that
          // came before it in this round are lost).
          silent.move_accepts_to_msg();
          const int target = ep.target_of(rank_of(m.to));
          if (target >= 0) push_msg(static_cast<uint32_t>(target), m);
          msg = true;
        } else if (m.type == MsgType::kRequest && m.to == config.sequencer_id()) {
          // NOPaxos: the requests of all this rank's clients go as one
          // batch (one record, one sequence number) as far as it holds.
          const size_t bytes = wire_bytes(m.cmds);
          if (!batch_has_room(order_batch.cmds.size(), order_bytes, m.cmds.size(), bytes,
                              kMaxOrderedBatchBytes, o.batch))
            push_order_batch();
          order_bytes += bytes;
          for (Command& c : m.cmds) order_batch.cmds.push_back(std::move(c));
          ord = true;
        } else {
          const int target = ep.target_of(rank_of(m.to));
          if (target < 0) continue;
          // Accepted, not yet answered: a replica that dies here leaves its
          // leader to the others' answers (`sluice run --kill-at
          // RANK:kv-paxos-after-accept[:K]`, sluice/job.h).
          if (m.type == MsgType::kAccepted) sluice::kill_point("kv-paxos-after-accept");
          encode(m, buf);
          push_msg(static_cast<uint32_t>(target), m);
          msg = true;
        }
      }
      if (!order_batch.cmds.empty() && ep.broken.empty()) push_order_batch();
      if (msg && ep.broken.empty()) flush_source(ep.msg_src, "flush kv-msg");
      if (acc && ep.broken.empty()) flush_source(ep.accept_src, "flush kv-accept");
      if (ord && ep.broken.empty()) flush_source(ep.order_src, "flush kv-order");
    }
    if (!ep.broken.empty()) out.clear();
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
  // A follower's "finished" goes to every other replica, not only to the
  // leader that sent the final slot: should that leader be lost, the next
  // one counts it too.
  auto finished_to_all = [&] {
    for (uint32_t r = 0; r < o.replicas; ++r)
      if (r != rank) control(MsgType::kFinished, r, 0);
  };
  // What this rank said to end the job, said again in each new epoch (the
  // old epoch's copies may have been lost with its flows); receivers keep
  // sets or the latest slot, so a repeat changes nothing.
  bool said_done = false, said_finished = false;
  // A client rank's "done" goes to the replicas, and a gateway's also to
  // the other gateways: SHUTDOWN through any of them ends the whole job.
  auto say_done = [&] {
    for (uint32_t r = 0; r < o.replicas; ++r) control(MsgType::kDone, r, 0);
    if (gateway)
      for (uint32_t r : ep.live)
        if (r >= o.replicas && r != rank) control(MsgType::kDone, first_client_of(r), 0);
  };
  auto say_end = [&] {
    if (said_done) say_done();
    if (finish_sent)
      for (uint32_t r = 0; r < o.replicas; ++r)
        if (r != rank) control(MsgType::kFinish, r, finish_slot);
    if (said_finished) finished_to_all();
  };
  // Whether every client rank said it is done. Behind RESP gateways, those
  // of the epoch: a gateway that died took its connections with it, and
  // the job goes on without it (a workload client's death ends the job:
  // lost_client below).
  auto all_clients_done = [&] {
    if (!o.resp) return clients_done.size() == clients;
    for (uint32_t r : ep.live)
      if (r >= o.replicas && clients_done.count(first_client_of(r)) == 0) return false;
    return true;
  };
  auto close_all = [&] {
    closing = true;
    flush();
    closing = false;
    check(ep.w.close(ep.msg_src), ep.msg_src, "close kv-msg");
    if (ep.accept_src) check(ep.w.close(ep.accept_src), ep.accept_src, "close kv-accept");
    if (ep.order_src) check(ep.w.close(ep.order_src), ep.order_src, "close kv-order");
    closed = true;
  };

  // Declares the flows among the live ranks and opens this rank's ends.
  // Throws sluice::PeerLostError if a rank is lost meanwhile (the caller
  // begins again without it).
  // The replicas' incarnations as of the last epoch each was a member of: a
  // replica whose incarnation changed restarted without its state, and the
  // protocol must forget what the old process promised or voted
  // (Node::forget_replica) before the new one's messages arrive.
  std::vector<uint32_t> known_inc(world, 0);
  bool epoch_begun = false;  // (the first epoch renews nothing)
  auto begin_epoch = [&](const std::vector<uint32_t>& live, const std::vector<uint32_t>& inc) {
    ep.live = live;
    silent.new_epoch(live, o.replicas, rank, now_ms());
    ep.inc = inc;
    ep.session = epoch_session(live, inc);
    bool restarted = false;
    for (uint32_t r = 0; r < world; ++r) restarted = restarted || inc[r] > 0;
    // (After a restart the lost ranks alone no longer name the epoch.)
    const std::string suffix =
        epoch_suffix(world, live) + (restarted ? "-s" + std::to_string(ep.session) : "");
    // A replica back as a new process has finished nothing yet (what its
    // old process said no longer counts).
    bool replica_back = false;
    for (uint32_t r : live) {
      if (r < o.replicas && r != rank && inc[r] != known_inc[r]) {
        node.forget_replica(r);
        finished.erase(r);
        replica_back = true;
      }
      known_inc[r] = inc[r];
    }
    std::vector<uint32_t> live_replicas, live_clients;
    for (uint32_t r : live) (r < o.replicas ? live_replicas : live_clients).push_back(r);
    // A replica missing from the epoch is gone: the protocol need not wait
    // for a timeout to go on without it.
    node.replicas_present(present_replicas(live, o.replicas));
    if (epoch_begun) node.flows_renewed();
    epoch_begun = true;
    if (live_replicas.size() < config.majority()) {
      throw sluice::Error(sluice::ErrorCode::kPeerLost,
                          "sluice-kv: only " + std::to_string(live_replicas.size()) + " of " +
                              std::to_string(o.replicas) +
                              " replicas are left, fewer than a majority");
    }
    ep.first_follower =
        live_replicas[0] == rank && live_replicas.size() > 1 ? live_replicas[1] : live_replicas[0];
    auto msg_spec = sluice::shuffle<sluice::Bytes>("kv-msg" + suffix)
                        .sources(cluster.ranks(live))
                        .targets(cluster.ranks(live))
                        .explicit_targets()
                        .segment_bytes(msg_segment_bytes(o.max_entry_bytes));
    auto accept_spec = sluice::replicate<sluice::Bytes>("kv-accept" + suffix)
                           .sources(cluster.ranks(live_replicas))
                           .targets(cluster.ranks(live_replicas))
                           .segment_bytes(msg_segment_bytes(o.max_entry_bytes));
    // NOPaxos: the ordered replicate flow is the ordered unreliable
    // multicast. One record per segment (Latency), so that a sequence
    // number names exactly one batch of requests, one log slot: message
    // number = sequence + 1. Its sequencer is on the lowest live client
    // rank, off the replicas as the paper's is (in the network): a leader
    // stopped or cut off holds back no number, and the replicas' view
    // change replaces it as fast as Multi-Paxos's election does. Unreliable
    // as a network is: a replica whose ring has had no room for a quarter
    // of the election timeout (stopped, cut off) misses requests, which
    // it sees as gaps, rather than holding every replica back.
    auto order_spec = sluice::replicate<sluice::Bytes>("kv-order" + suffix)
                          .sources(cluster.ranks(live_clients))
                          .targets(cluster.ranks(live_replicas))
                          .ordered()
                          .skip_full_targets_after(silent.wait())
                          .optimize(sluice::Optimize::kLatency)
                          .segment_bytes(order_segment_bytes(o.max_entry_bytes));
    if (!live_clients.empty()) order_spec.sequencer_at(live_clients.front());
    ep.msg_flow = cluster.declare(msg_spec);
    if (is_replica && !nopaxos) ep.accept_flow = cluster.declare(accept_spec);
    if (nopaxos) ep.order_flow = cluster.declare(order_spec);
    ep.w = sluice::Worker(sluice::IdleStrategy{0, 16});
    ep.w.add(cluster.target(msg_spec, 0), [&](sluice::RecordBatch b) { deliver(b, false); });
    ep.msg_src = cluster.source(msg_spec, 0);
    if (is_replica && !nopaxos) {
      ep.w.add(cluster.target(accept_spec, 0), [&](sluice::RecordBatch b) { deliver(b, true); });
      ep.accept_src = cluster.source(accept_spec, 0);
    }
    if (is_replica && nopaxos) {
      // A gap (a client died holding a sequence number) needs no handling
      // here: the next request's number shows the replica the hole, which
      // starts gap agreement.
      ep.order_input = ep.w.add(
          cluster.target(order_spec, 0),
          [&](sluice::RecordBatch b, const sluice::BatchInfo& info) { deliver_ordered(b, info); },
          [&](uint64_t) { ++gaps; });
    }
    if (client && nopaxos) ep.order_src = cluster.source(order_spec, 0);
    // What this rank said towards the end of the job may have been lost
    // with the old flows: say it again (a rank that had closed its sources
    // closes this epoch's too, unless a replica came back: that one
    // recovers from the others, who answer it until it has finished too,
    // as the end of the job's rules say below).
    const bool was_closed = closed;
    closed = false;
    say_end();
    if (was_closed && !(replica_back && is_replica)) close_all();
  };

  const uint64_t started = now_ms();
  bool recovering = node.recovering();
  uint64_t traced_retries = 0;
  uint64_t led_view = 0;  // the last view this replica led and said so
  uint32_t epochs = 0;
  // The next epoch's members and incarnations (see Epoch and changed()).
  std::vector<uint32_t> live, inc;
  // The registry's view: the live ranks and every rank's incarnation, read
  // until the two agree.
  auto snapshot = [&] {
    for (;;) {
      std::vector<uint32_t> before(world), after(world);
      for (uint32_t r = 0; r < world; ++r) before[r] = cluster.incarnation(r);
      live = cluster.live_ranks();
      for (uint32_t r = 0; r < world; ++r) after[r] = cluster.incarnation(r);
      if (before == after) {
        inc = after;
        return;
      }
    }
  };
  // The next epoch after `ep`. A member lost or restarted: the same members
  // without it, even if it is back already, so that every member, however
  // late it looks, declares the same flows (a restarted rank comes back in
  // the epoch after). Else the ranks alive now, with those back again.
  auto next_members = [&] {
    std::vector<uint32_t> kept;
    for (uint32_t r : ep.live)
      if (cluster.alive(r) && cluster.incarnation(r) == ep.inc[r]) kept.push_back(r);
    if (kept != ep.live) {
      live = kept;
      inc = ep.inc;
      return;
    }
    snapshot();
  };
  snapshot();
  if (incarnation > 0) {
    std::fprintf(stderr,
                 is_replica ? "sluice-kv: rank %u: a restarted replica (incarnation %u): "
                              "recovering its state from the others\n"
                            : "sluice-kv: rank %u: a restarted gateway (incarnation %u): serving "
                              "again as a new client\n",
                 rank, incarnation);
    std::fflush(stderr);
  }
  bool retried = false;  // an epoch's set-up failed for a lost rank, and was tried again
  // A replica restarted after the run ended finds every client rank gone by
  // leaving the job (their work done), not by a failure: there is nothing
  // left to rejoin, and the others checked the job without it.
  auto run_over = [&] {
    if (incarnation == 0) return false;
    for (uint32_t r = o.replicas; r < world; ++r)
      if (!cluster.left(r)) return false;
    return true;
  };
  // A workload's client rank missing from `live`: its operations went with
  // its process and cannot complete (a restarted client cannot rejoin), so
  // the job cannot pass its checks. Named: one that failed (it died, or
  // stopped heart-beating) rather than one that left cleanly, since the
  // other ranks leave as soon as they end the job for it, and a rank that
  // sees the job change late may find them gone too.
  // `failed_only`: none that left cleanly (a restarted replica's set-up
  // may find them gone because the run is over: run_over()).
  auto lost_client = [&](const std::vector<uint32_t>& live, bool failed_only) {
    std::optional<uint32_t> gone;
    auto failed = [&](uint32_t r) { return !cluster.left(r) || cluster.incarnation(r) > 0; };
    for (uint32_t r = o.replicas; r < world && !o.resp; ++r) {
      if (std::find(live.begin(), live.end(), r) != live.end()) continue;
      if (failed_only && !failed(r)) continue;
      if (!gone || (failed(r) && !failed(*gone))) gone = r;
    }
    return gone;
  };
  auto client_lost = [&](uint32_t r) {
    return "rank " + std::to_string(rank) + ": client rank " + std::to_string(r) +
           " was lost: its operations cannot complete (a client's operations go with its "
           "process; docs/kv.md), so the job ends without its checks";
  };
  for (;;) {
    if (run_over()) {
      std::fprintf(stderr,
                   "sluice-kv: rank %u: a restarted replica (incarnation %u): the run ended "
                   "before it could rejoin (every client rank left the job, done); the others "
                   "checked the job without it\n",
                   rank, incarnation);
      return 0;
    }
    try {
      begin_epoch(live, inc);
    } catch (const sluice::Error& e) {
      // A rank was lost (or the others declared other flows: a rank came
      // back meanwhile) while the flows were being declared: again, as the
      // registry now sees the job.
      if (e.code() != sluice::ErrorCode::kPeerLost && e.code() != sluice::ErrorCode::kTimeout)
        throw;
      const std::vector<uint32_t> tried = live;
      ep.reset();
      ep.live = tried;
      ep.inc = inc;
      // (A lost client ends the job whatever else failed: the replicas that
      // saw it first may have left already.)
      if (std::optional<uint32_t> c = lost_client(live, true)) {
        failure = client_lost(*c);
        break;
      }
      // The job may be changing still (the others ending it: a restarted
      // replica then finds its clients gone by leaving, above): wait for
      // that up to the peer timeout before giving up.
      const auto until = std::chrono::steady_clock::now() + cluster.options().peer_timeout;
      while (!changed() && !run_over() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (run_over()) continue;
      if (!changed()) throw;
      next_members();
      retried = true;
      continue;
    }
    // A rank lost while the first epoch was set up is reported as one lost
    // later is: the survivors go on with the others either way.
    if (epochs++ > 0 || std::exchange(retried, false)) {
      std::fprintf(
          stderr, "sluice-kv: rank %u: going on with ranks%s%s\n", rank, ranks_text(live).c_str(),
          nopaxos ? (" (NOPaxos session " + std::to_string(ep.session) + ")").c_str() : "");
      std::fflush(stderr);
    }
    // A workload's client rank lost: its operations went with its process
    // and cannot complete (a restarted client cannot rejoin), so the job
    // cannot pass its checks. Every rank ends now, saying so, rather than
    // wait for that client's operations for ever.
    if (std::optional<uint32_t> c = lost_client(live, false)) failure = client_lost(*c);
    if (!failure.empty()) break;
    while (!ep.w.done() && failure.empty() && ep.broken.empty()) {
      size_t work = ep.w.poll();
      if (gateway && !closed) work += gateway->poll(*client);
      if (!closed) {
        const uint64_t us = now_us();
        if (client) client->set_clock_us(us);
        node.tick(us / 1000, out);
        if (disk) disk->tick(us / 1000);
        if (recovering && !node.recovering()) {
          recovering = false;
          const Store& st = np ? np->store() : replica->store();
          const uint64_t snapshots =
              np ? np->snapshots_installed() : replica->snapshots_installed();
          const uint64_t snapshot = np ? np->snapshot_slot() : replica->snapshot_slot();
          std::fprintf(stderr,
                       "sluice-kv: rank %u: recovered in %" PRIu64 " ms: %" PRIu64
                       " log entries applied, view %" PRIu64 "%s\n",
                       rank, now_ms() - started, st.applied_count(),
                       np ? np->view() : replica->ballot(),
                       snapshots > 0 ? (", from a snapshot of slot " + std::to_string(snapshot) +
                                        " and the log after it")
                                           .c_str()
                                     : "");
          std::fflush(stderr);
        }
        if (o.on_progress && is_replica && incarnation == 0)
          o.on_progress(rank, np ? np->is_leader() : replica->is_leader(),
                        (np ? np->store() : replica->store()).applied_count());
        if (is_replica && !recovering) {
          // A leader change is worth a line (etcd and Redis Sentinel log
          // theirs): a view above the first means an election happened.
          const uint64_t view = np ? np->view() : replica->ballot();
          if ((np ? np->is_leader() : replica->is_leader()) && view != led_view) {
            led_view = view;
            if (view != 0)
              std::fprintf(stderr,
                           "sluice-kv: rank %u leads view %" PRIu64 " from +%" PRIu64 " ms\n", rank,
                           view, now_ms() - started);
          }
        }
        if (o.trace_retries && client && client->retries() != traced_retries) {
          traced_retries = client->retries();
          std::fprintf(stderr,
                       "sluice-kv: rank %u: retry %" PRIu64 " at +%" PRIu64
                       " ms, %zu operations completed\n",
                       rank, traced_retries, now_ms() - started, client->completed());
        }
        work += flush(1);
        if (client && client->done() && (!gateway || gateway->finished()) &&
            (!o.test_await_rejoin || now_ms() - started > 60000 ||
             (ep.live.size() == world &&
              std::any_of(ep.inc.begin(), ep.inc.end(), [](uint32_t i) { return i > 0; })))) {
          if (!said_done && !o.resp) {
            std::fprintf(stderr, "sluice-kv: rank %u: its clients completed their %zu operations\n",
                         rank, client->completed());
            std::fflush(stderr);
          }
          said_done = true;
          say_done();
          close_all();
        } else if (is_replica && all_clients_done() &&
                   (!nopaxos || ep.w.status(ep.order_input) != sluice::Status::kOk)) {
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
          // The leader closes last, once every live follower has finished.
          // (A rank that said the finish as leader and has since lost the
          // lead to another that said it too finishes as a follower.)
          bool all_finished = finish_sent && leader;
          for (uint32_t r : ep.live)
            if (r < o.replicas && r != rank && finished.count(r) == 0) all_finished = false;
          if (all_finished) close_all();
          if ((!finish_sent || !leader) && finish_known && settled >= finish_slot) {
            if (!said_finished) {
              said_finished = true;
              finished_to_all();
            }
            // A follower closes once every other live follower has finished
            // too: till then it still answers the protocol, so that a
            // replica recovering (which has not finished) finds f + 1
            // replicas to recover from.
            bool others_finished = true;
            for (uint32_t r : ep.live)
              if (r < o.replicas && r != rank && r != finish_from && finished.count(r) == 0)
                others_finished = false;
            if (others_finished) close_all();
          }
        }
      }
      // A rank of this epoch is lost or restarted: its flows are done for. A
      // rank back again joins the next epoch.
      if (ep.broken.empty() && changed()) ep.broken = "the job's ranks changed";
      // A gateway with nothing in flight waits for its sockets (nothing can
      // come on the flows for it then); else the worker idles on the flows.
      if (gateway && !closed && work == 0 && client->done() && !gateway->finished()) {
        gateway->wait(std::chrono::milliseconds(10));
      } else {
        // A park ends when the protocol's timers are next due (the
        // heartbeat is the shortest), not a park slice later: an election
        // timeout runs on time.
        ep.w.idle(work, work != 0
                            ? sluice::kForever
                            : sluice::Clock::now() + std::chrono::milliseconds(o.heartbeat_ms));
      }
    }
    if (!failure.empty()) break;
    if (ep.broken.empty()) {
      // Every input ended: a clean end, or an input that failed.
      for (size_t i = 0; i < ep.w.num_inputs(); ++i) {
        const auto id = static_cast<sluice::Worker::InputId>(i);
        if (ep.w.status(id) != sluice::Status::kEndOfFlow && ep.broken.empty())
          ep.broken = "rank " + std::to_string(rank) + ": input " + std::to_string(i) + ": " +
                      ep.w.error(id);
      }
      if (ep.broken.empty()) break;  // the job's end
    }
    // The epoch broke. It is a failure unless a rank of it turns out to be
    // lost (a rank that saw the loss first may end its flows, which this
    // rank can see before the loss itself): wait for that up to the peer
    // timeout, then go on with the ranks that are left.
    const auto until =
        std::chrono::steady_clock::now() + cluster.options().peer_timeout + std::chrono::seconds(1);
    while (!changed() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!changed()) {
      failure = ep.broken;
      break;
    }
    next_members();
    ep.reset();  // destroys this epoch's ends, then its flows (collective)
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
  if (silent.dropped() > 0)
    std::fprintf(stderr,
                 "sluice-kv: rank %u: %" PRIu64
                 " protocol messages dropped: a peer's ring stayed full for %lld ms (a peer that "
                 "took nothing, as a stopped one)\n",
                 rank, silent.dropped(), static_cast<long long>(silent.wait().count()));
  if (disk) {
    persist();
    disk->sync();
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "sluice-kv: %s\n", failure.c_str());
    return 1;
  }
  ep.reset();
  if (gateway) {
    std::string why;
    if (!gateway->finish_history(&why)) {
      std::fprintf(stderr, "sluice-kv: rank %u: %s\n", rank, why.c_str());
      return 1;
    }
  }

  // (A run on --data-dir: its own clients' commands, not earlier runs'.)
  const std::pair<uint64_t, uint64_t> executed =
      replica      ? std::make_pair(replica->run_executed(), replica->run_executed_sum())
      : np && disk ? run_commands(np->store(), run)
                   : std::make_pair(uint64_t{0}, uint64_t{0});
  const std::string mine =
      np        ? replica_report(rank, np->store(), np->view(), disk ? &executed : nullptr, run)
      : replica ? replica_report(rank, replica->store(), replica->ballot(),
                                 disk ? &executed : nullptr, run)
                : client_reports(rank, *client, gateway ? 0 : o.ops_per_client);
  // The run's last members check it (job_report.h). Only they take part, as
  // the processes they were: a replica restarted after the run ended has
  // nothing to report (it finds its clients gone and exits; see the epoch
  // loop).
  return collect_verdict(cluster, o, live, inc, mine, clients * per_rank);
}

}  // namespace kv
