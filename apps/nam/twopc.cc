#include "twopc.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>

#include "spares.h"
#include "twopc_wire.h"

namespace sluice::nam {

using namespace twopc_wire;

namespace {

// Every 2PC flow: byte records from `sources` to explicitly named
// `targets`, published at once, segments that hold the largest message.
ShuffleSpec<Bytes> message_flow(const std::string& name, const Layout& layout,
                                std::vector<Endpoint> sources, std::vector<Endpoint> targets) {
  ShuffleSpec<Bytes> spec(name);
  spec.sources(std::move(sources))
      .targets(std::move(targets))
      .explicit_targets()
      .optimize(Optimize::kLatency)
      .segment_bytes(static_cast<uint32_t>((max_message(layout) + 64 + 63) / 64 * 64));
  return spec;
}

std::vector<uint32_t> server_ranks(const Layout& layout) {
  std::vector<uint32_t> servers(layout.memory_servers);
  std::iota(servers.begin(), servers.end(), 0u);
  return servers;
}

}  // namespace

TwoPcFlows two_pc_flows(const Cluster& cluster, const Layout& layout, uint32_t clients_per_rank) {
  const std::vector<uint32_t> servers = server_ranks(layout);
  TwoPcFlows f;
  f.memory_servers = layout.memory_servers;
  f.clients_per_rank = clients_per_rank;
  for (uint32_t r = layout.memory_servers; r < cluster.world_size(); ++r) f.compute.push_back(r);
  for (uint32_t c : f.compute) {
    const std::string tag = "nam-2pc-" + std::to_string(c);
    f.request.push_back(message_flow(tag + "-request", layout, cluster.ranks({c}, clients_per_rank),
                                     cluster.ranks(servers)));
    f.reply.push_back(message_flow(tag + "-reply", layout, cluster.ranks(servers),
                                   cluster.ranks({c}, clients_per_rank)));
  }
  f.peer = message_flow("nam-2pc-peer", layout, cluster.ranks(servers), cluster.ranks(servers));
  return f;
}

std::vector<DeclaredFlow> declare_two_pc(Cluster& cluster, const TwoPcFlows& flows,
                                         std::vector<std::string>* lost_at_setup) {
  std::vector<DeclaredFlow> out;
  const uint32_t rank = cluster.rank();
  if (lost_at_setup != nullptr) lost_at_setup->assign(flows.compute.size(), "");
  for (size_t k = 0; k < flows.compute.size(); ++k) {
    if (rank < flows.memory_servers && lost_at_setup != nullptr &&
        cluster.incarnation(flows.compute[k]) != 0) {
      // Lost and started again already: its new process runs free slots
      // (spares.h) and never declares its first process's flows.
      (*lost_at_setup)[k] = "it was started again before its flows were declared";
      continue;
    }
    if (rank < flows.memory_servers || rank == flows.compute[k]) {
      try {
        out.push_back(cluster.declare(flows.request[k]));
        out.push_back(cluster.declare(flows.reply[k]));
      } catch (const PeerLostError& e) {
        // A compute rank that died while the job started (sluice run
        // --kill, unannounced): its clients never begin, and a memory server
        // goes on without them.
        if (rank >= flows.memory_servers || lost_at_setup == nullptr ||
            e.rank() != flows.compute[k])
          throw;
        (*lost_at_setup)[k] = e.what();
      }
    }
  }
  if (rank < flows.memory_servers && flows.memory_servers > 1)
    out.push_back(cluster.declare(flows.peer));
  return out;
}

SlotFlows slot_flows(const Cluster& cluster, const Layout& layout, uint32_t client, uint32_t rank,
                     uint32_t incarnation) {
  const std::vector<uint32_t> servers = server_ranks(layout);
  const std::string tag = "nam-2pc-c" + std::to_string(client) + "-" + std::to_string(rank) + "-" +
                          std::to_string(incarnation);
  return SlotFlows{
      message_flow(tag + "-request", layout, cluster.ranks({rank}), cluster.ranks(servers)),
      message_flow(tag + "-reply", layout, cluster.ranks(servers), cluster.ranks({rank}))};
}

std::vector<DeclaredFlow> declare_slot(Cluster& cluster, const SlotFlows& flows) {
  std::vector<DeclaredFlow> out;
  out.push_back(cluster.declare(flows.request));
  out.push_back(cluster.declare(flows.reply));
  return out;
}

// ------------------------------------------------------------ server

namespace {

// What a server knows of a client's last transaction here.
enum Phase : uint8_t { kIdle = 0, kPrepared, kCommittedHere, kAbortedHere };

struct ClientTxn {
  uint64_t ts = 0;
  Phase phase = kIdle;
  uint16_t count = 0;
  MsgEntry entries[kMaxWrites];
};

// One client's line of a REPORT (its state here) or a DECIDE (the verdict
// on timestamp ts: 1 commit, 0 abort).
struct PeerEntry {
  uint64_t ts;
  uint64_t state;
};

}  // namespace

struct ResourceManager::Impl {
  Impl(Cluster& c, const Layout& l, const TwoPcFlows& f, std::vector<std::byte*> t,
       std::vector<std::string> lost, FreeSlotWatch s)
      : cluster(c),
        layout(l),
        flows(f),
        tables(std::move(t)),
        me(c.rank()),
        ranks(static_cast<uint32_t>(f.compute.size())),
        groups(ranks + l.clients),
        lost_at_setup(std::move(lost)),
        slots(std::move(s)) {
    lost_at_setup.resize(groups);
  }
  Cluster& cluster;
  Layout layout;
  TwoPcFlows flows;
  std::vector<std::byte*> tables;
  uint32_t me;
  bool recover = true;  // false: a group lost fails serve() (--no-recovery)
  uint32_t ranks;       // compute ranks
  // A group is whoever sends on one request flow: compute rank k's clients
  // (group k < ranks), or free client slot id run by a process new to the
  // job (group ranks + id, once admitted).
  uint32_t groups;
  // Per group: why its ends could not be declared or opened (it was lost
  // while the job started, or before its slot's flows were declared);
  // empty if they were.
  std::vector<std::string> lost_at_setup;
  // Per admitted slot's group: the process that runs it (rank, incarnation).
  std::vector<std::pair<uint32_t, uint32_t>> runner;
  // Server 0: the free slots' claim words, and per client id 1 once its
  // slot was admitted or closed.
  FreeSlotWatch slots;
  std::vector<uint32_t> free_ids;
  std::vector<uint8_t> settled_slot;
  // The groups admitted (ADMIT heard) whose flows are not declared yet.
  std::vector<uint32_t> admitted;
  // No slot can be claimed any more (server 0: it closed the rest; the
  // others: FINISH heard).
  bool no_more_slots = false;
  std::vector<DeclaredFlow> slot_declared;  // outlive serve()'s ends of them
  // Server 0: the timestamp service.
  uint64_t issued = 0, watermark = 0;
  std::vector<uint8_t> done;
  std::vector<uint64_t> outstanding;  // per client: its timestamp not yet DONE (0: none)
  std::vector<std::byte> out, peer_msg;
  std::vector<ClientTxn> txns;  // per client
  // Termination, per group: its requests ended here (abnormally), a
  // decision arrived and was applied here; server 0: reports and RESOLVEDs
  // received, the verdict per client being assembled.
  std::vector<uint8_t> ended, lost, decided, finished;
  uint32_t compute_finished = 0;  // server 0: compute ranks' groups finished
  std::vector<uint32_t> reports, resolved;
  std::vector<uint8_t> any_lost;
  std::vector<PeerEntry> verdict;  // per client (server 0)
  TwoPcRecovery recovery;
  // The flows' ends (set by serve()).
  Worker* w = nullptr;
  std::vector<Source<Bytes>>* replies = nullptr;
  std::vector<uint8_t> reply_dead;
  Source<Bytes>* peer = nullptr;
  // A memory server is lost: the first failure that says so. The server
  // then stops serving but keeps its flows until every client has given up
  // (so clients learn of the loss from the dead server's end, not from
  // this one's teardown), and serve() throws it.
  struct Loss {
    Status status = Status::kOk;
    std::string what, error;
    std::optional<LostPeer> peer;
  } loss;

