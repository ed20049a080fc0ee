// RegionAccess: a peer's handle to another rank's region (over shm, a
// mapping; over ofi, RMA and atomics or the owner's service). The owner's
// side is region_owner.cc.
#include "memory/region.h"

#include <rdma/fi_errno.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/hex.h"
#include "common/log.h"
#include "common/random.h"
#include "common/test_hooks.h"
#include "control/registry_client.h"
#include "transport/ofi/fabric_lib.h"
#include "wire/layout.h"

namespace sluice::detail {
namespace {

// How long a failed access or open waits for the registry to confirm that
// the region's owner is gone before it reports the failure as something else.
constexpr auto kLossConfirmation = std::chrono::milliseconds(1000);

// True if incarnation `incarnation` of `owner` is (or, by `until`, is
// confirmed) gone, or the registry is.
bool owner_lost(const control::PeerTable& peers, uint32_t owner, uint32_t incarnation,
                Clock::time_point until) {
  for (;;) {
    if (peers.registry_lost() || !peers.alive_as(owner, incarnation)) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

using region_layout::Header;
using region_layout::ServiceMessage;

// A peer's staging buffer for RMA reads and writes: larger accesses go in
// pieces of this size.
constexpr size_t kBounceBytes = 64 * 1024;
// A waiting peer polls its completion queue spin_polls_ times
// (set_spin_polls; an operation over tcp takes tens of microseconds), then
// this many times with sched_yield() between polls, then every kNap.
constexpr uint32_t kYieldPolls = 20000;
constexpr auto kNap = std::chrono::microseconds(50);
// The while-waiting hook runs every this many polls (a power of two). On
// every poll, an ordered 2x2 flow over tcp measured slower (0.71 of
// unordered against 0.77 without the hook): each call is a system call of
// its own on a machine whose every core is busy; every fourth kept 1x1's
// gain (0.75 -> 1.0) and 2x2 where it was (bench/results/history.md).
constexpr uint32_t kWhileWaitingEvery = 4;

}  // namespace

// ---------------------------------------------------------------- access

Status RegionAccess::fail(Status s, const std::string& what) {
  error_ = what;
  return s;
}

std::string RegionAccess::what() const {
  return "region '" + name_ + "' of rank " + std::to_string(owner_);
}

Status RegionAccess::check_range(uint64_t offset, size_t len, bool atomic) {
  if (offset > bytes_ || len > bytes_ - offset) {
    return fail(Status::kInvalid, what() + ": bytes [" + std::to_string(offset) + ", " +
                                      std::to_string(offset + len) + ") lie outside its " +
                                      std::to_string(bytes_) + " bytes");
  }
  if (atomic && offset % 8 != 0) {
    return fail(Status::kInvalid, what() + ": atomic at offset " + std::to_string(offset) +
                                      ", which is not a multiple of 8");
  }
  return Status::kOk;
}

namespace {

class ShmAccess final : public RegionAccess {
 public:
  ShmAccess(std::string name, uint32_t owner, size_t bytes, SharedRegion map,
            const control::PeerTable* peers)
      : RegionAccess(std::move(name), owner, bytes),
        map_(std::move(map)),
        peers_(peers),
        incarnation_(peers != nullptr ? peers->incarnation(owner) : 0) {}

  Status read(uint64_t offset, std::byte* out, size_t len, Deadline) override {
    if (Status s = check(offset, len, false); s != Status::kOk) return s;
    std::memcpy(out, data() + offset, len);
    // Done before the next operation (memory.h), as the write below.
    std::atomic_thread_fence(std::memory_order_acquire);
    return Status::kOk;
  }
  Status write(uint64_t offset, const std::byte* in, size_t len, Deadline) override {
    if (Status s = check(offset, len, false); s != Status::kOk) return s;
    std::memcpy(data() + offset, in, len);
    // Done before the next operation (memory.h): a later read must not pass
    // these stores in the store buffer (x86 store->load).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return Status::kOk;
  }
  Status compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired, uint64_t* previous,
                          Deadline) override {
    if (Status s = check(offset, 8, true); s != Status::kOk) return s;
    word(offset).compare_exchange_strong(expected, desired);
    *previous = expected;
    return Status::kOk;
  }
  Status fetch_add(uint64_t offset, uint64_t delta, uint64_t* previous, Deadline) override {
    if (Status s = check(offset, 8, true); s != Status::kOk) return s;
    *previous = word(offset).fetch_add(delta);
    return Status::kOk;
  }
  const char* path() const override { return "shm"; }

 private:
  std::byte* data() const { return map_.data() + region_layout::kDataOffset; }
  std::atomic_ref<uint64_t> word(uint64_t offset) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(data() + offset));
  }
  Status check(uint64_t offset, size_t len, bool atomic) {
    // Acquire: pairs with the owner's release store in revoke().
    if (reinterpret_cast<const Header*>(map_.data())->revoked.load(std::memory_order_acquire) !=
        0) {
      return fail(Status::kClosed, what() + " was revoked by its owner");
    }
    // The mapping outlives a dead owner, but what it held is no longer
    // anyone's: memory.h promises kPeerLost, as over ofi. (One relaxed-cost
    // load of the peer table's state word per operation.)
    if (peers_ != nullptr &&
        (!peers_->alive_as(owner(), incarnation_) || peers_->registry_lost())) {
      return fail(Status::kPeerLost, what() + ": " + peers_->describe_as(owner(), incarnation_));
    }
    return check_range(offset, len, atomic);
  }

