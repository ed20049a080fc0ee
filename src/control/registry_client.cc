#include "control/registry_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <thread>

#include "common/log.h"
#include "common/mutex.h"
#include "common/test_hooks.h"
#include "control/fence.h"
#include "control/protocol.h"
#include "control/registry_client_impl.h"
#include "control/signal_report.h"
#include "control/tcp_liveness.h"
#include "observe/endpoint_counters.h"
#include "sluice/errors.h"
#include "transport/shm/region.h"

namespace sluice::control {
namespace {

using std::chrono::milliseconds;

// The registry enforces request deadlines itself and answers kTimeout; the
// client waits this much longer before concluding the registry is stuck.
constexpr milliseconds kReplyGrace{2000};
// One connect attempt to an address that does not answer (SYN lost) gives up
// after this, so later addresses and retries still get their turn.
constexpr milliseconds kMaxAttempt{3000};
constexpr milliseconds kMinBackoff{10};
constexpr milliseconds kMaxBackoff{500};

int remaining_ms(Deadline deadline, milliseconds cap) {
  const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp(left, milliseconds{0}, cap).count());
}

// The COUNTERS frame of this rank's flow endpoints (protocol.h): what the
// registry serves to Prometheus. Built on the control thread at heartbeat
// time, never on the data path; an endpoint beyond the format's limit is
// left out rather than failing the report.
std::string counters_frame(uint32_t rank) {
  CountersMsg m;
  for (detail::counters::Reading& r : detail::counters::snapshot(rank)) {
    if (m.endpoints.size() == kMaxReportedEndpoints) break;
    EndpointCounters e;
    e.flow = std::move(r.flow);
    e.role = static_cast<uint8_t>(r.role);
    e.rank = r.rank;
    e.slot = r.slot;
    e.peers = r.peers;
    e.record_size = r.record_size;
    const auto state = static_cast<uint32_t>(r.state);
    e.state = state >= 1 && state <= 5 ? static_cast<uint8_t>(state) : 1;
    e.cause = std::move(r.cause);
    e.opened_ns = r.opened_ns;
    e.segments = r.segments;
    e.bytes = r.bytes;
    e.credit_waits = r.credit_waits;
    e.credit_wait_ns = r.credit_wait_ns;
    e.parks = r.parks;
    e.ops = r.ops;
    e.op_timeouts = r.op_timeouts;
    e.op_failures = r.op_failures;
    e.ring_segments = r.ring_segments;
    e.ring_fill = r.ring_fill;
    e.park_ns = r.park_ns;
    for (const detail::counters::PeerReading& p : r.peer_detail) {
      if (e.peer_detail.size() == kMaxReportedPeers) break;
      e.peer_detail.push_back({p.rank, p.slot, p.heard_ns, static_cast<uint8_t>(p.ended ? 1 : 0)});
    }
    m.endpoints.push_back(std::move(e));
  }
  return make_frame(MsgType::kCounters, 0, encode(m));
}

[[noreturn]] void throw_error(const ErrorMsg& e) {
  if (e.code == ErrorCode::kPeerLost && e.rank != kNoRank) throw PeerLostError(e.rank, e.text);
  throw Error(e.code, e.text);
}

}  // namespace