  std::byte* slot(uint32_t t, uint64_t key) { return tables[t] + layout.slot_offset(t, key); }

  // Drops the version with commit id c and restores the header to the newest
  // remaining one; false if the record was not locked by c.
  bool roll_back(uint32_t t, uint64_t key, uint64_t c) {
    std::byte* s = slot(t, key);
    if (load64(s) != (kLockBit | c)) return false;
    uint64_t newest = 0;
    for (uint32_t v = 0; v < layout.versions; ++v) {
      uint64_t cid;
      const bool ok = valid_version(layout, t, key, s, v, &cid);
      if (!ok || cid == c) {
        std::memset(s + layout.version_offset(t, v), 0, 16);
      } else {
        newest = std::max(newest, cid);
      }
    }
    store64(s, newest);
    return true;
  }

  // Validates, locks and installs one record; false (nothing done) if it
  // changed since the client's snapshot or is locked.
  bool prepare(const MsgEntry& e, const std::byte* payload, uint64_t c, uint64_t* seen) {
    std::byte* s = slot(e.table, e.key);
    *seen = load64(s);
    if (*seen != e.expected) return false;
    int victim = -1, oldest = -1;
    uint64_t oldest_cid = 0;
    for (uint32_t v = 0; v < layout.versions; ++v) {
      uint64_t cid;
      if (!valid_version(layout, e.table, e.key, s, v, &cid)) {
        if (victim < 0) victim = static_cast<int>(v);
      } else if (oldest < 0 || cid < oldest_cid) {
        oldest = static_cast<int>(v), oldest_cid = cid;
      }
    }
    if (victim < 0) victim = oldest;
    store64(s, kLockBit | c);
    const uint32_t payload_bytes = layout.tables[e.table].payload_bytes;
    std::byte* v = s + layout.version_offset(e.table, static_cast<uint32_t>(victim));
    store64(v, c);
    store64(v + 8, version_checksum(c, e.table, e.key, std::span(payload, payload_bytes)));
    std::memcpy(v + 16, payload, payload_bytes);
    return true;
  }

