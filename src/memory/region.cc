#include "memory/region.h"

#include <rdma/fi_errno.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/hex.h"
#include "common/log.h"
#include "common/random.h"
#include "control/registry_client.h"
#include "flow/layout.h"

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

// Request buffers the owner's service keeps posted.
constexpr uint32_t kServiceSlots = 8;
// How often the service thread looks at stop and revoke requests.
constexpr auto kServiceSlice = std::chrono::milliseconds(20);
// A peer's staging buffer for RMA reads and writes: larger accesses go in
// pieces of this size.
constexpr size_t kBounceBytes = 64 * 1024;
// Completion polls before a waiting peer blocks on its completion queue (an
// operation over tcp takes tens of microseconds).
constexpr uint32_t kSpinPolls = 2000;
// Then this many polls with sched_yield() between them, then polls every kNap.
constexpr uint32_t kYieldPolls = 20000;
constexpr auto kNap = std::chrono::microseconds(50);

size_t mapped_bytes(size_t bytes) { return region_layout::kDataOffset + layout::round_up(std::max<size_t>(bytes, 8), 64); }

}  // namespace

// ---------------------------------------------------------------- owner

struct RegionOwner::ServiceBuffers {
  std::byte requests[kServiceSlots][region_layout::kServiceMessageBytes];
  std::byte replies[kServiceSlots][region_layout::kServiceMessageBytes];
  fi_context2 recv_ctx[kServiceSlots];
  fi_context2 send_ctx[kServiceSlots];
};

RegionOwner::RegionOwner(std::string name, size_t bytes, bool use_ofi, const ofi::Config& cfg,
                         const std::string& host_id, size_t max_clients)
    : name_(std::move(name)), bytes_(bytes), max_clients_(std::max<size_t>(max_clients, 1)) {
  mem_ = SharedRegion::create("region:" + name_, mapped_bytes(bytes));
  Header* h = header();
  h->magic = region_layout::kMagic;
  h->bytes = bytes;
  h->revoked.store(0, std::memory_order_relaxed);
  if (!use_ofi) {
    descriptor_ = "shm " + std::to_string(bytes) + " " + std::to_string(::getpid()) + " " +
                  std::to_string(mem_.fd()) + " " + std::to_string(mem_.nonce()) + " " + host_id;
    return;
  }
  ofi::Config c = cfg;
  c.region = true;
  ep_ = std::make_unique<ofi::Endpoint>(c);
  if (ep_->rma()) mr_ = ep_->register_memory(data(), bytes_, FI_REMOTE_READ | FI_REMOTE_WRITE);
  native_atomics_ = ep_->atomic();
  bufs_ = ep_->allocate_array<ServiceBuffers>(1);
  bufs_mr_ = ep_->register_memory(bufs_, sizeof(ServiceBuffers), FI_SEND | FI_RECV);
  for (uint32_t i = 0; i < kServiceSlots; ++i) post_request_receive(i);
  const char* caps = native_atomics_ ? "atomic" : ep_->rma() ? "rma" : "msg";
  descriptor_ = "ofi " + std::to_string(bytes) + " " + to_hex(ep_->address()) + " " + caps + " " +
                std::to_string(mr_.key) + " " + std::to_string(mr_.base) + " " +
                std::to_string(mem_.nonce()) + " " + host_id;
  log::info("region '", name_, "': ", bytes, " bytes on ", ep_->provider_name(), " (", caps, ")");
  service_ = std::thread([this] { serve(); });
}

RegionOwner::~RegionOwner() {
  if (on_destroy_) on_destroy_();
  revoke();
  stop_.store(true);
  if (service_.joinable()) service_.join();
  ep_.reset();
}