int RegistryClient::Impl::try_connect(const addrinfo* ai, Deadline deadline, std::string* error) {
  int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (s < 0) {
    *error = std::strerror(errno);
    return -1;
  }
  // Non-blocking connect so an unanswered SYN costs at most kMaxAttempt,
  // not the kernel's two minutes.
  const int flags = ::fcntl(s, F_GETFL);
  ::fcntl(s, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(s, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{s, POLLOUT, 0};
    rc = ::poll(&p, 1, remaining_ms(deadline, kMaxAttempt));
    if (rc == 0) {
      *error = "connection attempt timed out";
      ::close(s);
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    *error = std::strerror(errno);
    ::close(s);
    return -1;
  }
  // The socket stays non-blocking: every write is bounded (write_all before
  // the control thread starts, the control thread's poll() after).
  int one = 1;
  ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_tcp_liveness(s, options.heartbeat_timeout);
  return s;
}

void RegistryClient::Impl::open_socket(Deadline deadline) {
  const std::string port_text = std::to_string(info.registry_port);
  milliseconds backoff = kMinBackoff;
  std::string last_error = "no attempt made";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(info.registry_host.c_str(), port_text.c_str(), &hints, &res);
    if (rc == 0) {
      for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
        fd = try_connect(ai, deadline, &last_error);
      }
      ::freeaddrinfo(res);
      if (fd >= 0) return;
    } else if (rc == EAI_AGAIN || rc == EAI_SYSTEM) {
      // Name service hiccups (common while a container network comes up)
      // are retried like a refused connection.
      last_error = gai_strerror(rc);
    } else {
      throw Error(
          ErrorCode::kBootstrap,
          log::cat("cannot resolve the registry host '", info.registry_host,
                   "': ", gai_strerror(rc),
                   "; check SLUICE_REGISTRY (host:port of `sluice registry` or `sluice run`)"));
    }
    if (Clock::now() + backoff >= deadline) {
      throw Error(ErrorCode::kTimeout,
                  log::cat("could not reach the registry at ", address, " within ",
                           options.connect_timeout.count(), " ms (last error: ", last_error,
                           "); check that it is running (`sluice run` starts one, or `sluice "
                           "registry`) and that SLUICE_REGISTRY names the address it listens on"));
    }
    // A backoff between attempts, not a wait for an event: nothing tells us
    // when a registry starts listening.
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void RegistryClient::Impl::fence_lost(const PeerEventMsg& e) {
  if (e.fence.empty()) return;
  const auto wait = std::min(kFenceWait, options.heartbeat_timeout / 4);
  const auto start = Clock::now();
  FenceOutcome out;
  try {
    out = fence(e.fence, e.pid, wait);
  } catch (const std::exception& x) {  // (memory): the control thread must go on
    out = {FenceOutcome::kFailed, x.what()};
  }
  if (out.kind == FenceOutcome::kElsewhere) return;  // most losses: nothing to word
  const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const std::string who = log::cat("rank ", e.rank, " (incarnation ", e.incarnation, ", pid ",
                                   e.pid, ", declared lost: ", e.reason, ")");
  switch (out.kind) {
    case FenceOutcome::kElsewhere:
      return;
    case FenceOutcome::kGone:
      log::debug("fence: ", who, " had already exited");
      return;
    case FenceOutcome::kExiting:
      log::debug("fence: ", who, " was already exiting; saw it exit ",
                 static_cast<int64_t>(ms * 1000), " us later, before moving to view ", e.epoch);
      return;
    case FenceOutcome::kKilled:
      log::warn("fenced ", who,
                ": it had not exited on this host; killed it with SIGKILL and saw it exit ",
                static_cast<int64_t>(ms * 1000), " us later, before moving to view ", e.epoch);
      return;
    case FenceOutcome::kNoExit:
      // (Killed: it runs no more of its own code. Under load a big
      // process's exit, its memory unmapped, can take longer than the wait.)
      log::warn("fenced ", who, ": it had not exited on this host; killed it with SIGKILL, but ",
                out.text, ": a write it had in progress in the kernel may still land after view ",
                e.epoch);
      return;
    case FenceOutcome::kFailed:
      log::warn("cannot fence ", who, " on this host: ", out.text,
                "; its writes into this host's shared memory may land after view ", e.epoch);
      return;
  }
}

void RegistryClient::Impl::apply_peer(const PeerEventMsg& e) {
  if (e.rank >= peers.world_size()) return;
  if (!e.host.empty()) peers.set_info(e.rank, e.host, e.pid);
  // Fenced before anyone here can learn that it is lost: once a thread of
  // this process acts on the new view, the lost process writes no more.
  if (e.state == PeerState::kDied && options.fence_lost_ranks) fence_lost(e);
  if ((e.state == PeerState::kDied || e.state == PeerState::kLeft) && options.on_lost) {
    try {
      options.on_lost(e.rank, e.incarnation);
    } catch (const std::exception& x) {  // (memory): the control thread must go on
      log::warn("fencing rank ", e.rank, "'s access to this rank's regions failed: ", x.what());
    }
  }
  const uint64_t before = peers.epoch();
  peers.set(e.rank, static_cast<PeerTable::State>(e.state), e.reason, e.incarnation, e.epoch);
  if (options.on_epoch && peers.epoch() != before) options.on_epoch(peers.epoch());
}

void RegistryClient::Impl::handshake(Deadline deadline) {
  HelloMsg hello{info.rank,           info.world_size,
                 detail::host_name(), static_cast<uint32_t>(::getpid()),
                 info.secret,         fence_identity()};
  write_all(make_frame(MsgType::kHello, 0, encode(hello)), deadline);
  const std::string refused = log::cat("the registry at ", address, " refused ",
                                       info.spare  ? std::string("this spare")
                                       : info.join ? std::string("this joiner")
                                                   : log::cat("rank ", info.rank),
                                       ": ");
  // A spare's WELCOME comes when a rank dies and it takes the rank's place,
  // a joiner's of a full job when a rank leaves: maybe never.
  const Deadline answer_by = info.rankless() ? kForever : deadline;
  char buf[64 * 1024];
  for (;;) {
    Frame f;
    ErrorCode code = ErrorCode::kProtocol;
    std::string problem;
    const FrameParser::Result res = parser.next(&f, &code, &problem);
    if (res == FrameParser::Result::kBad) {
      throw Error(ErrorCode::kProtocol, log::cat("the registry at ", address,
                                                 " sent a malformed reply to HELLO: ", problem));
    }
    if (res == FrameParser::Result::kFrame) {
      const auto type = static_cast<MsgType>(f.header.type);
      if (type == MsgType::kError) {
        // ERROR's layout is the same in every version, so a refusal from a
        // registry of another version is still readable.
        ErrorMsg e;
        if (!decode(f.payload, &e)) {
          throw Error(ErrorCode::kProtocol,
                      log::cat("the registry at ", address, " sent a malformed ERROR reply"));
        }
        if (e.code == ErrorCode::kAuth) {
          throw Error(ErrorCode::kAuth,
                      refused + e.text +
                          "; every rank must present this job's SLUICE_SECRET (`sluice run` sets "
                          "it for the processes it starts)");
        }
        throw Error(e.code == ErrorCode::kProtocol ? ErrorCode::kProtocol : ErrorCode::kRegistry,
                    refused + e.text);
      }
      if (f.header.version != kProtocolVersion) {
        throw Error(ErrorCode::kProtocol,
                    log::cat("protocol version mismatch: the registry at ", address,
                             " speaks version ", f.header.version, ", this process speaks version ",
                             kProtocolVersion, "; use the same sluice release everywhere"));
      }
      WelcomeMsg welcome;
      if (type != MsgType::kWelcome || !decode(f.payload, &welcome)) {
        throw Error(ErrorCode::kProtocol,
                    log::cat("the registry at ", address, " answered HELLO with a malformed ",
                             to_string(type), " message"));
      }
      if (info.rankless()) {
        if (welcome.rank >= info.world_size) {
          throw Error(
              ErrorCode::kProtocol,
              log::cat("the registry at ", address, " gave this ", info.spare ? "spare" : "joiner",
                       " rank ", welcome.rank, ", not below the world size ", info.world_size));
        }
        info.rank = welcome.rank;
      }
      for (const PeerEventMsg& p : welcome.peers) apply_peer(p);
      milliseconds limit = options.heartbeat_timeout;
      if (welcome.heartbeat_ms > 0) limit = std::min(limit, milliseconds(welcome.heartbeat_ms));
      heartbeat_interval = std::max(limit / 5, milliseconds{1});
      silence_limit = limit;
      set_tcp_liveness(fd, limit);
      return;
    }
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, remaining_ms(answer_by, milliseconds{1000}));
    if (rc < 0 && errno != EINTR) {
      throw Error(ErrorCode::kRegistry, log::cat("poll failed: ", std::strerror(errno)));
    }
    if (rc == 0 && Clock::now() >= answer_by) {
      throw Error(ErrorCode::kTimeout, log::cat("the registry at ", address,
                                                " accepted the connection but did not "
                                                "answer HELLO within ",
                                                options.connect_timeout.count(),
                                                " ms; is something else listening on that port?"));
    }
    if (rc <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 && info.spare) {
      throw Error(ErrorCode::kRegistry,
                  log::cat("the registry at ", address,
                           " closed the connection while this process waited as a spare (no rank "
                           "died, and the job ended or the registry exited)"));
    }
    if (n == 0 && info.join) {
      throw Error(ErrorCode::kRegistry,
                  log::cat("the registry at ", address,
                           " closed the connection while this process waited to join (every rank "
                           "number stayed held, and the job ended or the registry exited)"));
    }
    if (n == 0) {
      throw Error(ErrorCode::kRegistry, log::cat("the registry at ", address,
                                                 " closed the connection during HELLO; "
                                                 "check its log"));
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw Error(ErrorCode::kRegistry, log::cat("lost the registry at ", address,
                                                 " during HELLO: ", std::strerror(errno)));
    }
    parser.append(buf, static_cast<size_t>(n));
  }
}

void RegistryClient::Impl::write_all(const std::string& bytes, Deadline deadline) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n >= 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      throw Error(ErrorCode::kRegistry, log::cat("lost the registry at ", address,
                                                 ": send failed: ", std::strerror(errno)));
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline, milliseconds{1000})) == 0 &&
        Clock::now() >= deadline) {
      throw Error(ErrorCode::kTimeout, log::cat("the registry at ", address,
                                                " accepted the connection but did not read "
                                                "HELLO within ",
                                                options.connect_timeout.count(), " ms"));
    }
  }
}