  void mark_done(uint64_t ts) {
    if (ts > watermark && ts <= issued) done[ts % done.size()] = 1;
    while (watermark < issued && done[(watermark + 1) % done.size()]) ++watermark;
  }

  // Handles one request; returns the reply's length (0: no reply).
  // REQUIRES: its client is one of the group it came from (serve() checks).
  size_t handle(std::span<const std::byte> rec) {
    MsgHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    MsgHeader r{h.type, 0, static_cast<uint16_t>(me), h.client, 0};
    size_t n = sizeof(r);
    const std::byte* p = rec.data() + sizeof(h);
    ClientTxn& txn = txns[h.client];
    switch (h.type) {
      case kBegin:
        r.ts = watermark;
        break;
      case kGetTs:
        // Every client has at most one timestamp outstanding, so a window
        // of done flags past the watermark suffices; a full window (a dead
        // client's timestamp not yet resolved) is refused, and the client
        // asks again.
        if (issued - watermark >= done.size() - 1) {
          r.status = 1;
          break;
        }
        r.ts = ++issued;
        done[r.ts % done.size()] = 0;
        outstanding[h.client] = r.ts;
        break;
      case kDone:
        if (outstanding[h.client] == h.ts) outstanding[h.client] = 0;
        mark_done(h.ts);
        return 0;
      case kRead: {
        MsgEntry e;
        std::memcpy(&e, p, sizeof(e));
        const std::byte* s = slot(e.table, e.key);
        int best = -1;
        uint64_t best_cid = 0;
        bool any = false;
        for (uint32_t v = 0; v < layout.versions; ++v) {
          uint64_t cid;
          if (!valid_version(layout, e.table, e.key, s, v, &cid)) continue;
          any = true;
          if (cid <= h.ts && (best < 0 || cid > best_cid))
            best = static_cast<int>(v), best_cid = cid;
        }
        r.status = best >= 0 ? 0 : any ? 2 : 1;
        store64(out.data() + n, best_cid);
        n += 8;
        if (best >= 0) {
          const uint32_t pb = layout.tables[e.table].payload_bytes;
          std::memcpy(out.data() + n, s + layout.version_offset(e.table, best) + 16, pb);
          n += pb;
        }
        break;
      }
      case kPrepare: {
        if (h.count > kMaxWrites) throw NamError("nam 2pc: a PREPARE of more than 16 records");
        const std::byte* q = p;
        txn.ts = h.ts;
        txn.phase = kPrepared;
        txn.count = 0;
        for (uint16_t i = 0; i < h.count; ++i) {
          MsgEntry e;
          std::memcpy(&e, q, sizeof(e));
          uint64_t seen = 0;
          if (!prepare(e, q + sizeof(e), h.ts, &seen)) {
            // Undo this request's earlier records, then say no.
            for (uint16_t j = 0; j < txn.count; ++j)
              roll_back(txn.entries[j].table, txn.entries[j].key, h.ts);
            txn.phase = kAbortedHere;
            txn.count = 0;
            r.status = 1;
            r.ts = seen & ~kLockBit;
            break;
          }
          txn.entries[txn.count++] = e;
          q += sizeof(e) + padded(layout.tables[e.table].payload_bytes);
        }
        break;
      }
      case kCommit:
      case kAbort:
        for (uint16_t i = 0; i < h.count; ++i) {
          MsgEntry e;
          std::memcpy(&e, p + i * sizeof(e), sizeof(e));
          if (h.type == kAbort) {
            roll_back(e.table, e.key, h.ts);
          } else if (load64(slot(e.table, e.key)) == (kLockBit | h.ts)) {
            store64(slot(e.table, e.key), h.ts);
          }
        }
        if (txn.ts == h.ts) txn.phase = h.type == kCommit ? kCommittedHere : kAbortedHere;
        break;
      default:
        throw NamError("nam 2pc: server " + std::to_string(me) + " got a malformed request (type " +
                       std::to_string(h.type) + ")");
    }
    std::memcpy(out.data(), &r, sizeof(r));
    return n;
  }

