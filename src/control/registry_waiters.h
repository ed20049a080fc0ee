// The registry's waiting requests: flow declarations waiting for every
// participant, GETs waiting for a key to be put, and barrier calls waiting for
// every member, with the key/value store that GETs read. RegistryServer
// (registry_server.cc, registry_requests.cc) decodes the requests, owns the connections and the
// membership table, and hands each request here; this unit decides when a
// waiter is answered (OK, VALUE, or an error naming what is missing) and
// answers it through the Host.
//
// Every answer goes through Host::reply, which may find the connection gone or
// drop it (a reader that stopped reading): the Host must defer everything that
// follows from a dropped connection (the loss of its rank, which calls
// lose_rank() here) until the current call into Waiters has returned.
//
// Thread safety: none; the registry's one thread owns a Waiters.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "control/protocol.h"
#include "sluice/errors.h"

namespace sluice::control {

using RegistryClock = std::chrono::steady_clock;
using RegistryTime = RegistryClock::time_point;
inline constexpr RegistryTime kNever = RegistryTime::max();

// One request a client waits on: where its answer goes, and until when.
struct Waiter {
  uint64_t conn_id = 0;
  uint32_t rank = 0;
  uint32_t request_id = 0;
  uint64_t timeout_ms = 0;  // as the client asked (0: no limit), for messages
  RegistryTime deadline = kNever;
};

class Waiters {
 public:
  // What the waiter tables need from the registry around them.
  class Host {
   public:
    virtual ~Host() = default;
    // Sends the answer to the waiter's connection if it is still open.
    virtual void reply(const Waiter& w, MsgType type, const std::string& payload) = 0;
    // True if rank r left or died; true if it has never joined.
    virtual bool lost(uint32_t r) const = 0;
    // True if rank r left (it is lost, but did not die).
    virtual bool left(uint32_t r) const = 0;
    virtual bool absent(uint32_t r) const = 0;
    // "rank 3 (host1, pid 7) died: ...".
    virtual std::string describe(uint32_t r) const = 0;
    // "ranks 1,3 (rank 1 on hostA; rank 3 has not joined)".
    virtual std::string describe_missing(const std::vector<uint32_t>& missing) const = 0;
    // The membership view's epoch; its members are the ranks not lost().
    virtual uint64_t epoch_now() const = 0;
    // How many times rank r joined again after it died.
    virtual uint32_t incarnation_of(uint32_t r) const = 0;
  };

  // REQUIRES: host outlives this; world_size >= 1.
  Waiters(Host& host, uint32_t world_size) : host_(host), world_size_(world_size) {}

  // A DECLARE from w.rank: answered at once (agreement, mismatch, a lost
  // participant) or once every participant declared the same spec.
  void declare(const Waiter& w, DeclareMsg m);
  // A PUT: stores the value and answers every GET waiting for the key.
  void put(std::string key, std::string value);
  // An ERASE: removes `key` (or every key starting with it) and returns how
  // many keys went. GETs waiting for an erased key keep waiting.
  uint64_t erase(const std::string& key, bool prefix);
  // An UNDECLARE from w.rank: answered (with every other participant's) once
  // every participant of the flow undeclared it or is lost; the flow's
  // declaration and its keys ("flow/<name>/...") are gone by then.
  void undeclare(const Waiter& w, const UndeclareMsg& m);
  // A GET: answered at once if the key exists or its owner is lost, else
  // when it is put.
  void get(const Waiter& w, const GetMsg& m);
  // A BARRIER call: answered when every member made the same generation's
  // call.
  void barrier(const Waiter& w, BarrierMsg m);

  // A GATHER: refused with kViewChanged at once unless its epoch is the
  // current one; answered (GATHERED, to every member alike) once every member
  // of the view made the same call. One call of a name per rank at a time.
  void gather(const Waiter& w, GatherMsg m);
  // The view became `epoch` (after a loss, departure or rejoin): every
  // gather of the old view fails with kViewChanged, and calls count from 0
  // again in the new one.
  void view_changed(uint64_t epoch);

