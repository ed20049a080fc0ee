// RegionOwner: the exposing rank's side of a memory region (its memory, its
// descriptor, and over ofi the service thread that serves peers without
// native RMA or atomics). The peers' side is region.cc.
#include <rdma/fi_errno.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "common/hex.h"
#include "common/log.h"
#include "common/random.h"
#include "common/test_hooks.h"
#include "memory/region.h"
#include "transport/ofi/fabric_lib.h"

namespace sluice::detail {
namespace {

using region_layout::Header;
using region_layout::ServiceMessage;

// Request buffers the owner's service keeps posted.
constexpr uint32_t kServiceSlots = 8;
// How often the service thread looks at stop and revoke requests.
constexpr auto kServiceSlice = std::chrono::milliseconds(20);

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
  mem_ = SharedRegion::create("region:" + name_, region_layout::mapped_bytes(bytes));
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
  // No registration every peer shares: each client gets its own at HELLO,
  // so that ask_fence can close a lost rank's alone.
  native_atomics_ = ep_->atomic();
  bufs_ = ep_->allocate_array<ServiceBuffers>(1);
  bufs_mr_ = ep_->register_memory(bufs_, sizeof(ServiceBuffers), FI_SEND | FI_RECV);
  for (uint32_t i = 0; i < kServiceSlots; ++i) post_request_receive(i);
  const char* caps = native_atomics_ ? "atomic" : ep_->rma() ? "rma" : "msg";
  descriptor_ = "ofi " + std::to_string(bytes) + " " + to_hex(ep_->address()) + " " + caps + " 0 " +
                std::to_string(ep_->remote_base(data())) + " " + std::to_string(mem_.nonce()) +
                " " + host_id;
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
  // The service thread owns the endpoint; it closes the registration as
  // soon as it wakes.
  ep_->interrupt_wait();
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (!revoke_done_.load() && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

uint64_t RegionOwner::ask_fence(uint32_t rank, uint32_t incarnation) {
  if (ep_ == nullptr || !service_.joinable()) return 0;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(fence_mu_);
    fence_requests_.emplace_back(rank, incarnation);
    ticket = fences_asked_.fetch_add(1) + 1;
  }
  // The service thread applies it as soon as it wakes: now, not at the end
  // of its wait slice (a view change waits for it).
  ep_->interrupt_wait();
  return ticket;
}

bool RegionOwner::await_fence(uint64_t ticket, Clock::time_point give_up) {
  // The service thread, woken by ask_fence, applies it (within a slice,
  // kServiceSlice, should a wake-up be missed: one that came before it
  // blocked).
  const auto asked = Clock::now();
  while (fences_done_.load() < ticket && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  if (fences_done_.load() >= ticket) {
    log::debug("region '", name_, "': fence applied in ",
               std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - asked).count(),
               " us");
    return true;
  }
  log::warn("region '", name_, "': could not fence a lost rank in time");
  return false;
}

void RegionOwner::apply_fences() {
  const uint64_t asked = fences_asked_.load();
  if (fences_done_.load() == asked) return;
  std::vector<std::pair<uint32_t, uint32_t>> todo;
  {
    std::lock_guard<std::mutex> lock(fence_mu_);
    todo.swap(fence_requests_);
  }
  for (const auto& [rank, incarnation] : todo) {
    if (fenced_below_.size() <= rank) fenced_below_.resize(rank + 1, 0);
    fenced_below_[rank] = std::max(fenced_below_[rank], incarnation + 1);
    uint32_t n = 0;
    for (Client& c : clients_) {
      if (c.token == 0 || !fenced(c.who)) continue;
      // Its address stays known a while (as an evicted client's), so that
      // its next request is answered UNKNOWN_CLIENT and its HELLO FENCED,
      // rather than dropped unanswered.
      ep_->unregister(c.mr);
      retire(c.addr);
      c = Client{};
      live_clients_.fetch_sub(1, std::memory_order_relaxed);
      ++n;
    }
    log::debug("region '", name_, "': fenced rank ", rank, " (incarnation ", incarnation, "): ", n,
               " client(s) dropped");
  }
  fences_done_.store(asked);
}

bool RegionOwner::fenced(uint64_t who) const {
  const uint32_t rank1 = static_cast<uint32_t>(who);
  if (rank1 == 0 || rank1 > fenced_below_.size()) return false;
  return static_cast<uint32_t>(who >> 32) < fenced_below_[rank1 - 1];
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
    log::warn("region '", name_,
              "': cannot post a request receive: ", ofi::lib::strerror(static_cast<int>(-rc)));
  }
}

void RegionOwner::serve() {
  fi_cq_data_entry e[16];
  fi_addr_t from[16];
  while (!stop_.load(std::memory_order_relaxed)) {
    if (revoke_requested_.load() && !revoke_done_.load()) {
      for (Client& c : clients_) ep_->unregister(c.mr);
      revoke_done_.store(true);
    }
    apply_fences();
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
    ep_->unregister(clients_[pick].mr);
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
  ep_->unregister(c.mr);
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
        log::warn("region '", name_,
                  "': refused a HELLO from an unknown sender in the name of client ",
                  to_hex(std::string(reinterpret_cast<const char*>(in + sizeof(req)), req.len)));
        post_request_receive(slot);
        return;
      }
    }
    const bool revoked = header()->revoked.load(std::memory_order_acquire) != 0;
    if (req.a != mem_.nonce() || fenced(req.b) || revoked) {
      // A stale descriptor (its region is gone and this endpoint took over
      // its address), a rank the job declared lost, or a revoked region.
      // Answered once, without admitting the sender.
      rep.status = req.a != mem_.nonce() ? kWrongRegion : revoked ? kRevoked : kFenced;
      send_reply(slot, rep, to);
      if (inserted && !is_client(to)) retire(to);  // its entry goes once enough others did
      return;
    }
    const uint32_t id = admit(to);
    Client& c = clients_[id];
    c.who = req.b;
    if (ep_->rma() && c.mr.mr == nullptr) {
      try {
        c.mr = ep_->register_memory(data(), bytes_, FI_REMOTE_READ | FI_REMOTE_WRITE);
      } catch (const Error& e) {
        log::warn("region '", name_, "': cannot register it for a new client: ", e.what());
        forget(c);
        rep.status = kBadRequest;
        send_reply(slot, rep, to);
        return;
      }
    }
    rep.offset = c.mr.key;
    rep.a = id;
    rep.b = c.token;
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

}  // namespace sluice::detail