  // ---- termination (cooperative, coordinated by server 0)

  void note_loss(Status s, const std::string& what, const std::string& error,
                 std::optional<LostPeer> peer_info) {
    if (loss.status == Status::kOk) loss = Loss{s, what, error, std::move(peer_info)};
  }
  [[noreturn]] void server_lost(Status s, const std::string& what, const std::string& error,
                                std::optional<LostPeer> peer_info) {
    const uint32_t who = peer_info ? peer_info->rank : 0;
    if (s == Status::kPeerLost || peer_info) {
      throw PeerLostError(who, "nam 2pc: memory server rank " + std::to_string(me) + ": " + what +
                                   ": memory server rank " + std::to_string(who) +
                                   " is lost: " + error);
    }
    fail(s, what, error, peer_info);
  }

  // A message to server `to` on the peer flow (or, to itself, at once).
  void to_server(uint32_t to, uint8_t type, uint32_t rank_index, uint8_t status,
                 const std::vector<PeerEntry>* entries) {
    const uint16_t count = entries ? static_cast<uint16_t>(entries->size()) : 0;
    const MsgHeader h{type, status, count, rank_index, me};
    std::vector<std::byte> msg(sizeof(h) + count * sizeof(PeerEntry));
    std::memcpy(msg.data(), &h, sizeof(h));
    if (count) std::memcpy(msg.data() + sizeof(h), entries->data(), count * sizeof(PeerEntry));
    if (to == me) {
      on_peer(msg);
      return;
    }
    if (loss.status != Status::kOk) return;
    const Status s = w->push_to(*peer, to, std::span<const std::byte>(msg));
    if (s != Status::kOk)
      note_loss(s, "telling memory server " + std::to_string(to), peer->error(), peer->lost_peer());
  }

  // Group g's first client id, and how many it has.
  uint32_t first_client(uint32_t g) const {
    return g < ranks ? g * flows.clients_per_rank : g - ranks;
  }
  uint32_t clients_in(uint32_t g) const { return g < ranks ? flows.clients_per_rank : 1; }
  bool member(uint32_t g, uint32_t client) const {
    return client >= first_client(g) && client < first_client(g) + clients_in(g);
  }
  // Group g for the log.
  std::string who(uint32_t g) const {
    if (g < ranks) return "compute rank " + std::to_string(flows.compute[g]);
    return "client slot " + std::to_string(g - ranks) + " of rank " +
           std::to_string(runner[g].first) + " (incarnation " + std::to_string(runner[g].second) +
           ")";
  }