void RegistryClient::Impl::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
}

// Control thread: sends what it can without blocking. False (with *problem)
// if the connection failed.
bool RegistryClient::Impl::pump_out(std::string* problem) {
  if (sending_pos == sending.size()) {
    sending.clear();
    sending_pos = 0;
    MutexLock lock(mu);
    sending.swap(outbox);
    leave_taken = leave_queued;
  }
  while (sending_pos < sending.size()) {
    const ssize_t n = ::send(fd, sending.data() + sending_pos, sending.size() - sending_pos,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sending_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    *problem = log::cat("send failed: ", n < 0 ? std::strerror(errno) : "connection closed");
    return false;
  }
  sending_left.store(sending.size() - sending_pos, std::memory_order_relaxed);
  return true;
}

bool RegistryClient::Impl::handle_frame(const Frame& f, std::string* problem) {
  if (f.header.version != kProtocolVersion) {
    *problem = log::cat("it sent a frame of protocol version ", f.header.version);
    return false;
  }
  const auto type = static_cast<MsgType>(f.header.type);
  if (type == MsgType::kPeerEvent) {
    PeerEventMsg e;
    if (!decode(f.payload, &e)) {
      *problem = "it sent a malformed PEER_EVENT";
      return false;
    }
    apply_peer(e);
    return true;
  }
  if (type == MsgType::kError && f.header.request_id == 0) {
    // Not a reply: the registry says why it is about to close on us (it
    // declared this rank lost). Kept for the failure the close brings.
    ErrorMsg e;
    if (!decode(f.payload, &e)) {
      *problem = "it sent a malformed ERROR";
      return false;
    }
    MutexLock lock(mu);
    told_why = e.text;
    return true;
  }
  MutexLock lock(mu);
  // An unknown id is a reply to a request whose caller gave up; drop it.
  if (auto it = pending.find(f.header.request_id); it != pending.end()) {
    auto on_reply = std::move(it->second);
    pending.erase(it);
    on_reply(Reply{type, f.payload, false, ""});
  }
  return true;
}

void RegistryClient::Impl::fail_all(const std::string& reason) {
  const bool shutting_down =
      stopping.load(std::memory_order_acquire) || clean_close.load(std::memory_order_acquire);
  std::string why;
  {
    MutexLock lock(mu);
    why = told_why;
  }
  std::string text = log::cat("lost the registry at ", address, ": ", reason);
  if (!why.empty()) {
    text = log::cat(why, "; the registry at ", address, " closed this rank's connection (", reason,
                    "), so this rank cannot continue");
  } else if (!shutting_down) {
    text += "; the registry process exited or the network failed, so this job cannot continue";
  }
  if (!shutting_down) {
    log::warn(text);
    peers.set_registry_lost(text);
  }
  MutexLock lock(mu);
  lost = true;
  lost_text = text;
  auto waiting = std::move(pending);
  pending.clear();
  for (auto& [id, on_reply] : waiting) on_reply(Reply{MsgType::kError, "", true, text});
}

bool RegistryClient::Impl::handle_parsed(std::string* reason) {
  for (;;) {
    Frame f;
    ErrorCode code = ErrorCode::kProtocol;
    std::string problem;
    const FrameParser::Result res = parser.next(&f, &code, &problem);
    if (res == FrameParser::Result::kNeedMore) return true;
    if (res == FrameParser::Result::kBad || !handle_frame(f, &problem)) {
      *reason = "protocol error: " + problem;
      return false;
    }
  }
}

void RegistryClient::Impl::loop() {
  char buf[64 * 1024];
  const std::string heartbeat = make_frame(MsgType::kHeartbeat, 0, "");
  Deadline next_heartbeat = Clock::now() + heartbeat_interval;
  // The registry answers every HEARTBEAT, so it is never silent for longer
  // than a heartbeat interval while it is alive and reachable.
  Deadline last_heard = Clock::now();
  Deadline last_sent = Clock::now();  // last time a byte left, or nothing was waiting
  bool write_shut = false;
  std::string reason;
  uint64_t reports_seen = signal_report::requests();
  // Frames that came in one read with WELCOME (connect() parsed only that)
  // are handled now, not when more bytes come: none may come.
  if (!handle_parsed(&reason)) {
    fail_all(reason);
    return;
  }
  for (;;) {
    // stopping is set (release) before the eventfd write; once it reads true,
    // stop_deadline is visible too.
    const bool stop = stopping.load(std::memory_order_acquire);
    const size_t before = sending_pos;
    if (!pump_out(&reason)) break;
    const bool backlog = sending_pos < sending.size();
    if (!backlog || sending_pos != before) last_sent = Clock::now();
    if (stop && !backlog && !write_shut) {
      bool empty;
      {
        MutexLock lock(mu);
        empty = outbox.empty();
      }
      if (empty) {
        // Half-close once LEAVE is out: the registry reads it, then EOF, and
        // closes its side, which ends this loop.
        ::shutdown(fd, SHUT_WR);
        write_shut = true;
      }
    }
    Deadline wake = stop ? stop_deadline
                         : std::min({next_heartbeat, last_heard + silence_limit,
                                     backlog ? last_sent + silence_limit : Deadline::max()});
    pollfd fds[2] = {{fd, static_cast<short>(POLLIN | (backlog ? POLLOUT : 0)), 0},
                     {wake_fd, POLLIN, 0}};
    const int rc = ::poll(fds, 2, remaining_ms(wake, milliseconds{1000}));
    if (rc < 0 && errno != EINTR) {
      reason = log::cat("poll failed: ", std::strerror(errno));
      break;
    }
    const Deadline now = Clock::now();
    if (stop && now >= stop_deadline) {
      // Read what the registry sent meanwhile: closing a socket with unread
      // bytes resets the connection, which may drop our LEAVE.
      while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
      }
      reason = "the client was shut down";
      break;
    }
    if (rc > 0 && fds[1].revents != 0) {
      uint64_t counter;
      [[maybe_unused]] ssize_t n = ::read(wake_fd, &counter, sizeof counter);
    }
    if (rc > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) {
        reason = "the registry closed the connection";
        // After LEAVE went out whole, the close is the registry's answer to
        // it, whether or not this loop has seen `stopping` yet.
        if (write_shut || (leave_taken && sending_pos == sending.size())) {
          clean_close.store(true, std::memory_order_release);
        }
        break;
      }
      if (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        reason = std::strerror(errno);
        break;
      }
      if (n > 0) {
        last_heard = now;
        parser.append(buf, static_cast<size_t>(n));
        if (!handle_parsed(&reason)) break;
      }
    }
    if (stop) continue;
    if (const uint64_t asked = signal_report::requests(); asked != reports_seen) {
      reports_seen = asked;
      const std::string text = signal_report::report(info.rank, "on SIGUSR1",
                                                     [this](uint32_t r) { return peers.host(r); });
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    }
    if (now - last_heard >= silence_limit) {
      reason = log::cat("it sent nothing for ", silence_limit.count(),
                        " ms, not even a heartbeat reply (it is stopped, hung or unreachable)");
      break;
    }
    if (backlog && now - last_sent >= silence_limit) {
      reason = log::cat("it accepted none of our messages for ", silence_limit.count(),
                        " ms (it is not reading, or the network is down)");
      break;
    }
    if (now >= next_heartbeat) {
      // The counters ride with the heartbeat, unless earlier bytes are
      // still waiting: a registry that reads slowly gets fewer reports,
      // never a growing queue of them.
      const std::string report = backlog ? std::string() : counters_frame(info.rank);
      MutexLock lock(mu);
      outbox += heartbeat;
      outbox += report;
      next_heartbeat = now + heartbeat_interval;
    }
  }
  fail_all(reason);
}