  SharedRegion map_;
  const control::PeerTable* peers_;
  uint32_t incarnation_;  // the owner's when the region was opened
};

class OfiAccess final : public RegionAccess {
 public:
  OfiAccess(std::string name, uint32_t owner, size_t bytes, const ofi::Config& cfg,
            const std::string& address, const std::string& caps, uint64_t base, uint64_t nonce,
            uint64_t who, const control::PeerTable* peers)
      : RegionAccess(std::move(name), owner, bytes),
        base_(base),
        nonce_(nonce),
        who_(who),
        peers_(peers),
        incarnation_(peers != nullptr ? peers->incarnation(owner) : 0) {
    // The owner decided how atomics go, for every rank: follow it, whatever
    // this rank's SLUICE_OFI_ATOMIC says (mixing the NIC's atomics with the
    // service's CPU atomics on one word would not be atomic).
    ofi::Config c = cfg;
    c.region = true;
    c.allow_atomic = caps == "atomic";
    c.require_atomic = false;  // checked below, against the owner's choice
    if (caps == "atomic") c.allow_rma = true;
    ep_ = std::make_unique<ofi::Endpoint>(c);
    if (caps == "atomic" && !ep_->atomic()) {
      throw Error(ErrorCode::kResource, what() +
                                            " uses the provider's 64-bit atomics (its owner "
                                            "decided so for every rank), but provider " +
                                            ep_->provider_name() +
                                            " offers this rank none; run every rank on the same "
                                            "provider, or set SLUICE_OFI_ATOMIC=off on "
                                            "the owner");
    }
    peer_ = ep_->insert(address);
    native_rma_ = caps != "msg" && ep_->rma();
    native_atomic_ = caps == "atomic";
    // Memory the provider may still touch after this handle is gone (an
    // abandoned endpoint's operations never finish) belongs to the endpoint.
    bufs_ = ep_->allocate_array<Buffers>(1);
    bufs_mr_ = ep_->register_memory(bufs_, sizeof(Buffers), FI_READ | FI_WRITE | FI_SEND | FI_RECV);
  }
  bool ends_with_wait() const override { return !broken_ && client_ >= 0; }
  ~OfiAccess() override {
    if (!broken_ && client_ >= 0) say_bye();
    // Operations may still be in flight towards an owner that died or never
    // answered: see ofi::Endpoint::abandon().
    if (broken_) ep_->abandon();
  }

  Status read(uint64_t offset, std::byte* out, size_t len, Deadline deadline) override {
    if (Status s = ready(offset, len, false, deadline); s != Status::kOk) return s;
    const size_t chunk = native_rma_ ? kBounceBytes : region_layout::kServicePayload;
    for (size_t done = 0; done < len;) {
      const size_t n = std::min(chunk, len - done);
      if (native_rma_) {
        Status s = run(deadline, [&] {
          return ep_->read(bufs_->bounce, n, bufs_mr_.desc, peer_, base_ + offset + done, key_,
                           &bufs_->ctx);
        });
        if (s != Status::kOk) return s;
        std::memcpy(out + done, bufs_->bounce, n);
      } else {
        ServiceMessage rep;
        if (Status s = call(region_layout::kRead, offset + done, n, 0, 0, nullptr, &rep, deadline);
            s != Status::kOk) {
          return s;
        }
        std::memcpy(out + done, bufs_->reply + sizeof(ServiceMessage), n);
      }
      done += n;
    }
    return Status::kOk;
  }