  // Group g's requests ended here (abnormally: `was_lost`): report its
  // clients' last transactions to server 0.
  void rank_ended(uint32_t g, bool was_lost) {
    if (was_lost && !recover)
      throw NamError("nam 2pc: memory server rank " + std::to_string(me) + ": " + who(g) +
                     " was lost, and recovery is off (--no-recovery): its clients' transactions "
                     "stay unresolved");
    ended[g] = 1;
    lost[g] = was_lost;
    std::vector<PeerEntry> e;
    for (uint32_t j = first_client(g); j < first_client(g) + clients_in(g); ++j)
      e.push_back(PeerEntry{txns[j].ts, txns[j].phase});
    to_server(0, kReport, g, was_lost ? 1 : 0, &e);
  }

  // Server 0, between polls: admits every free slot newly claimed (once the
  // termination of the compute rank it belonged to is over: that rank's
  // clients never ran, but their REPORT and DECIDE pass over the slot's
  // transaction state), and once the first processes' clients are all done
  // closes every slot still free, then tells the others (FINISH).
  void watch_slots() {
    if (no_more_slots) return;
    const bool run_over = compute_finished == ranks;
    bool all_settled = true;
    for (uint32_t id : free_ids) {
      if (settled_slot[id] != 0) continue;
      SpareClaim c = decode_claim(__atomic_load_n(
          reinterpret_cast<const uint64_t*>(slots.words + 8ull * id), __ATOMIC_ACQUIRE));
      if (c.state == SpareState::kFree && run_over)
        c = close_spare(*slots.results, slots.offset, id);
      if (c.state == SpareState::kClosed) {
        settled_slot[id] = 1;
        continue;
      }
      const uint32_t owner = id / flows.clients_per_rank;  // a compute rank's slot, or a spare
      if (c.state == SpareState::kFree || (owner < ranks && !finished[owner])) {
        all_settled = false;
        continue;
      }
      // Claimed (running, or done already): every server serves it.
      settled_slot[id] = 1;
      const std::vector<PeerEntry> e{PeerEntry{c.rank, c.incarnation}};
      for (uint32_t s = 0; s < layout.memory_servers; ++s) to_server(s, kAdmit, ranks + id, 0, &e);
    }
    if (!run_over || !all_settled) return;
    no_more_slots = true;
    for (uint32_t s = 1; s < layout.memory_servers; ++s) to_server(s, kFinish, 0, 0, nullptr);
  }