void RegionOwner::revoke() {
  // Release: pairs with the peers' acquire load before every shm access and
  // with the service thread's load before it serves a request.
  header()->revoked.store(1, std::memory_order_release);
  if (ep_ == nullptr || !service_.joinable()) return;
  revoke_requested_.store(true);
  // The service thread owns the endpoint; it closes the registration at its
  // next slice.
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (!revoke_done_.load() && Clock::now() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void RegionOwner::post_request_receive(uint32_t slot) {
  ssize_t rc;
  while ((rc = ep_->trecv(bufs_->requests[slot], region_layout::kServiceMessageBytes, bufs_mr_.desc,
                          region_layout::kTagRequest, &bufs_->recv_ctx[slot])) == -FI_EAGAIN) {
    fi_cq_data_entry e[1];
    std::string err;
    if (ep_->poll(e, 0, &err, nullptr) < 0) break;
  }
  if (rc != 0 && rc != -FI_EAGAIN) {
    log::warn("region '", name_, "': cannot post a request receive: ", fi_strerror(static_cast<int>(-rc)));
  }
}

void RegionOwner::serve() {
  fi_cq_data_entry e[16];
  fi_addr_t from[16];
  while (!stop_.load(std::memory_order_relaxed)) {
    if (revoke_requested_.load() && !revoke_done_.load()) {
      ep_->unregister(mr_);
      revoke_done_.store(true);
    }
    std::string err;
    void* failed = nullptr;
    const ssize_t n = ep_->wait_from(e, from, 16, kServiceSlice, &err, &failed);
    if (n < 0) {
      // A reply to a peer that is gone, or a request that broke off: the
      // slot goes back to receiving.
      for (uint32_t i = 0; i < kServiceSlots; ++i) {
        if (failed == &bufs_->send_ctx[i] || failed == &bufs_->recv_ctx[i]) post_request_receive(i);
      }
      log::debug("region '", name_, "': ", err);
      continue;
    }
    for (ssize_t j = 0; j < n; ++j) {
      for (uint32_t i = 0; i < kServiceSlots; ++i) {
        if (e[j].op_context == &bufs_->recv_ctx[i]) handle_request(i, e[j].len, from[j]);
        if (e[j].op_context == &bufs_->send_ctx[i]) post_request_receive(i);
      }
    }
  }
}

bool RegionOwner::is_client(fi_addr_t addr) const {
  return std::any_of(clients_.begin(), clients_.end(),
                     [&](const Client& c) { return c.token != 0 && c.addr == addr; });
}

RegionOwner::Client* RegionOwner::client_of(uint32_t id, uint64_t token, fi_addr_t source) {
  if (id >= clients_.size()) return nullptr;
  Client& c = clients_[id];
  if (c.token == 0 || c.token != token) return nullptr;
  // Where the provider names senders, the token must come from its client's
  // address too; FI_ADDR_NOTAVAIL means the provider could not say.
  if (ep_->knows_sources() && source != FI_ADDR_NOTAVAIL && source != c.addr) return nullptr;
  c.last_used = ++clock_;
  return &c;
}

// A client number for a new client at `addr`: a free one, a new one while
// under the bound, else the least recently used one's.
uint32_t RegionOwner::admit(fi_addr_t addr) {
  size_t pick = clients_.size();
  bool known = false;
  for (size_t i = 0; i < clients_.size(); ++i) {
    if (clients_[i].token != 0 && clients_[i].addr == addr) {
      pick = i;  // one client per address: it starts over with a new token
      known = true;
      break;
    }
    if (clients_[i].token == 0 && pick == clients_.size()) pick = i;
  }
  if (pick == clients_.size() && clients_.size() >= max_clients_) {
    pick = 0;
    for (size_t i = 1; i < clients_.size(); ++i) {
      if (clients_[i].last_used < clients_[pick].last_used) pick = i;
    }
    log::debug("region '", name_, "': evicting client ", pick, " (", max_clients_, " clients)");
    // Its address stays known a while, so that its next request can be
    // answered UNKNOWN_CLIENT rather than dropped.
    retire(clients_[pick].addr);
    clients_[pick] = Client{};
    live_clients_.fetch_sub(1, std::memory_order_relaxed);
  }
  // An address coming back is a client again, not a retired one.
  for (auto it = retired_.begin(); it != retired_.end(); ++it) {
    if (*it == addr) {
      retired_.erase(it);
      break;
    }
  }
  if (pick == clients_.size()) clients_.emplace_back();
  Client& c = clients_[pick];
  c.addr = addr;
  do {
    c.token = random_u64();
  } while (c.token == 0);
  c.last_used = ++clock_;
  if (!known) live_clients_.fetch_add(1, std::memory_order_relaxed);
  return static_cast<uint32_t>(pick);
}

// Keeps `addr` in the address vector until max_clients_ later addresses
// were retired too.
void RegionOwner::retire(fi_addr_t addr) {
  retired_.push_back(addr);
  if (retired_.size() > max_clients_) {
    ep_->remove(retired_.front());
    retired_.pop_front();
  }
}

void RegionOwner::forget(Client& c) {
  if (c.token == 0) return;
  if (!ep_->remove(c.addr))
    log::debug("region '", name_, "': the provider kept a departed client's address");
  c = Client{};
  live_clients_.fetch_sub(1, std::memory_order_relaxed);
}

// Serves one emulated request. Everything in it comes from a peer and is
// checked before use.
void RegionOwner::handle_request(uint32_t slot, size_t len, fi_addr_t source) {
  using namespace region_layout;
  const std::byte* in = bufs_->requests[slot];
  std::byte* out_buf = bufs_->replies[slot];
  ServiceMessage req;
  std::memcpy(&req, in, std::min(len, sizeof(req)));
  if (len < sizeof(req) || req.magic != kServiceMagic || req.len > kServicePayload ||
      (req.op == kWrite || req.op == kHello ? len < sizeof(req) + req.len : false)) {
    log::warn("region '", name_, "': dropped a malformed request (", len, " bytes)");
    post_request_receive(slot);
    return;
  }
  ServiceMessage rep = req;
  rep.status = kServed;
  rep.len = 0;
  rep.token = 0;
  fi_addr_t to = FI_ADDR_UNSPEC;
  if (req.op == kHello) {
    bool inserted = false;
    if (ep_->knows_sources() && source != FI_ADDR_NOTAVAIL) {
      to = source;  // already in the address vector: a client saying HELLO again
    } else {
      inserted = true;
      try {
        to = ep_->insert(std::string(reinterpret_cast<const char*>(in + sizeof(req)), req.len));
      } catch (const Error& e) {
        log::warn("region '", name_, "': ", e.what());
        post_request_receive(slot);
        return;
      }
      // The provider names every sender it knows and did not name this one,
      // so it is not the endpoint at the address it claims. Where that
      // address is a client already, admitting the claim would evict the
      // client (its token replaced): refused. (Where the provider cannot name
      // senders, the answer still goes to the claimed address, so a claimant
      // never learns a token; libfabric 1.17's tcp;ofi_rxm has no
      // FI_SOURCE_ERR to show the real sender's address.)
      if (ep_->knows_sources() && is_client(to)) {
        log::warn("region '", name_, "': refused a HELLO from an unknown sender in the name of client ",
                  to_hex(std::string(reinterpret_cast<const char*>(in + sizeof(req)), req.len)));
        post_request_receive(slot);
        return;
      }
    }
    if (req.a != mem_.nonce()) {
      // A stale descriptor: its region is gone and this endpoint took over
      // its address. Answered once, without admitting the sender.
      rep.status = kWrongRegion;
      send_reply(slot, rep, to);
      if (inserted && !is_client(to)) retire(to);  // its entry goes once enough others did
      return;
    }
    const uint32_t id = admit(to);
    rep.a = id;
    rep.b = clients_[id].token;
  } else if (Client* c = client_of(req.client, req.token, source); c == nullptr) {
    if (!ep_->knows_sources() || source == FI_ADDR_NOTAVAIL || req.op == kBye) {
      post_request_receive(slot);  // no one to answer
      return;
    }
    // A known sender whose client number was evicted, or who presents
    // another's: it may say HELLO again.
    to = source;
    rep.status = kUnknownClient;
  } else if (req.op == kBye) {
    forget(*c);
    post_request_receive(slot);
    return;
  } else {
    to = c->addr;
    const bool atomic = req.op == kCas || req.op == kFetchAdd;
    const uint64_t n = atomic ? 8 : req.len;
    if (header()->revoked.load(std::memory_order_acquire) != 0) {
      rep.status = kRevoked;
    } else if (atomic && native_atomics_) {
      // Every rank was told to use the provider's atomics on this region;
      // CPU atomics here would not be atomic with respect to the NIC's.
      rep.status = kNotEmulated;
    } else if (req.offset > bytes_ || n > bytes_ - req.offset || (atomic && req.offset % 8 != 0)) {
      rep.status = kOutOfBounds;
    } else {
      std::byte* p = data() + req.offset;
      switch (req.op) {
        case kRead:
          std::memcpy(out_buf + sizeof(rep), p, req.len);
          rep.len = req.len;
          break;
        case kWrite:
          std::memcpy(p, in + sizeof(req), req.len);
          break;
        case kCas: {
          // The same CPU atomics an owner-host peer would use, so emulated
          // and mapped access stay atomic with respect to each other.
          std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(p));
          uint64_t expected = req.a;
          word.compare_exchange_strong(expected, req.b);
          rep.a = expected;
          break;
        }
        case kFetchAdd:
          rep.a = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).fetch_add(req.a);
          break;
        default:
          rep.status = kBadRequest;
      }
    }
  }
  send_reply(slot, rep, to);
}

