// What each registry request does: HELLO (joining, rejoining as a new
// incarnation, refusals), DECLARE, PUT, GET, ERASE, UNDECLARE, BARRIER, GATHER and
// COUNTERS. The connections, timers and losses are registry_server.cc's.
#include <algorithm>
#include <cstring>
#include <string>

#include "control/registry_server_impl.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

// Constant-time comparison, so the reply time does not reveal how much of a
// guessed secret was right.
bool secrets_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

using namespace registry_impl;

void RegistryServer::Impl::handle_frame(Conn& c, const Frame& f, TimePoint now) {
  const auto type = static_cast<MsgType>(f.header.type);
  const uint32_t req = f.header.request_id;
  if (c.observer) {
    // A tool that reads, never a rank: GET, HEARTBEAT and LEAVE only.
    switch (type) {
      case MsgType::kGet:
        return on_get(c, f, now);
      case MsgType::kHeartbeat:
        send(c, MsgType::kHeartbeat, 0, "");
        return;
      case MsgType::kLeave:
        start_closing(c, now);
        return;
      default:
        refuse(c, ErrorCode::kProtocol,
               log::cat("an observer may send GET, HEARTBEAT and LEAVE, not ", to_string(type)),
               req);
        return;
    }
  }
  if (c.spare) {
    // A spare is silent until it takes a rank's place.
    refuse(c, ErrorCode::kProtocol,
           log::cat("a spare sends nothing until it takes a rank's place, got ", to_string(type)),
           req);
    return;
  }
  if (c.rank < 0) {
    if (type == MsgType::kHello) {
      on_hello(c, f, now);
    } else {
      refuse(c, ErrorCode::kProtocol,
             log::cat("the first message must be HELLO, got ", to_string(type)), req);
    }
    return;
  }
  switch (type) {
    case MsgType::kDeclare:
      return on_declare(c, f, now);
    case MsgType::kPut:
      return on_put(c, f);
    case MsgType::kGet:
      return on_get(c, f, now);
    case MsgType::kBarrier:
      return on_barrier(c, f, now);
    case MsgType::kGather:
      return on_gather(c, f, now);
    case MsgType::kErase:
      return on_erase(c, f);
    case MsgType::kUndeclare:
      return on_undeclare(c, f, now);
    case MsgType::kHeartbeat:
      if (!f.payload.empty()) {
        refuse(c, ErrorCode::kProtocol, "malformed HEARTBEAT message", req);
        return;
      }
      // The reply is how the client knows that the registry is alive.
      send(c, MsgType::kHeartbeat, 0, "");
      return;
    case MsgType::kCounters:
      return on_counters(c, f);
    case MsgType::kLeave:
      lose_rank(static_cast<uint32_t>(c.rank), RankState::kLeft, "left the job");
      start_closing(c, now);
      place_joiners();  // its number is free
      return;
    case MsgType::kHello:
      refuse(c, ErrorCode::kProtocol, "HELLO sent twice on one connection", req);
      return;
    default:
      refuse(c, ErrorCode::kProtocol,
             log::cat("unexpected ", to_string(type), " message from a client"), req);
      return;
  }
}

void RegistryServer::Impl::on_hello(Conn& c, const Frame& f, TimePoint now) {
  const uint32_t req = f.header.request_id;
  HelloMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed HELLO message", req);
    return;
  }
  if (!secrets_equal(m.secret, opt.secret)) {
    refuse(c, ErrorCode::kAuth, "wrong job secret", req);
    return;
  }
  if (m.rank == kNoRank && m.world_size == 0) {
    // An observer (`sluice info --registry`): it reads the job's members
    // and their keys, and is never one of them.
    c.observer = true;
    c.deadline = kNever;
    log::info("registry: an observer connected from ", m.host, " (pid ", m.pid, ", ", c.peer, ")");
    send(c, MsgType::kWelcome, req, encode(welcome_message()));
    return;
  }
  if (m.world_size != opt.world_size) {
    refuse(c, ErrorCode::kRegistry,
           log::cat(m.rank == kNoRank ? std::string("a spare") : log::cat("rank ", m.rank),
                    " says the job has ", m.world_size,
                    " ranks, but this registry serves a job of ", opt.world_size, " ranks"),
           req);
    return;
  }
  if (m.rank == kJoinRank) return on_join(c, m, req, now);
  if (m.rank == kNoRank) {
    // A spare: it waits, silent, for a rank to die and then takes its place
    // (place_spare, after this handler: a rank may have died already).
    if (enqueue(c, m, req, spares, "spares", "a rank's place")) {
      log::info("registry: a spare joined from ", m.host, " (pid ", m.pid, ", ", c.peer, "); ",
                spares.size(), " wait for a rank's place");
    }
    return;
  }
  if (m.rank >= opt.world_size) {
    refuse(c, ErrorCode::kRegistry,
           log::cat("rank ", m.rank, " is out of range: the job has ", opt.world_size,
                    " ranks (0..", opt.world_size - 1, ")"),
           req);
    return;
  }
  RankInfo& info = ranks[m.rank];
  if (info.vacant) {  // a launcher that starts an elastic job's later ranks by number
    admit(c, m, m.rank, req, now, "by its number, in a vacancy");
    return;
  }
  if (info.state == RankState::kLeft) {
    refuse(c, ErrorCode::kRegistry,
           log::cat(describe(m.rank), "; a rank that left cannot rejoin the job (pid ", m.pid,
                    " on ", m.host, " tried)"),
           req);
    return;
  }
  if (info.state == RankState::kAlive) {
    refuse(c, ErrorCode::kRegistry,
           log::cat("rank ", m.rank, " already joined (", info.host, ", pid ", info.pid,
                    "); is the same rank launched twice?"),
           req);
    return;
  }
  admit(c, m, m.rank, req, now, nullptr);
}