uint32_t RegistryClient::Impl::enqueue(MsgType type, const std::string& payload,
                                       const std::string& what,
                                       std::function<void(Reply)> on_reply) {
  uint32_t id = 0;
  {
    MutexLock lock(mu);
    if (lost) throw Error(ErrorCode::kRegistry, what + ": " + lost_text);
    const size_t queued = outbox.size() + sending_left.load(std::memory_order_relaxed);
    const size_t frame_bytes = kHeaderSize + payload.size();
    if (queued + frame_bytes > options.max_queued_bytes) {
      throw Error(
          ErrorCode::kResource,
          log::cat(
              what, ": not queued: ", queued,
              " bytes of requests are already waiting to be sent to "
              "the registry at ",
              address, " and this one (", frame_bytes, " bytes) would pass the limit of ",
              options.max_queued_bytes,
              " bytes (ClientOptions::max_queued_bytes); the registry is not reading, or too many "
              "calls are outstanding: retry once earlier calls have returned"));
    }
    id = next_id++;
    if (next_id == 0) next_id = 1;  // 0 marks frames that are not replies
    pending[id] = std::move(on_reply);
    outbox += make_frame(type, id, payload);
  }
  wake();
  return id;
}

RegistryClient::Impl::Reply RegistryClient::Impl::call(MsgType type, const std::string& payload,
                                                       Deadline deadline, const std::string& what) {
  detail::test_hooks::note_blocking_wait("a registry request");
  auto promise = std::make_shared<std::promise<Reply>>();
  std::future<Reply> reply = promise->get_future();
  const uint32_t id =
      enqueue(type, payload, what, [promise](Reply r) { promise->set_value(std::move(r)); });
  const bool bounded = deadline != kForever && deadline < Deadline::max() - kReplyGrace;
  if (!bounded) {
    reply.wait();
  } else if (reply.wait_until(deadline + kReplyGrace) == std::future_status::timeout) {
    MutexLock lock(mu);
    // The control thread may have answered in between; then take the answer.
    if (pending.erase(id) == 1) {
      throw Error(ErrorCode::kTimeout,
                  log::cat(what, ": the registry at ", address,
                           " did not answer by the deadline (it may be overloaded or hung)"));
    }
  }
  Reply r = reply.get();
  if (r.registry_lost) throw Error(ErrorCode::kRegistry, what + ": " + r.lost_text);
  if (r.type == MsgType::kError) {
    ErrorMsg e;
    if (!decode(r.payload, &e)) {
      throw Error(ErrorCode::kProtocol,
                  log::cat(what, ": the registry at ", address, " sent a malformed ERROR reply"));
    }
    throw_error(e);
  }
  return r;
}

