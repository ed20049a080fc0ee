// The private state of a RegistryClient, shared by registry_client.cc (the
// connection, its control thread and the call machinery) and
// registry_client_requests.cc (what each request sends and reads back).
// Private to src/control.
//
// Thread safety: see RegistryClient::Impl's members.
#pragma once

#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/mutex.h"
#include "control/protocol.h"
#include "control/registry_client.h"

namespace sluice::control {
namespace registry_client_impl {

// Deadline -> DECLARE/GET/BARRIER timeout_ms: 0 means no limit, so a deadline
// that already passed becomes 1 ms (the registry still answers at once if it
// can, e.g. a GET of a key that exists).
inline uint64_t timeout_ms(Deadline deadline) {
  if (deadline == kForever) return 0;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<uint64_t>(std::max<int64_t>(left, 1));
}

}  // namespace registry_client_impl

struct RegistryClient::Impl {
  struct Reply {
    MsgType type = MsgType::kOk;
    std::string payload;
    bool registry_lost = false;
    std::string lost_text;
  };

  Impl(const BootstrapInfo& i, const ClientOptions& o)
      : info(i), options(o), peers(i.world_size), parser(/*check_version=*/false) {
    address = info.registry_host.find(':') != std::string::npos
                  ? log::cat("[", info.registry_host, "]:", info.registry_port)
                  : log::cat(info.registry_host, ":", info.registry_port);
  }
  ~Impl() {
    if (fd >= 0) ::close(fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void open_socket(Deadline deadline);
  int try_connect(const addrinfo* ai, Deadline deadline, std::string* error);
  void handshake(Deadline deadline);
  void apply_peer(const PeerEventMsg& e);
  // Kills the process of a rank reported died if it runs on this host, and
  // waits (at most kFenceWait, and a quarter of the heartbeat timeout) to see
  // it exit: control/fence.h.
  void fence_lost(const PeerEventMsg& e);
  static constexpr std::chrono::milliseconds kFenceWait{1000};
  void loop();
  bool handle_frame(const Frame& f, std::string* problem);
  // Handles every whole frame the parser holds; false (and *reason) on a
  // malformed one.
  bool handle_parsed(std::string* reason);
  void fail_all(const std::string& reason);
  void wake();
  void write_all(const std::string& bytes, Deadline deadline);
  bool pump_out(std::string* problem);
  Reply call(MsgType type, const std::string& payload, Deadline deadline, const std::string& what);
  // Queues a request; `on_reply` runs once, on the control thread with mu
  // held (it must not call back into the client), when the reply comes or
  // the registry is lost. Throws as call() does when it cannot be queued.
  uint32_t enqueue(MsgType type, const std::string& payload, const std::string& what,
                   std::function<void(Reply)> on_reply);
  void expect(const Reply& r, MsgType type, const std::string& what);
  // The error text of a reply that is not `type`, or empty.
  std::string reply_problem(const Reply& r, MsgType type, const std::string& what) const;
  // Sends LEAVE and half-closes, then gives the registry until `deadline` to
  // close its side; true if it did (it read everything this rank sent).
  bool shut_down(Deadline deadline);

  BootstrapInfo info;
  ClientOptions options;
  std::string address;  // "host:port", for messages
  int fd = -1;
  int wake_fd = -1;
  PeerTable peers;
  FrameParser parser;  // control thread only (and connect() before it starts)
  std::chrono::milliseconds heartbeat_interval{1000};
  // The registry is declared lost when it sends nothing (it answers every
  // HEARTBEAT) or accepts none of our bytes for this long: the smaller of our
  // heartbeat_timeout and the registry's.
  std::chrono::milliseconds silence_limit{5000};
  // Control thread only: bytes taken from `outbox` and not yet sent.
  std::string sending;
  size_t sending_pos = 0;
  // Control thread only: `sending` holds this rank's LEAVE (shut_down queued
  // it before the swap). The registry closes its side once it reads LEAVE,
  // which may be seen before `stopping` is: that EOF is a clean close too.
  bool leave_taken = false;
  // sending.size() - sending_pos, for call()'s bound on queued bytes. Written
  // by the control thread only; relaxed is enough, as the bound needs no
  // ordering with anything else (a stale value errs by one batch at most).
  std::atomic<size_t> sending_left{0};
  std::thread thread;
  std::atomic<bool> stopping{false};
  Deadline stop_deadline = kForever;  // written before the wake-up, read by the thread after
  // The registry closed its side after this rank's LEAVE and half-close.
  std::atomic<bool> clean_close{false};

  Mutex mu;  // guards everything below
  // Frames for the control thread to send: callers never write to the
  // socket themselves, so no call blocks on a registry that stopped reading.
  std::string outbox SLUICE_GUARDED_BY(mu);
  bool leave_queued SLUICE_GUARDED_BY(mu) = false;  // LEAVE is in `outbox` or was taken from it
  std::map<uint32_t, std::function<void(Reply)>> pending SLUICE_GUARDED_BY(mu);
  uint32_t next_id SLUICE_GUARDED_BY(mu) = 1;
  bool lost SLUICE_GUARDED_BY(mu) = false;
  std::string lost_text SLUICE_GUARDED_BY(mu);
  // Why the registry is closing this rank's connection, where it said so
  // (it declared this rank lost); empty otherwise.
  std::string told_why SLUICE_GUARDED_BY(mu);
};

}  // namespace sluice::control