  Status write(uint64_t offset, const std::byte* in, size_t len, Deadline deadline) override {
    if (Status s = ready(offset, len, false, deadline); s != Status::kOk) return s;
    const size_t chunk = native_rma_ ? kBounceBytes : region_layout::kServicePayload;
    for (size_t done = 0; done < len;) {
      const size_t n = std::min(chunk, len - done);
      if (native_rma_) {
        std::memcpy(bufs_->bounce, in + done, n);
        Status s = run(deadline, [&] {
          return ep_->write(bufs_->bounce, n, bufs_mr_.desc, peer_, base_ + offset + done, key_,
                            &bufs_->ctx);
        });
        if (s != Status::kOk) return s;
      } else {
        ServiceMessage rep;
        if (Status s =
                call(region_layout::kWrite, offset + done, n, 0, 0, in + done, &rep, deadline);
            s != Status::kOk) {
          return s;
        }
      }
      done += n;
    }
    return Status::kOk;
  }

  Status compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired, uint64_t* previous,
                          Deadline deadline) override {
    if (Status s = ready(offset, 8, true, deadline); s != Status::kOk) return s;
    if (!native_atomic_) {
      ServiceMessage rep;
      if (Status s =
              call(region_layout::kCas, offset, 0, expected, desired, nullptr, &rep, deadline);
          s != Status::kOk) {
        return s;
      }
      *previous = rep.a;
      return Status::kOk;
    }
    uint64_t* w = bufs_->words;
    w[0] = desired;
    w[1] = expected;
    Status s = run(deadline, [&] {
      return ep_->compare_swap(&w[0], &w[1], &w[2], bufs_mr_.desc, peer_, base_ + offset, key_,
                               &bufs_->ctx);
    });
    if (s == Status::kOk) *previous = w[2];
    return s;
  }

  Status fetch_add(uint64_t offset, uint64_t delta, uint64_t* previous,
                   Deadline deadline) override {
    if (Status s = ready(offset, 8, true, deadline); s != Status::kOk) return s;
    if (!native_atomic_) {
      ServiceMessage rep;
      if (Status s = call(region_layout::kFetchAdd, offset, 0, delta, 0, nullptr, &rep, deadline);
          s != Status::kOk) {
        return s;
      }
      *previous = rep.a;
      return Status::kOk;
    }
    uint64_t* w = bufs_->words;
    w[0] = delta;
    Status s = run(deadline, [&] {
      return ep_->fetch_add(&w[0], &w[2], bufs_mr_.desc, peer_, base_ + offset, key_, &bufs_->ctx);
    });
    if (s == Status::kOk) *previous = w[2];
    return s;
  }

  const char* path() const override {
    if (native_atomic_) return "ofi";
    return native_rma_ ? "ofi (emulated atomics)" : "ofi (emulated)";
  }

 private:
  // Everything the provider reads or writes for this handle, in one
  // endpoint-owned registration.
  struct Buffers {
    std::byte bounce[kBounceBytes];
    std::byte request[region_layout::kServiceMessageBytes];
    std::byte reply[region_layout::kServiceMessageBytes];
    alignas(8) uint64_t words[4];
    fi_context2 ctx, reply_ctx;
  };

  // The handle usable, the range in bounds, and before the first provider
  // operation this client's key (HELLO).
  Status ready(uint64_t offset, size_t len, bool atomic, Deadline deadline) {
    if (broken_) {
      return fail(Status::kPeerLost,
                  what() + ": this handle is unusable after an earlier failure: " + broken_why_);
    }
    if (Status s = check_range(offset, len, atomic); s != Status::kOk) return s;
    if (client_ < 0 && (atomic ? native_atomic_ : native_rma_)) return hello(deadline);
    return Status::kOk;
  }

  // Posts one operation (retrying while the provider is busy) and waits
  // for its completion.
  template <class Post>
  Status run(Deadline deadline, Post&& post) {
    done_[0] = false;
    if (Status s = post_op(deadline, post); s != Status::kOk) return s;
    return wait({&bufs_->ctx}, deadline);
  }