std::string RegistryClient::Impl::reply_problem(const Reply& r, MsgType type,
                                                const std::string& what) const {
  if (r.registry_lost) return what + ": " + r.lost_text;
  if (r.type == MsgType::kError) {
    ErrorMsg e;
    if (!decode(r.payload, &e)) {
      return log::cat(what, ": the registry at ", address, " sent a malformed ERROR reply");
    }
    return e.text;
  }
  if (r.type != type) {
    return log::cat(what, ": the registry at ", address, " answered ", to_string(r.type),
                    " instead of ", to_string(type));
  }
  return {};
}

void RegistryClient::Impl::expect(const Reply& r, MsgType type, const std::string& what) {
  if (r.type != type) {
    throw Error(ErrorCode::kProtocol, log::cat(what, ": the registry at ", address, " answered ",
                                               to_string(r.type), " instead of ", to_string(type)));
  }
}

bool RegistryClient::Impl::shut_down(Deadline deadline) {
  if (!thread.joinable()) return false;
  {
    // The control thread sends LEAVE, then half-closes, and waits until
    // `deadline` for the registry to close its side.
    // The last counters go first, so the registry has this rank's final
    // totals even if its flows lived shorter than a heartbeat.
    const std::string report = counters_frame(info.rank);
    MutexLock lock(mu);
    if (!lost) {
      outbox += report + make_frame(MsgType::kLeave, 0, "");
      leave_queued = true;
    }
  }
  stop_deadline = deadline;
  stopping.store(true, std::memory_order_release);
  wake();
  thread.join();
  return clean_close.load(std::memory_order_acquire);
}