int64_t RegistryServer::Impl::free_rank() const {
  for (uint32_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].state == RankState::kLeft) return r;
  return -1;
}

void RegistryServer::Impl::on_join(Conn& c, const HelloMsg& m, uint32_t req, TimePoint /*now*/) {
  // In the queue, then placed in its order: at once if a number is free.
  if (!enqueue(c, m, req, joiners, "joiners", "a free rank number")) return;
  place_joiners();
  if (c.spare) {  // every number is held: it waits, silent, until a rank leaves
    log::info("registry: a joiner from ", m.host, " (pid ", m.pid, ", ", c.peer, ") waits: all ",
              opt.world_size, " rank numbers are held; it takes the next one a rank leaves");
  }
}

bool RegistryServer::Impl::enqueue(Conn& c, const HelloMsg& m, uint32_t req,
                                   std::vector<Spare>& queue, const char* who, const char* what) {
  if (queue.size() >= kMaxSpares) {
    refuse(c, ErrorCode::kRegistry,
           log::cat("too many ", who, ": ", kMaxSpares, " already wait for ", what), req);
    return false;
  }
  c.spare = true;
  c.deadline = kNever;
  queue.push_back(Spare{c.id, req, m});
  return true;
}

void RegistryServer::Impl::place_joiners() {
  std::erase_if(joiners, [this](const Spare& j) { return waiting_conn(j.conn_id) == nullptr; });
  // Once every rank has left (the job finished), there is nothing to join:
  // a joiner that waited is refused rather than made the job's only member.
  const bool finished = std::all_of(ranks.begin(), ranks.end(),
                                    [](const RankInfo& i) { return i.state == RankState::kLeft; });
  if (finished) {
    for (const Spare& j : joiners) {
      if (Conn* c = find_conn(j.conn_id)) {
        refuse(*c, ErrorCode::kRegistry,
               "the job has finished: every rank left it, so there is no running job to join",
               j.request_id);
      }
    }
    joiners.clear();
    return;
  }
  int64_t r;
  while (!joiners.empty() && (r = free_rank()) >= 0) {
    const Spare joiner = std::move(joiners.front());
    joiners.erase(joiners.begin());
    Conn* c = find_conn(joiner.conn_id);
    if (c == nullptr || c->closing) continue;  // (dropped by an admission's broadcast)
    c->spare = false;
    admit(*c, joiner.hello, static_cast<uint32_t>(r), joiner.request_id, Clock::now(),
          ranks[r].vacant ? "a joiner that waited, in a vacancy"
                          : "a joiner that waited, in a left rank's place");
  }
}

void RegistryServer::Impl::admit(Conn& c, const HelloMsg& m, uint32_t rank, uint32_t req,
                                 TimePoint now, const char* as) {
  RankInfo& info = ranks[rank];
  // A rank that died may join again, as its next incarnation: a new process
  // (the old one's connection is gone, so a stopped process that resumed
  // cannot come back this way), or a spare in its place. Its peers keep
  // every flow and region of the old incarnation failed (clients pin
  // incarnations).
  const bool rejoin = info.state == RankState::kDied || info.state == RankState::kLeft;
  const bool vacancy = info.vacant;
  const uint32_t incarnation = rejoin ? info.incarnation + 1 : 0;
  const TimePoint lost_at = info.lost_at;
  const bool left = info.state == RankState::kLeft && !info.vacant;
  c.rank = rank;
  c.deadline = kNever;
  if (joined_address.empty() && binds_wildcard()) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(c.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      joined_address = peer_name(ss);
    }
  }
  info = RankInfo{RankState::kAlive, m.host, m.pid, "", c.id, now, incarnation, m.fence, {}};
  const std::string by = as != nullptr ? log::cat(" (", as, ")") : std::string();
  // A new incarnation makes a new view; the first joins form the job's
  // first one (epoch 0, every rank).
  if (rejoin) {
    ++epoch;
    const auto after_ms = std::chrono::duration_cast<milliseconds>(now - lost_at).count();
    if (vacancy || left) {
      // A joiner: a new member in a number no process holds.
      log::info("registry: rank ", rank, " joined the running job from ", m.host, " (pid ", m.pid,
                ", ", c.peer, ")", by, " as incarnation ", incarnation,
                vacancy ? std::string() : log::cat(", ", after_ms, " ms after the rank left"));
      announce_view("joined", rank,
                    log::cat("incarnation ", incarnation,
                             vacancy ? std::string(", a vacancy")
                                     : log::cat(", in the place of the rank that left ", after_ms,
                                                " ms before")));
    } else {
      log::warn("registry: rank ", rank, " rejoined from ", m.host, " (pid ", m.pid, ", ", c.peer,
                ")", by, " as incarnation ", incarnation, ", ", after_ms, " ms after it was lost");
      announce_view("rejoined", rank,
                    log::cat("incarnation ", incarnation, as != nullptr ? log::cat(", ", as) : "",
                             ", ", after_ms, " ms after the loss"));
    }
    waiters.rejoin_rank(rank);
  } else {
    log::info("registry: rank ", rank, " joined from ", m.host, " (pid ", m.pid, ", ", c.peer, ")",
              by);
  }

  WelcomeMsg welcome = welcome_message();
  welcome.rank = rank;
  send(c, MsgType::kWelcome, req, encode(welcome));
  broadcast(PeerEventMsg{rank, PeerState::kAlive, "", m.host, m.pid, incarnation, epoch, m.fence},
            c.id);
  // After the event: a member reads of the new view before its call fails.
  if (rejoin) waiters.view_changed(epoch);
  if (opt.on_joined) opt.on_joined(rank, incarnation, m.pid);
}