  void on_peer(std::span<const std::byte> rec) {
    MsgHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    const uint32_t k = h.client;
    if (k >= groups || rec.size() < sizeof(h) + h.count * sizeof(PeerEntry))
      throw NamError("nam 2pc: a malformed message between memory servers");
    std::vector<PeerEntry> e(h.count);
    if (h.count) std::memcpy(e.data(), rec.data() + sizeof(h), h.count * sizeof(PeerEntry));
    switch (h.type) {
      case kReport: {  // server 0: one server's view of rank k
        any_lost[k] |= h.status;
        for (uint32_t i = 0; i < e.size() && i < clients_in(k); ++i) {
          PeerEntry& v = verdict[first_client(k) + i];
          if (e[i].state == kIdle) continue;
          if (e[i].ts > v.ts) v = PeerEntry{e[i].ts, 0};
          if (e[i].ts == v.ts && e[i].state == kCommittedHere) v.state = 1;
        }
        if (++reports[k] < layout.memory_servers) return;
        std::vector<PeerEntry> d(verdict.begin() + first_client(k),
                                 verdict.begin() + first_client(k) + clients_in(k));
        for (uint32_t s = 0; s < layout.memory_servers; ++s) to_server(s, kDecide, k, 0, &d);
        return;
      }
      case kDecide: {  // every server: apply the verdict on rank k's clients
        for (uint32_t i = 0; i < e.size() && i < clients_in(k); ++i) {
          uint64_t forward = 0, back = 0;
          const uint32_t j = first_client(k) + i;
          ClientTxn& t = txns[j];
          if (t.phase != kPrepared || t.ts != e[i].ts) continue;
          for (uint16_t x = 0; x < t.count; ++x) {
            const MsgEntry& m = t.entries[x];
            if (e[i].state == 1) {
              if (load64(slot(m.table, m.key)) == (kLockBit | t.ts)) {
                store64(slot(m.table, m.key), t.ts);
                ++forward;
              }
            } else if (roll_back(m.table, m.key, t.ts)) {
              ++back;
            }
          }
          t.phase = e[i].state == 1 ? kCommittedHere : kAbortedHere;
          ++recovery.clients_resolved;
          std::fprintf(stderr,
                       "nam 2pc: memory server rank %u: client %u (%s, requests ended %s) held "
                       "timestamp %llu prepared here: %s, %llu records\n",
                       me, j, who(k).c_str(), lost[k] ? "abnormally" : "cleanly",
                       static_cast<unsigned long long>(t.ts),
                       e[i].state == 1 ? "committed by another server, rolled forward"
                                       : "committed nowhere, rolled back",
                       static_cast<unsigned long long>(e[i].state == 1 ? forward : back));
          recovery.rolled_forward += forward;
          recovery.rolled_back += back;
        }
        if (lost[k]) ++recovery.ranks_lost;
        decided[k] = 1;
        to_server(0, kResolved, k, 0, nullptr);
        return;
      }
      case kResolved:  // server 0: once every server applied it, pass the timestamps
        if (++resolved[k] < layout.memory_servers) return;
        for (uint32_t j = first_client(k); j < first_client(k) + clients_in(k); ++j) {
          if (outstanding[j] != 0) mark_done(outstanding[j]);
          outstanding[j] = 0;
        }
        finished[k] = 1;
        if (k < ranks) ++compute_finished;
        return;
      case kAdmit:  // every server: serve a free slot's flows from the next poll on
        if (k < ranks || e.size() != 1 || runner[k].first != 0)
          throw NamError("nam 2pc: a malformed ADMIT between memory servers");
        runner[k] = {static_cast<uint32_t>(e[0].ts), static_cast<uint32_t>(e[0].state)};
        ended[k] = decided[k] = finished[k] = 0;
        admitted.push_back(k);
        return;
      case kFinish:
        no_more_slots = true;
        return;
      default:
        throw NamError("nam 2pc: a malformed message between memory servers (type " +
                       std::to_string(h.type) + ")");
    }
  }

  bool all(const std::vector<uint8_t>& v) const {
    return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x != 0; });
  }
};

ResourceManager::ResourceManager(Cluster& cluster, const Layout& layout, const TwoPcFlows& flows,
                                 std::vector<std::byte*> tables,
                                 std::vector<std::string> lost_at_setup, FreeSlotWatch slots,
                                 bool recover)
    : impl_(new Impl(cluster, layout, flows, std::move(tables), std::move(lost_at_setup),
                     std::move(slots))) {
  Impl& m = *impl_;
  m.recover = recover;
  if (m.me == 0) {
    m.done.assign(std::max<uint64_t>(1 << 16, 4ull * layout.clients), 0);
    m.verdict.assign(layout.clients, PeerEntry{0, 0});
  }
  m.outstanding.assign(layout.clients, 0);
  m.out.resize(max_message(layout));
  m.txns.assign(layout.clients, ClientTxn{});
  for (auto* v : {&m.ended, &m.lost, &m.decided, &m.finished, &m.any_lost, &m.reply_dead})
    v->assign(m.groups, 0);
  // A slot's group has nothing to end or resolve until it is admitted.
  for (uint32_t g = m.ranks; g < m.groups; ++g) m.ended[g] = m.decided[g] = m.finished[g] = 1;
  m.reports.assign(m.groups, 0);
  m.resolved.assign(m.groups, 0);
  m.runner.assign(m.groups, {0, 0});
  m.settled_slot.assign(layout.clients, 0);
  for (uint32_t id = 0; id < m.slots.free.size() && id < layout.clients; ++id)
    if (m.slots.free[id] != 0) m.free_ids.push_back(id);
  if (m.me == 0 && !m.free_ids.empty() && (m.slots.words == nullptr || m.slots.results == nullptr))
    throw NamError("nam 2pc: memory server 0 has free client slots but no claim words");
}
ResourceManager::~ResourceManager() = default;