  // Rank r left or died (`who` describes it): fails every waiter that can no
  // longer be answered because of it and forgets those of its connection.
  void lose_rank(uint32_t r, uint64_t gone_conn, const std::string& who);
  // Rank r, lost before, joined again (a new incarnation): its calls of every
  // barrier it belongs to count from the others' count, so that its next
  // call meets theirs.
  void rejoin_rank(uint32_t r);
  // Answers every waiter whose deadline passed with a timeout naming what it
  // still waited for.
  void expire(RegistryTime now);
  // The earliest deadline of any waiter (kNever if none).
  RegistryTime next_deadline() const;

 private:
  struct FlowDecl {
    uint32_t first_rank = 0;  // whose declaration the others are compared with
    std::string canonical;
    std::vector<uint32_t> participants;  // sorted, unique
    uint64_t epoch = kUnscopedEpoch;     // the view a scoped declaration belongs to
    std::set<uint32_t> declared;
    std::vector<Waiter> waiters;
    bool complete = false;
    // UNDECLARE: the participants done with the flow, and those waiting for
    // the others.
    std::set<uint32_t> gone;
    std::vector<Waiter> undeclare_waiters;
    // DECLAREs of the name by participants done with this declaration,
    // waiting until the others are done too (then they start the next one).
    std::vector<std::pair<Waiter, DeclareMsg>> redeclares;
  };

  struct GetWaiter {
    Waiter waiter;
    std::string key;
    int64_t owner = -1;
    uint32_t owner_incarnation = kAnyIncarnation;
  };

  struct BarrierState {
    // The endpoints (rank << 32 | slot) that meet, sorted; fixed by the first call.
    std::vector<uint64_t> members;
    // Generation n holds the endpoints that made their n-th call of this barrier.
    std::map<uint64_t, std::map<uint64_t, Waiter>> generations;
    std::map<uint64_t, uint64_t> calls;  // per endpoint: calls made so far
    bool has_rank(uint32_t r) const;
  };

  void reply_error(const Waiter& w, ErrorCode code, const std::string& text,
                   uint32_t rank = kNoRank);
  std::string spec_diff(const FlowDecl& flow, uint32_t rank, const std::string& canonical,
                        const std::vector<uint32_t>& participants) const;
  std::vector<uint32_t> undeclared(const FlowDecl& flow) const;
  void complete_flow(FlowDecl& flow);
  std::vector<uint32_t> not_gone(const FlowDecl& flow) const;
  // Forgets the flow if every participant undeclared it or is lost, after
  // erasing its keys; answers the UNDECLARE waiters. Returns true if it did.
  bool forget_if_gone(std::map<std::string, FlowDecl>::iterator it);
  std::string describe_missing_endpoints(const BarrierState& b,
                                         const std::map<uint64_t, Waiter>& arrived) const;
  void complete_if_all_arrived(BarrierState& b, uint64_t gen);
  void withdraw(BarrierState& b, uint64_t endpoint, uint64_t gen);
  void expire_barrier(const std::string& name, BarrierState& b, RegistryTime now);

  // The gathers of the current view (registry_gathers.cc).
  struct GatherCall {
    Waiter waiter;
    std::string value;
  };
  struct GatherState {
    std::map<uint32_t, uint64_t> calls;  // per rank: calls made in this view
    // Generation n: the ranks that made their n-th call, with their values.
    std::map<uint64_t, std::map<uint32_t, GatherCall>> generations;
  };
  std::vector<uint32_t> view_members() const;
  void complete_gather_if_all(const std::string& name, GatherState& g, uint64_t gen);
  void expire_gathers(RegistryTime now);

  Host& host_;
  uint32_t world_size_;
  std::map<std::string, FlowDecl> flows_;
  std::map<std::string, std::string> kv_;
  std::vector<GetWaiter> gets_;
  std::map<std::string, BarrierState> barriers_;
  std::map<std::string, GatherState> gathers_;
};

}  // namespace sluice::control