std::unique_ptr<RegistryClient> RegistryClient::connect(const BootstrapInfo& info,
                                                        const ClientOptions& options) {
  if (info.world_size == 0 || (!info.rankless() && info.rank >= info.world_size)) {
    throw Error(ErrorCode::kInvalidArgument,
                log::cat("rank ", info.rank, " is not below the world size ", info.world_size));
  }
  auto impl = std::make_unique<Impl>(info, options);
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) {
    throw Error(ErrorCode::kResource, log::cat("cannot create an eventfd: ", std::strerror(errno)));
  }
  const Deadline deadline = Clock::now() + options.connect_timeout;
  impl->open_socket(deadline);
  impl->handshake(deadline);
  log::info("rank ", impl->info.rank, " joined the job through the registry at ", impl->address,
            info.spare  ? " (as a spare, in a died rank's place)"
            : info.join ? " (as a joiner, in a free rank number)"
                        : "");
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<RegistryClient>(new RegistryClient(std::move(impl)));
}

RegistryClient::RegistryClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Never waits for the registry: LEAVE goes out if the socket takes it at
// once (it mostly does), and the registry then reports this rank as left;
// leave() is the call that waits for that.
RegistryClient::~RegistryClient() { (void)impl_->shut_down(Clock::now()); }

bool RegistryClient::leave(Deadline deadline) { return impl_->shut_down(deadline); }

uint32_t RegistryClient::rank() const { return impl_->info.rank; }
uint32_t RegistryClient::world_size() const { return impl_->info.world_size; }
PeerTable& RegistryClient::peers() { return impl_->peers; }

std::string RegistryClient::local_address() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(impl_->fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
    return {};
  }
  return host;
}

}  // namespace sluice::control