void RegionOwner::send_reply(uint32_t slot, const region_layout::ServiceMessage& rep,
                             fi_addr_t to) {
  std::byte* out_buf = bufs_->replies[slot];
  std::memcpy(out_buf, &rep, sizeof(rep));
  ssize_t rc;
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  while ((rc = ep_->tsend(out_buf, sizeof(rep) + rep.len, bufs_mr_.desc, to,
                          region_layout::kTagReply, &bufs_->send_ctx[slot])) == -FI_EAGAIN &&
         Clock::now() < give_up) {
    sched_yield();
  }
  if (rc != 0) post_request_receive(slot);
}

// ---------------------------------------------------------------- access

Status RegionAccess::fail(Status s, const std::string& what) {
  error_ = what;
  return s;
}

std::string RegionAccess::what() const { return "region '" + name_ + "' of rank " + std::to_string(owner_); }

Status RegionAccess::check_range(uint64_t offset, size_t len, bool atomic) {
  if (offset > bytes_ || len > bytes_ - offset) {
    return fail(Status::kInvalid, what() + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + len) +
                                      ") lie outside its " + std::to_string(bytes_) + " bytes");
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
    if (reinterpret_cast<const Header*>(map_.data())->revoked.load(std::memory_order_acquire) != 0) {
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
            const std::string& address, const std::string& caps, uint64_t key, uint64_t base,
            uint64_t nonce, const control::PeerTable* peers)
      : RegionAccess(std::move(name), owner, bytes),
        key_(key),
        base_(base),
        nonce_(nonce),
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
  ~OfiAccess() override {
    if (!broken_ && client_ >= 0) say_bye();
    // Operations may still be in flight towards an owner that died or never
    // answered: see ofi::Endpoint::abandon().
    if (broken_) ep_->abandon();
  }

  Status read(uint64_t offset, std::byte* out, size_t len, Deadline deadline) override {
    if (Status s = ready(offset, len, false); s != Status::kOk) return s;
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
        if (Status s = call(region_layout::kRead, offset + done, n, 0, 0, nullptr, &rep, deadline); s != Status::kOk) {
          return s;
        }
        std::memcpy(out + done, bufs_->reply + sizeof(ServiceMessage), n);
      }
      done += n;
    }
    return Status::kOk;
  }

  Status write(uint64_t offset, const std::byte* in, size_t len, Deadline deadline) override {
    if (Status s = ready(offset, len, false); s != Status::kOk) return s;
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
    if (Status s = ready(offset, 8, true); s != Status::kOk) return s;
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

  Status fetch_add(uint64_t offset, uint64_t delta, uint64_t* previous, Deadline deadline) override {
    if (Status s = ready(offset, 8, true); s != Status::kOk) return s;
    if (!native_atomic_) {
      ServiceMessage rep;
      if (Status s = call(region_layout::kFetchAdd, offset, 0, delta, 0, nullptr, &rep, deadline); s != Status::kOk) {
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

  Status ready(uint64_t offset, size_t len, bool atomic) {
    if (broken_) {
      return fail(Status::kPeerLost,
                  what() + ": this handle is unusable after an earlier failure: " + broken_why_);
    }
    return check_range(offset, len, atomic);
  }

  // Posts one operation (retrying while the provider is busy) and waits
  // for its completion.
  template <class Post>
  Status run(Deadline deadline, Post&& post) {
    done_[0] = false;
    if (Status s = post_op(deadline, post); s != Status::kOk) return s;
    return wait({&bufs_->ctx}, deadline);
  }

  template <class Post>
  Status post_op(Deadline deadline, Post&& post) {
    for (;;) {
      const ssize_t rc = post();
      if (rc == 0) return Status::kOk;
      if (rc != -FI_EAGAIN) {
        return fail(Status::kPeerLost, what() + ": libfabric refused the operation: " +
                                           fi_strerror(static_cast<int>(-rc)));
      }
      if (Status s = poll_once(deadline); s != Status::kOk) return s;
    }
  }

  // One emulated request and its answer; says HELLO first, and again once
  // if the service no longer knows this client (it evicted it).
  Status call(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b, const std::byte* data,
              ServiceMessage* rep, Deadline deadline) {
    for (int attempt = 0;; ++attempt) {
      if (client_ < 0) {
        ServiceMessage hello_rep;
        const std::string me = ep_->address();
        client_ = 0;  // for the hello itself; the answer says the real number
        token_ = 0;
        if (Status s =
                exchange(region_layout::kHello, 0, me.size(), nonce_, 0,
                         reinterpret_cast<const std::byte*>(me.data()), &hello_rep, deadline);
            s != Status::kOk) {
          client_ = -1;
          return s;
        }
        if (hello_rep.status != region_layout::kServed) {
          client_ = -1;
          return served(hello_rep);
        }
        client_ = static_cast<int64_t>(hello_rep.a);
        token_ = hello_rep.b;
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
  Status exchange(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b, const std::byte* data,
                  ServiceMessage* rep, Deadline deadline) {
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
    return fail(Status::kClosed, what() + " refused the access (" + err + "): it was revoked by its owner");
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
      if (Status s = poll_once(deadline, i >= kSpinPolls); s != Status::kOk) {
        if (s == Status::kClosed && !all_done()) {
          // A refused access fails only its own operation; a reply receive
          // posted beside it is still pending and is cancelled with the handle.
          broken_ = ops.size() > 1;
          broken_why_ = error_;
        }
        return s;
      }
      if (i >= kSpinPolls && peers_ != nullptr && !peers_->alive_as(owner_, incarnation_)) {
        broken_ = true;
        broken_why_ = peers_->describe_as(owner_, incarnation_);
        return fail(Status::kPeerLost, what() + ": " + broken_why_);
      }
    }
    return Status::kOk;
  }

  std::unique_ptr<ofi::Endpoint> ep_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t key_ = 0;
  uint64_t base_ = 0;
  uint64_t nonce_ = 0;  // the region's, which HELLO presents
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

std::unique_ptr<RegionAccess> RegionAccess::open(const std::string& name, uint32_t owner, const std::string& descriptor,
                                                 const std::string& host_id, const ofi::Config& cfg,
                                                 const control::PeerTable* peers) {
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
      throw Error(ErrorCode::kInvalidArgument, "region '" + name + "' of rank " + std::to_string(owner) +
                                                   " is reachable over shared memory only, from its own host");
    }
    SharedRegion map;
    try {
      map = SharedRegion::open_peer(static_cast<pid_t>(pid), static_cast<int>(fd),
                                    mapped_bytes(bytes), nonce);
    } catch (const Error& e) {
      // e.what() starts with its code's name; the message says it again.
      const std::string why = e.what();
      const size_t colon = why.find(": ");
      const std::string text = "region '" + name + "' of rank " + std::to_string(owner) + ": " +
                               (colon == std::string::npos ? why : why.substr(colon + 2));
      // The usual cause is an owner that has exited: say so as a lost peer
      // once the registry confirms it.
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
    return std::make_unique<OfiAccess>(name, owner, bytes, cfg, address, caps, key, base, nonce,
                                       peers);
  }
  throw malformed();
}

}  // namespace sluice::detail