// Every rank the registry has seen, as WELCOME lists them.
WelcomeMsg RegistryServer::Impl::welcome_message() const {
  WelcomeMsg welcome;
  welcome.heartbeat_ms = static_cast<uint32_t>(opt.heartbeat_timeout.count());
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    const RankInfo& ri = ranks[r];
    if (ri.state == RankState::kAbsent) continue;
    const PeerState st = ri.state == RankState::kAlive  ? PeerState::kAlive
                         : ri.state == RankState::kLeft ? PeerState::kLeft
                                                        : PeerState::kDied;
    welcome.peers.push_back(
        PeerEventMsg{r, st, ri.reason, ri.host, ri.pid, ri.incarnation, epoch, ri.fence});
  }
  return welcome;
}

void RegistryServer::Impl::on_declare(Conn& c, const Frame& f, TimePoint now) {
  DeclareMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed DECLARE message", f.header.request_id);
    return;
  }
  waiters.declare(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                         deadline_after(m.timeout_ms, now)},
                  std::move(m));
}

void RegistryServer::Impl::on_put(Conn& c, const Frame& f) {
  PutMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed PUT message", f.header.request_id);
    return;
  }
  send(c, MsgType::kOk, f.header.request_id, "");
  waiters.put(std::move(m.key), std::move(m.value));
}

void RegistryServer::Impl::on_erase(Conn& c, const Frame& f) {
  EraseMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed ERASE message", f.header.request_id);
    return;
  }
  const uint64_t n = waiters.erase(m.key, m.prefix);
  send(c, MsgType::kOk, f.header.request_id, encode(ErasedMsg{n}));
}

void RegistryServer::Impl::on_undeclare(Conn& c, const Frame& f, TimePoint now) {
  UndeclareMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed UNDECLARE message", f.header.request_id);
    return;
  }
  waiters.undeclare(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                           deadline_after(m.timeout_ms, now)},
                    m);
}

void RegistryServer::Impl::on_get(Conn& c, const Frame& f, TimePoint now) {
  GetMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed GET message", f.header.request_id);
    return;
  }
  waiters.get(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                     deadline_after(m.timeout_ms, now)},
              m);
}

void RegistryServer::Impl::on_barrier(Conn& c, const Frame& f, TimePoint now) {
  BarrierMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed BARRIER message", f.header.request_id);
    return;
  }
  waiters.barrier(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                         deadline_after(m.timeout_ms, now)},
                  std::move(m));
}

void RegistryServer::Impl::on_gather(Conn& c, const Frame& f, TimePoint now) {
  GatherMsg m;
  if (!decode(f.payload, &m)) {
    refuse(c, ErrorCode::kProtocol, "malformed GATHER message", f.header.request_id);
    return;
  }
  waiters.gather(Waiter{c.id, static_cast<uint32_t>(c.rank), f.header.request_id, m.timeout_ms,
                        deadline_after(m.timeout_ms, now)},
                 std::move(m));
}

void RegistryServer::Impl::on_counters(Conn& c, const Frame& f) {
  std::string problem;
  if (metrics.report(static_cast<uint32_t>(c.rank), f.payload, &problem)) return;
  // Telemetry must not fail a job: the report is dropped, the rank stays.
  // One line per hundred, so a rank that keeps sending them cannot flood the log.
  if (++counters_rejected % 100 == 1) {
    log::warn("registry: ignored a malformed COUNTERS report from ", describe(c.rank), " (",
              f.payload.size(), " bytes): ", problem, " (", counters_rejected, " so far)");
  }
}

}  // namespace sluice::control