  // A provider whose queue to a lost owner never drains (its connection
  // gone) keeps refusing with -FI_EAGAIN: after the spin, the owner's
  // liveness is checked between attempts as wait() checks it, or a write
  // with no deadline would retry forever.
  template <class Post>
  Status post_op(Deadline deadline, Post&& post) {
    for (uint32_t i = 0;; ++i) {
      const ssize_t rc = test_hooks::region_post_refused() ? -FI_EAGAIN : post();
      if (rc == 0) return Status::kOk;
      if (rc != -FI_EAGAIN) {
        return fail(Status::kPeerLost, what() + ": libfabric refused the operation: " +
                                           ofi::lib::strerror(static_cast<int>(-rc)));
      }
      if (Status s = poll_once(deadline, i >= spin_polls_); s != Status::kOk) return s;
      if (Status s = check_owner(i); s != Status::kOk) return s;
    }
  }

  // kPeerLost (the handle broken) once `polls` passed the spin and the
  // owner's incarnation is gone; kOk otherwise.
  Status check_owner(uint32_t polls) {
    if (polls < spin_polls_ || peers_ == nullptr || peers_->alive_as(owner_, incarnation_))
      return Status::kOk;
    broken_ = true;
    broken_why_ = peers_->describe_as(owner_, incarnation_);
    return fail(Status::kPeerLost, what() + ": " + broken_why_);
  }

  // One emulated request and its answer; says HELLO first, and again once
  // if the service no longer knows this client (it evicted it).
  // HELLO: this handle becomes a client of the owner's service, with its
  // number, its token and its own key for provider operations.
  Status hello(Deadline deadline) {
    ServiceMessage rep;
    const std::string me = ep_->address();
    client_ = 0;  // for the hello itself; the answer says the real number
    token_ = 0;
    if (Status s = exchange(region_layout::kHello, 0, me.size(), nonce_, who_,
                            reinterpret_cast<const std::byte*>(me.data()), &rep, deadline);
        s != Status::kOk) {
      client_ = -1;
      return s;
    }
    if (rep.status != region_layout::kServed) {
      client_ = -1;
      return served(rep);
    }
    client_ = static_cast<int64_t>(rep.a);
    token_ = rep.b;
    key_ = rep.offset;
    return Status::kOk;
  }

  Status call(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b,
              const std::byte* data, ServiceMessage* rep, Deadline deadline) {
    for (int attempt = 0;; ++attempt) {
      if (client_ < 0) {
        if (Status s = hello(deadline); s != Status::kOk) return s;
      }
      if (Status s = exchange(op, offset, len, a, b, data, rep, deadline); s != Status::kOk)
        return s;
      if (rep->status == region_layout::kUnknownClient && attempt == 0) {
        client_ = -1;
        continue;
      }
      return served(*rep);
    }
  }

  Status served(const ServiceMessage& rep) {
    switch (rep.status) {
      case region_layout::kServed:
        return Status::kOk;
      case region_layout::kRevoked:
        return fail(Status::kClosed, what() + " was revoked by its owner");
      case region_layout::kOutOfBounds:
        return fail(Status::kInvalid, what() + ": the owner refused an access out of bounds");
      case region_layout::kNotEmulated:
        return fail(Status::kInvalid,
                    what() +
                        ": the owner refused an emulated atomic (the region uses the "
                        "provider's atomics)");
      case region_layout::kFenced:
        broken_ = true;
        broken_why_ = "the job declared this rank lost";
        return fail(Status::kPeerLost,
                    what() +
                        ": the owner refuses this process: the job declared this rank lost "
                        "(fenced; it goes on without it)");
      case region_layout::kWrongRegion:
        return fail(Status::kClosed,
                    what() +
                        " is gone: its descriptor is stale (the owner's endpoint now "
                        "serves another region)");
      case region_layout::kUnknownClient:
        return fail(Status::kInvalid,
                    what() + ": the owner's region service does not know this handle");
      default:
        return fail(Status::kInvalid, what() + ": the owner did not understand the request");
    }
  }

  void fill_request(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b,
                    ServiceMessage* req) {
    *req = ServiceMessage{};
    req->magic = region_layout::kServiceMagic;
    req->op = op;
    req->client = static_cast<uint32_t>(client_);
    req->len = static_cast<uint32_t>(len);
    req->id = ++next_id_;
    req->offset = offset;
    req->a = a;
    req->b = b;
    req->token = token_;
    std::memcpy(bufs_->request, req, sizeof(*req));
  }