const TwoPcRecovery& ResourceManager::recovery() const { return impl_->recovery; }

void ResourceManager::serve() {
  Impl& m = *impl_;
  const uint32_t servers = m.layout.memory_servers;
  // The sources outlive the worker that drives them (one per group, never
  // moved once the worker pushed on it).
  std::vector<Source<Bytes>> replies(m.groups);
  Source<Bytes> peer;
  Worker w;
  std::vector<Worker::InputId> inputs(m.groups, Worker::InputId{});
  std::vector<char> opened(m.groups, 0);
  // The groups served: every compute rank's, then each slot's as admitted.
  std::vector<uint32_t> served(m.ranks);
  std::iota(served.begin(), served.end(), 0u);
  m.w = &w;
  m.replies = &replies;
  m.peer = &peer;
  // A group's process lost while its ends open (it died while the job
  // started, or before its slot's flows were set up) is one whose requests
  // ended before they began.
  auto open_lost = [&m](uint32_t g, const PeerLostError& e) {
    const uint32_t rank = g < m.ranks ? m.flows.compute[g] : m.runner[g].first;
    if (e.rank() != rank) return false;
    m.lost_at_setup[g] = e.what();
    return true;
  };
  auto open_reply = [&](uint32_t g, const ShuffleSpec<Bytes>& reply) {
    try {
      replies[g] = m.cluster.source(reply, 0);
    } catch (const PeerLostError& e) {
      if (!open_lost(g, e)) throw;
    }
  };
  auto open_requests = [&](uint32_t g, const ShuffleSpec<Bytes>& request) {
    if (!m.lost_at_setup[g].empty()) return;
    Target<Bytes> target;
    try {
      target = m.cluster.target(request, 0);
    } catch (const PeerLostError& e) {
      if (!open_lost(g, e)) throw;
      return;
    }
    opened[g] = 1;
    inputs[g] = w.add(std::move(target), [&m, &w, &replies, g](RecordBatch batch) {
      for (std::span<const std::byte> rec : batch) {
        if (m.loss.status != Status::kOk) return;  // serving no more
        if (rec.size() < sizeof(MsgHeader))
          throw NamError("nam 2pc: a request shorter than its header");
        MsgHeader h;
        std::memcpy(&h, rec.data(), sizeof(h));
        if (!m.member(g, h.client)) {
          throw NamError("nam 2pc: server " + std::to_string(m.me) + " got a request of client " +
                         std::to_string(h.client) + " from " + m.who(g) +
                         ", which does not run it");
        }
        const size_t n = m.handle(rec);
        if (n == 0 || m.reply_dead[g]) continue;
        const Status s = w.push_to(replies[g], h.client - m.first_client(g),
                                   std::span<const std::byte>(m.out.data(), n));
        // A process that is gone: its requests end too, and the termination
        // protocol resolves what it left.
        if (s != Status::kOk) m.reply_dead[g] = 1;
      }
    });
  };
  // A group lost before its requests began.
  auto lost_before_start = [&](uint32_t g) {
    std::fprintf(stderr,
                 "nam 2pc: memory server rank %u: %s was lost before its requests began: %s\n",
                 m.me, m.who(g).c_str(), m.lost_at_setup[g].c_str());
    m.reply_dead[g] = 1;
    replies[g].abort();
    m.rank_ended(g, true);
  };
  for (uint32_t k = 0; k < m.ranks; ++k)
    if (m.lost_at_setup[k].empty()) open_reply(k, m.flows.reply[k]);
  for (uint32_t k = 0; k < m.ranks; ++k) open_requests(k, m.flows.request[k]);
  Worker::InputId peer_in = 0;
  if (servers > 1) {
    peer = m.cluster.source(m.flows.peer, 0);
    peer_in = w.add(m.cluster.target(m.flows.peer, 0), [&m](RecordBatch batch) {
      for (std::span<const std::byte> rec : batch) {
        if (rec.size() < sizeof(MsgHeader))
          throw NamError("nam 2pc: a malformed message between memory servers");
        m.on_peer(rec);
      }
    });
  }
  for (uint32_t k = 0; k < m.ranks; ++k)
    if (!m.lost_at_setup[k].empty()) lost_before_start(k);
  // A slot admitted (ADMIT heard): declare and open its flows with the
  // process that runs it, which waits for that in declare_slot. (The others'
  // requests wait meanwhile: a declaration takes a registry round trip.)
  auto admit = [&](uint32_t g) {
    const auto [rank, incarnation] = m.runner[g];
    const SlotFlows f = slot_flows(m.cluster, m.layout, g - m.ranks, rank, incarnation);
    served.push_back(g);
    // Lost since it claimed the slot, as far as this rank's view knows (a
    // view that has not caught up with the claimant's arrival yet knows an
    // older incarnation: then the declaration decides): perhaps started
    // again, its number another process's now, which would never declare
    // these flows.
    const uint32_t now = m.cluster.incarnation(rank);
    if (now > incarnation || (now == incarnation && !m.cluster.alive(rank))) {
      m.lost_at_setup[g] = "its process is no longer in the job";
      lost_before_start(g);
      return;
    }
    try {
      std::vector<DeclaredFlow> d = declare_slot(m.cluster, f);
      for (DeclaredFlow& x : d) m.slot_declared.push_back(std::move(x));
      open_reply(g, f.reply);
      open_requests(g, f.request);
    } catch (const PeerLostError& e) {
      if (!open_lost(g, e)) throw;
    }
    if (!m.lost_at_setup[g].empty()) {
      lost_before_start(g);
      return;
    }
    std::fprintf(stderr, "nam 2pc: memory server rank %u: serves %s\n", m.me, m.who(g).c_str());
  };
  bool closed = false;
  Clock::time_point lost_at{};
  for (;;) {
    const size_t work = w.poll();
    if (m.loss.status != Status::kOk) {
      // Wait (up to 30 s) until every client has given up, then fail.
      if (lost_at == Clock::time_point{}) lost_at = Clock::now();
      bool clients_gone = true;
      for (uint32_t g : served)
        clients_gone = clients_gone && (opened[g] == 0 || w.status(inputs[g]) != Status::kOk);
      if (clients_gone || Clock::now() - lost_at > std::chrono::seconds(30))
        m.server_lost(m.loss.status, m.loss.what, m.loss.error, m.loss.peer);
      w.idle(work);
      continue;
    }
    if (m.me == 0) m.watch_slots();
    while (!m.admitted.empty()) {
      const uint32_t g = m.admitted.front();
      m.admitted.erase(m.admitted.begin());
      admit(g);
    }
    for (uint32_t g : served) {
      if (m.ended[g] || opened[g] == 0) continue;
      const Status st = w.status(inputs[g]);
      if (st == Status::kOk) continue;
      if (st == Status::kEndOfFlow) {
        const Status c = m.reply_dead[g] ? Status::kOk : w.close(replies[g]);
        if (c != Status::kOk) m.reply_dead[g] = 1;
      } else {
        std::fprintf(stderr, "nam 2pc: memory server rank %u: the requests of %s ended: %s: %s\n",
                     m.me, m.who(g).c_str(), sluice::to_string(st), w.error(inputs[g]).c_str());
        m.reply_dead[g] = 1;
        replies[g].abort();
      }
      m.rank_ended(g, st != Status::kEndOfFlow);
    }
    if (servers > 1) {
      const Status ps = w.status(peer_in);
      if (ps != Status::kOk && ps != Status::kEndOfFlow) {
        m.note_loss(ps, "between memory servers", w.error(peer_in), w.lost_peer(peer_in));
        continue;
      }
    }
    const bool settled = m.no_more_slots && m.admitted.empty() && m.all(m.ended) &&
                         m.all(m.decided) && (m.me != 0 || m.all(m.finished));
    if (settled && !closed) {
      closed = true;
      if (servers > 1) {
        const Status c = w.close(peer);
        if (c != Status::kOk) {
          m.note_loss(c, "closing the peer flow", peer.error(), peer.lost_peer());
          continue;
        }
      }
    }
    if (closed && (servers == 1 || w.status(peer_in) == Status::kEndOfFlow)) break;
    w.idle(work);
  }
  // Over ofi, the last replies and END travel while the worker is driven.
  while (!w.done()) w.idle(w.poll());
  m.w = nullptr;
}

}  // namespace sluice::nam
