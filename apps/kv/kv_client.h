// apps/kv/kv_client.h: the C++ client library of the replicated store.
//
// A KvClient talks to one RESP gateway of a running store (`sluice-kv run
// --resp-port P`, resp_gateway.h) over TCP, so a program outside the job
// uses the store as it would a Redis: put, get, delete and compare-and-set,
// each with a deadline.
//
//   kv::KvClient kv("10.0.0.5", 6380);
//   auto put = kv.put("user:7", "alice", kv::within(std::chrono::milliseconds(500)));
//   if (!put.ok()) std::fprintf(stderr, "%s\n", put.error.c_str());
//   auto got = kv.get("user:7", kv::within(std::chrono::milliseconds(500)));
//   if (got.ok() && got.value) std::printf("%s\n", got.value->c_str());
//   auto swapped = kv.cas("user:7", "alice", "bob", kv::within(std::chrono::seconds(1)));
//
// Every command goes through the replicated log (linearizable: a get sees
// every put that completed before it began). What a status means:
//   kOk            the store executed the command; `value` is its result.
//   kTimeout       no answer by the deadline. The command may still take
//                  effect (it may be in the log already), so a caller that
//                  retries a put or a cas must allow for that, as with any
//                  replicated store.
//   kRefused       the store answered with an error and did not execute it
//                  (a key and value over the server's --max-value-bytes, ...); `error` says why.
//   kDisconnected  the gateway could not be reached, or closed the
//                  connection: as kTimeout, the outcome is unknown if the
//                  command had been sent.
// After kTimeout or kDisconnected the connection is dropped (a late answer
// would be taken for the next command's), and the next call connects again
// within its own deadline.
//
// One command at a time per KvClient; for several in flight, use several
// clients (the gateway serves each connection's commands in order and
// different connections' side by side).
//
// record() keeps a history of the calls for a linearizability check
// (history.h, kv-porcupine): each executed command with its result, and
// each one sent whose outcome is unknown (kTimeout, kDisconnected) as such.
//
// Thread safety: none; a KvClient belongs to one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client.h"
#include "resp.h"

namespace kv {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline within(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}

enum class CallStatus : uint8_t { kOk, kTimeout, kRefused, kDisconnected };
const char* to_string(CallStatus s);

template <class T>
struct Call {
  CallStatus status = CallStatus::kOk;
  T value{};
  std::string error;  // why, when not kOk
  bool ok() const { return status == CallStatus::kOk; }
};

class KvClient {
 public:
  // Connects on the first call (host: a name or an address).
  KvClient(std::string host, uint16_t port);
  ~KvClient();
  KvClient(const KvClient&) = delete;
  KvClient& operator=(const KvClient&) = delete;

  // The value, or nullopt when the key is absent.
  Call<std::optional<std::string>> get(std::string_view key, Deadline deadline);
  // Stores the value (value: true).
  Call<bool> put(std::string_view key, std::string_view value, Deadline deadline);
  // Deletes the key; value: whether it was there.
  Call<bool> del(std::string_view key, Deadline deadline);
  // Sets the key to `desired` if it holds `expected`; value: whether it did.
  Call<bool> cas(std::string_view key, std::string_view expected, std::string_view desired,
                 Deadline deadline);

  bool connected() const { return fd_ >= 0; }

  // From now on, appends every call to *history as client `client_id`
  // (times: microseconds of the steady clock, as sluice-kv run's own
  // history); a refused call, or one that never left, is not an operation
  // and is left out. nullptr stops it.
  void record(std::vector<Completed>* history, uint64_t client_id) {
    history_ = history;
    client_id_ = client_id;
  }

 private:
  // Sends one command and reads its reply by the deadline.
  Call<resp::Reply> command(const std::vector<std::string_view>& args, Deadline deadline);
  // command(), and the call in the history if one is recorded: `op` with its
  // result from `result` (called on kOk only).
  template <class T, class F>
  Call<T> call(const std::vector<std::string_view>& args, Op op, Deadline deadline, F result);
  // kOk, or kTimeout / kDisconnected with *why.
  CallStatus connect(Deadline deadline, std::string* why);
  void drop();

  std::string host_;
  uint16_t port_;
  int fd_ = -1;
  std::string in_;     // bytes read and not yet parsed
  bool sent_ = false;  // the last command() sent bytes of its request
  std::vector<Completed>* history_ = nullptr;
  uint64_t client_id_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace kv