  // Sends one request and waits for its answer (the answer's status is the
  // caller's to interpret).
  Status exchange(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b,
                  const std::byte* data, ServiceMessage* rep, Deadline deadline) {
    ServiceMessage req;
    fill_request(op, offset, len, a, b, &req);
    const bool carries = op == region_layout::kWrite || op == region_layout::kHello;
    if (carries && len > 0) std::memcpy(bufs_->request + sizeof(req), data, len);
    done_[0] = done_[1] = false;
    if (Status s = post_op(deadline,
                           [&] {
                             return ep_->trecv(bufs_->reply, region_layout::kServiceMessageBytes,
                                               bufs_mr_.desc, region_layout::kTagReply,
                                               &bufs_->reply_ctx);
                           });
        s != Status::kOk) {
      return s;
    }
    if (Status s = post_op(deadline,
                           [&] {
                             return ep_->tsend(bufs_->request, sizeof(req) + (carries ? len : 0),
                                               bufs_mr_.desc, peer_, region_layout::kTagRequest,
                                               &bufs_->ctx);
                           });
        s != Status::kOk) {
      broken_ = true;
      broken_why_ = error_;
      return s;
    }
    if (Status s = wait({&bufs_->ctx, &bufs_->reply_ctx}, deadline); s != Status::kOk) return s;
    std::memcpy(rep, bufs_->reply, sizeof(*rep));
    if (rep->magic != region_layout::kServiceMagic || rep->id != req.id) {
      broken_ = true;
      broken_why_ = "a malformed answer";
      return fail(Status::kPeerLost, what() + ": the owner sent a malformed answer");
    }
    return Status::kOk;
  }

  // Tells the service this client is done, so it frees the client's entry.
  // Best effort: an owner that does not take it evicts the entry later.
  void say_bye() {
    test_hooks::note_blocking_wait("a region handle saying goodbye to its owner");
    ServiceMessage req;
    fill_request(region_layout::kBye, 0, 0, 0, 0, &req);
    const Deadline deadline = Clock::now() + std::chrono::milliseconds(200);
    done_[0] = false;
    if (post_op(deadline,
                [&] {
                  return ep_->tsend(bufs_->request, sizeof(req), bufs_mr_.desc, peer_,
                                    region_layout::kTagRequest, &bufs_->ctx);
                }) != Status::kOk ||
        wait({&bufs_->ctx}, deadline) != Status::kOk) {
      broken_ = true;  // the send may still be in flight
    }
  }

  // Reads completions once; marks ours done.
  Status poll_once(Deadline deadline, bool block = false) {
    fi_cq_data_entry e[8];
    std::string err;
    void* failed = nullptr;
    // Never sleeps on the completion queue's wait object: over tcp;ofi_rxm
    // the answer to an atomic or read does not always wake it, and a
    // blocked wait then costs its whole slice. Yields instead, then naps.
    if (block) {
      if (++idle_polls_ < kYieldPolls) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(kNap);
      }
    } else {
      idle_polls_ = 0;
    }
    const ssize_t n = ep_->poll(e, 8, &err, &failed);
    if (n < 0) return failed_op(err, deadline);
    for (ssize_t i = 0; i < n; ++i) {
      if (e[i].op_context == &bufs_->ctx) done_[0] = true;
      if (e[i].op_context == &bufs_->reply_ctx) done_[1] = true;
    }
    if (Clock::now() >= deadline) {
      broken_ = true;
      broken_why_ = "an operation timed out";
      return fail(Status::kTimeout, what() + ": deadline passed before the operation completed");
    }
    return Status::kOk;
  }

  Status failed_op(const std::string& err, Deadline deadline) {
    // A transport error usually comes before the registry's word that the
    // owner died: wait for that word a little before calling it a refusal.
    if (peers_ != nullptr &&
        owner_lost(*peers_, owner_, incarnation_,
                   std::min<Clock::time_point>(deadline, Clock::now() + kLossConfirmation))) {
      broken_ = true;
      broken_why_ = err;
      return fail(Status::kPeerLost,
                  what() + ": " + err + " (" + peers_->describe_as(owner_, incarnation_) + ")");
    }
    // The owner is alive and refused the access: its key is gone.
    return fail(Status::kClosed,
                what() + " refused the access (" + err + "): it was revoked by its owner");
  }

  Status wait(std::initializer_list<const fi_context2*> ops, Deadline deadline) {
    auto all_done = [&] {
      for (const fi_context2* c : ops) {
        if (c == &bufs_->ctx && !done_[0]) return false;
        if (c == &bufs_->reply_ctx && !done_[1]) return false;
      }
      return true;
    };
    for (uint32_t i = 0; !all_done(); ++i) {
      if (Status s = poll_once(deadline, i >= spin_polls_); s != Status::kOk) {
        if (s == Status::kClosed && !all_done()) {
          // A refused access fails only its own operation; a reply receive
          // posted beside it is still pending and is cancelled with the handle.
          broken_ = ops.size() > 1;
          broken_why_ = error_;
        }
        return s;
      }
      if ((i & (kWhileWaitingEvery - 1)) == kWhileWaitingEvery - 1 && !all_done()) while_waiting();
      if (Status s = check_owner(i); s != Status::kOk) return s;
    }
    return Status::kOk;
  }

  std::unique_ptr<ofi::Endpoint> ep_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t key_ = 0;  // this client's, from HELLO
  uint64_t base_ = 0;
  uint64_t nonce_ = 0;  // the region's, which HELLO presents
  uint64_t who_ = 0;    // HELLO's `b` (region.h)
  const control::PeerTable* peers_;
  uint32_t incarnation_;  // the owner's when the region was opened
  bool native_rma_ = false;
  bool native_atomic_ = false;
  Buffers* bufs_ = nullptr;  // owned by ep_
  ofi::Memory bufs_mr_;
  bool done_[2] = {false, false};
  uint32_t idle_polls_ = 0;
  int64_t client_ = -1;
  uint64_t token_ = 0;
  uint64_t next_id_ = 0;
  bool broken_ = false;
  std::string broken_why_;
};

}  // namespace

std::unique_ptr<RegionAccess> RegionAccess::open(const std::string& name, uint32_t owner,
                                                 const std::string& descriptor,
                                                 const std::string& host_id, const ofi::Config& cfg,
                                                 const control::PeerTable* peers, uint64_t who) {
  std::istringstream in(descriptor);
  std::string mode;
  unsigned long long bytes = 0;
  auto malformed = [&] {
    return Error(ErrorCode::kProtocol, "region '" + name + "' of rank " + std::to_string(owner) +
                                           " has a malformed descriptor '" + descriptor + "'");
  };
  if (!(in >> mode >> bytes)) throw malformed();
  if (mode == "shm") {
    long long pid = 0, fd = -1;
    unsigned long long nonce = 0;
    std::string their_host;
    if (!(in >> pid >> fd >> nonce >> their_host) || pid <= 0 || fd < 0) throw malformed();
    if (their_host != host_id) {
      throw Error(ErrorCode::kInvalidArgument,
                  "region '" + name + "' of rank " + std::to_string(owner) +
                      " is reachable over shared memory only, from its own host");
    }
    SharedRegion map;
    try {
      map = SharedRegion::open_peer(static_cast<pid_t>(pid), static_cast<int>(fd),
                                    region_layout::mapped_bytes(bytes), nonce);
    } catch (const Error& e) {
      // e.what() starts with its code's name; the message says it again.
      const std::string why = e.what();
      const size_t colon = why.find(": ");
      const std::string text = "region '" + name + "' of rank " + std::to_string(owner) + ": " +
                               (colon == std::string::npos ? why : why.substr(colon + 2));
      // The usual cause is an owner that has exited: say so as a lost peer,
      // at once if the process that published the descriptor is gone (the
      // rank may already be back as a new incarnation, which the registry
      // counts alive), else once the registry confirms it.
      if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        throw PeerLostError(owner, text + " (its process " + std::to_string(pid) +
                                       ", which exposed it, has exited)");
      }
      if (peers != nullptr &&
          owner_lost(*peers, owner, peers->incarnation(owner), Clock::now() + kLossConfirmation)) {
        throw PeerLostError(owner, text + " (" + peers->describe(owner) + ")");
      }
      throw Error(e.code(), text);
    }
    const auto* h = reinterpret_cast<const Header*>(map.data());
    if (h->magic != region_layout::kMagic || h->bytes != bytes) throw malformed();
    return std::make_unique<ShmAccess>(name, owner, bytes, std::move(map), peers);
  }
  if (mode == "ofi") {
    std::string hex, caps, address;
    unsigned long long key = 0, base = 0, nonce = 0;
    if (!(in >> hex >> caps >> key >> base >> nonce) || !from_hex(hex, &address) ||
        address.empty() || (caps != "atomic" && caps != "rma" && caps != "msg")) {
      throw malformed();
    }
    return std::make_unique<OfiAccess>(name, owner, bytes, cfg, address, caps, base, nonce, who,
                                       peers);
  }
  throw malformed();
}

}  // namespace sluice::detail
