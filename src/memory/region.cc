#include "memory/region.h"

#include <rdma/fi_errno.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "common/hex.h"
#include "common/log.h"
#include "control/registry_client.h"
#include "flow/layout.h"

namespace sluice::detail {
namespace {

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

RegionOwner::RegionOwner(std::string name, size_t bytes, bool use_ofi, const ofi::Config& cfg,
                         const std::string& host_id)
    : name_(std::move(name)), bytes_(bytes) {
  mem_ = SharedRegion::create("region:" + name_, mapped_bytes(bytes));
  Header* h = header();
  h->magic = region_layout::kMagic;
  h->bytes = bytes;
  h->revoked.store(0, std::memory_order_relaxed);
  if (!use_ofi) {
    descriptor_ = "shm " + std::to_string(bytes) + " " + std::to_string(::getpid()) + " " + std::to_string(mem_.fd()) +
                  " " + host_id;
    return;
  }
  ofi::Config c = cfg;
  c.region = true;
  ep_ = std::make_unique<ofi::Endpoint>(c);
  if (ep_->rma()) mr_ = ep_->register_memory(data(), bytes_, FI_REMOTE_READ | FI_REMOTE_WRITE);
  requests_.resize(kServiceSlots * region_layout::kServiceMessageBytes);
  replies_.resize(kServiceSlots * region_layout::kServiceMessageBytes);
  requests_mr_ = ep_->register_memory(requests_.data(), requests_.size(), FI_RECV);
  replies_mr_ = ep_->register_memory(replies_.data(), replies_.size(), FI_SEND);
  recv_ctx_.resize(kServiceSlots);
  send_ctx_.resize(kServiceSlots);
  for (uint32_t i = 0; i < kServiceSlots; ++i) post_request_receive(i);
  const char* caps = ep_->atomic() ? "atomic" : ep_->rma() ? "rma" : "msg";
  descriptor_ = "ofi " + std::to_string(bytes) + " " + to_hex(ep_->address()) + " " + caps + " " +
                std::to_string(mr_.key) + " " + std::to_string(mr_.base) + " " + host_id;
  log::info("region '", name_, "': ", bytes, " bytes on ", ep_->provider_name(), " (", caps, ")");
  service_ = std::thread([this] { serve(); });
}

RegionOwner::~RegionOwner() {
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
  std::byte* buf = requests_.data() + slot * region_layout::kServiceMessageBytes;
  ssize_t rc;
  while ((rc = ep_->trecv(buf, region_layout::kServiceMessageBytes, requests_mr_.desc, region_layout::kTagRequest,
                          &recv_ctx_[slot])) == -FI_EAGAIN) {
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
  while (!stop_.load(std::memory_order_relaxed)) {
    if (revoke_requested_.load() && !revoke_done_.load()) {
      ep_->unregister(mr_);
      revoke_done_.store(true);
    }
    std::string err;
    void* failed = nullptr;
    const ssize_t n = ep_->wait(e, 16, kServiceSlice, &err, &failed);
    if (n < 0) {
      // A reply to a peer that is gone, or a request that broke off: the
      // slot goes back to receiving.
      for (uint32_t i = 0; i < kServiceSlots; ++i) {
        if (failed == &send_ctx_[i] || failed == &recv_ctx_[i]) post_request_receive(i);
      }
      log::debug("region '", name_, "': ", err);
      continue;
    }
    for (ssize_t j = 0; j < n; ++j) {
      for (uint32_t i = 0; i < kServiceSlots; ++i) {
        if (e[j].op_context == &recv_ctx_[i]) handle_request(i, e[j].len);
        if (e[j].op_context == &send_ctx_[i]) post_request_receive(i);
      }
    }
  }
}

// Serves one emulated request. Everything in it comes from a peer and is
// checked before use.
void RegionOwner::handle_request(uint32_t slot, size_t len) {
  using namespace region_layout;
  const std::byte* in = requests_.data() + slot * kServiceMessageBytes;
  std::byte* out_buf = replies_.data() + slot * kServiceMessageBytes;
  ServiceMessage req;
  std::memcpy(&req, in, sizeof(req));
  if (len < sizeof(req) || req.magic != kServiceMagic || req.len > kServicePayload ||
      (req.op == kWrite || req.op == kHello ? len < sizeof(req) + req.len : false)) {
    log::warn("region '", name_, "': dropped a malformed request (", len, " bytes)");
    post_request_receive(slot);
    return;
  }
  ServiceMessage rep = req;
  rep.status = kServed;
  rep.len = 0;
  fi_addr_t to = FI_ADDR_UNSPEC;
  if (req.op == kHello) {
    try {
      to = ep_->insert(std::string(reinterpret_cast<const char*>(in + sizeof(req)), req.len));
    } catch (const Error& e) {
      log::warn("region '", name_, "': ", e.what());
      post_request_receive(slot);
      return;
    }
    rep.a = clients_.size();
    clients_.push_back(to);
  } else if (req.client >= clients_.size()) {
    post_request_receive(slot);  // no one to answer
    return;
  } else {
    to = clients_[req.client];
    const bool atomic = req.op == kCas || req.op == kFetchAdd;
    const uint64_t n = atomic ? 8 : req.len;
    if (header()->revoked.load(std::memory_order_acquire) != 0) {
      rep.status = kRevoked;
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
  std::memcpy(out_buf, &rep, sizeof(rep));
  ssize_t rc;
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  while ((rc = ep_->tsend(out_buf, sizeof(rep) + rep.len, replies_mr_.desc, to, kTagReply, &send_ctx_[slot])) ==
             -FI_EAGAIN &&
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
  ShmAccess(std::string name, uint32_t owner, size_t bytes, SharedRegion map)
      : RegionAccess(std::move(name), owner, bytes), map_(std::move(map)) {}

  Status read(uint64_t offset, std::byte* out, size_t len, Deadline) override {
    if (Status s = check(offset, len, false); s != Status::kOk) return s;
    std::memcpy(out, data() + offset, len);
    return Status::kOk;
  }
  Status write(uint64_t offset, const std::byte* in, size_t len, Deadline) override {
    if (Status s = check(offset, len, false); s != Status::kOk) return s;
    std::memcpy(data() + offset, in, len);
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
    return check_range(offset, len, atomic);
  }

  SharedRegion map_;
};

class OfiAccess final : public RegionAccess {
 public:
  OfiAccess(std::string name, uint32_t owner, size_t bytes, const ofi::Config& cfg, const std::string& address,
            const std::string& caps, uint64_t key, uint64_t base, const control::PeerTable* peers)
      : RegionAccess(std::move(name), owner, bytes), key_(key), base_(base), peers_(peers) {
    ofi::Config c = cfg;
    c.region = true;
    ep_ = std::make_unique<ofi::Endpoint>(c);
    peer_ = ep_->insert(address);
    native_rma_ = caps != "msg" && ep_->rma();
    native_atomic_ = caps == "atomic" && ep_->atomic() && cfg.allow_atomic;
    bounce_.resize(kBounceBytes);
    bounce_mr_ = ep_->register_memory(bounce_.data(), bounce_.size(), FI_READ | FI_WRITE);
    words_mr_ = ep_->register_memory(words_, sizeof(words_), FI_READ | FI_WRITE);
    request_.resize(region_layout::kServiceMessageBytes);
    reply_.resize(region_layout::kServiceMessageBytes);
    request_mr_ = ep_->register_memory(request_.data(), request_.size(), FI_SEND);
    reply_mr_ = ep_->register_memory(reply_.data(), reply_.size(), FI_RECV);
  }
  ~OfiAccess() override {
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
        Status s = run(deadline, [&] { return ep_->read(bounce_.data(), n, bounce_mr_.desc, peer_, base_ + offset + done, key_, &ctx_); });
        if (s != Status::kOk) return s;
        std::memcpy(out + done, bounce_.data(), n);
      } else {
        ServiceMessage rep;
        if (Status s = call(region_layout::kRead, offset + done, n, 0, 0, nullptr, &rep, deadline); s != Status::kOk) {
          return s;
        }
        std::memcpy(out + done, reply_.data() + sizeof(ServiceMessage), n);
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
        std::memcpy(bounce_.data(), in + done, n);
        Status s = run(deadline, [&] { return ep_->write(bounce_.data(), n, bounce_mr_.desc, peer_, base_ + offset + done, key_, &ctx_); });
        if (s != Status::kOk) return s;
      } else {
        ServiceMessage rep;
        if (Status s = call(region_layout::kWrite, offset + done, n, 0, 0, in + done, &rep, deadline); s != Status::kOk) {
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
      if (Status s = call(region_layout::kCas, offset, 0, expected, desired, nullptr, &rep, deadline); s != Status::kOk) {
        return s;
      }
      *previous = rep.a;
      return Status::kOk;
    }
    words_[0] = desired;
    words_[1] = expected;
    Status s = run(deadline, [&] {
      return ep_->compare_swap(&words_[0], &words_[1], &words_[2], words_mr_.desc, peer_, base_ + offset, key_, &ctx_);
    });
    if (s == Status::kOk) *previous = words_[2];
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
    words_[0] = delta;
    Status s = run(deadline, [&] {
      return ep_->fetch_add(&words_[0], &words_[2], words_mr_.desc, peer_, base_ + offset, key_, &ctx_);
    });
    if (s == Status::kOk) *previous = words_[2];
    return s;
  }

  const char* path() const override {
    if (native_atomic_) return "ofi";
    return native_rma_ ? "ofi (emulated atomics)" : "ofi (emulated)";
  }

 private:
  Status ready(uint64_t offset, size_t len, bool atomic) {
    if (broken_) return fail(Status::kPeerLost, what() + ": this handle is unusable after an earlier failure: " + broken_why_);
    return check_range(offset, len, atomic);
  }

  // Posts one operation (retrying while the provider is busy) and waits
  // for its completion.
  template <class Post>
  Status run(Deadline deadline, Post&& post) {
    done_[0] = false;
    if (Status s = post_op(deadline, post); s != Status::kOk) return s;
    return wait({&ctx_}, deadline);
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

  // One emulated request and its answer.
  Status call(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b, const std::byte* data,
              ServiceMessage* rep, Deadline deadline) {
    if (client_ < 0) {
      ServiceMessage hello_rep;
      const std::string me = ep_->address();
      client_ = 0;  // for the hello itself; the answer says the real number
      if (Status s = exchange(region_layout::kHello, 0, me.size(), 0, 0, reinterpret_cast<const std::byte*>(me.data()),
                              &hello_rep, deadline);
          s != Status::kOk) {
        client_ = -1;
        return s;
      }
      client_ = static_cast<int64_t>(hello_rep.a);
    }
    return exchange(op, offset, len, a, b, data, rep, deadline);
  }

  Status exchange(uint16_t op, uint64_t offset, size_t len, uint64_t a, uint64_t b, const std::byte* data,
                  ServiceMessage* rep, Deadline deadline) {
    ServiceMessage req{};
    req.magic = region_layout::kServiceMagic;
    req.op = op;
    req.client = static_cast<uint32_t>(client_);
    req.len = static_cast<uint32_t>(len);
    req.id = ++next_id_;
    req.offset = offset;
    req.a = a;
    req.b = b;
    std::memcpy(request_.data(), &req, sizeof(req));
    const bool carries = op == region_layout::kWrite || op == region_layout::kHello;
    if (carries && len > 0) std::memcpy(request_.data() + sizeof(req), data, len);
    done_[0] = done_[1] = false;
    if (Status s = post_op(deadline, [&] {
          return ep_->trecv(reply_.data(), reply_.size(), reply_mr_.desc, region_layout::kTagReply, &reply_ctx_);
        });
        s != Status::kOk) {
      return s;
    }
    if (Status s = post_op(deadline, [&] {
          return ep_->tsend(request_.data(), sizeof(req) + (carries ? len : 0), request_mr_.desc, peer_,
                            region_layout::kTagRequest, &ctx_);
        });
        s != Status::kOk) {
      broken_ = true;
      broken_why_ = error_;
      return s;
    }
    if (Status s = wait({&ctx_, &reply_ctx_}, deadline); s != Status::kOk) return s;
    std::memcpy(rep, reply_.data(), sizeof(*rep));
    if (rep->magic != region_layout::kServiceMagic || rep->id != req.id) {
      broken_ = true;
      broken_why_ = "a malformed answer";
      return fail(Status::kPeerLost, what() + ": the owner sent a malformed answer");
    }
    switch (rep->status) {
      case region_layout::kServed: return Status::kOk;
      case region_layout::kRevoked: return fail(Status::kClosed, what() + " was revoked by its owner");
      case region_layout::kOutOfBounds: return fail(Status::kInvalid, what() + ": the owner refused an access out of bounds");
      default: return fail(Status::kInvalid, what() + ": the owner did not understand the request");
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
    if (n < 0) return failed_op(err);
    for (ssize_t i = 0; i < n; ++i) {
      if (e[i].op_context == &ctx_) done_[0] = true;
      if (e[i].op_context == &reply_ctx_) done_[1] = true;
    }
    if (Clock::now() >= deadline) {
      broken_ = true;
      broken_why_ = "an operation timed out";
      return fail(Status::kTimeout, what() + ": deadline passed before the operation completed");
    }
    return Status::kOk;
  }

  Status failed_op(const std::string& err) {
    if (peers_ != nullptr && (peers_->registry_lost() || peers_->state(owner_) != control::PeerTable::kAlive)) {
      broken_ = true;
      broken_why_ = err;
      return fail(Status::kPeerLost, what() + ": " + err + " (" + peers_->describe(owner_) + ")");
    }
    // The owner is alive and refused the access: its key is gone.
    return fail(Status::kClosed, what() + " refused the access (" + err + "): it was revoked by its owner");
  }

  Status wait(std::initializer_list<const fi_context2*> ops, Deadline deadline) {
    auto all_done = [&] {
      for (const fi_context2* c : ops) {
        if (c == &ctx_ && !done_[0]) return false;
        if (c == &reply_ctx_ && !done_[1]) return false;
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
      if (i >= kSpinPolls && peers_ != nullptr && peers_->state(owner_) != control::PeerTable::kAlive) {
        broken_ = true;
        broken_why_ = peers_->describe(owner_);
        return fail(Status::kPeerLost, what() + ": " + peers_->describe(owner_));
      }
    }
    return Status::kOk;
  }

  std::unique_ptr<ofi::Endpoint> ep_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t key_ = 0;
  uint64_t base_ = 0;
  const control::PeerTable* peers_;
  bool native_rma_ = false;
  bool native_atomic_ = false;
  std::vector<std::byte> bounce_;
  ofi::Memory bounce_mr_;
  alignas(8) uint64_t words_[4] = {};
  ofi::Memory words_mr_;
  std::vector<std::byte> request_, reply_;
  ofi::Memory request_mr_, reply_mr_;
  fi_context2 ctx_{}, reply_ctx_{};
  bool done_[2] = {false, false};
  uint32_t idle_polls_ = 0;
  int64_t client_ = -1;
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
    std::string their_host;
    if (!(in >> pid >> fd >> their_host) || pid <= 0 || fd < 0) throw malformed();
    if (their_host != host_id) {
      throw Error(ErrorCode::kInvalidArgument, "region '" + name + "' of rank " + std::to_string(owner) +
                                                   " is reachable over shared memory only, from its own host");
    }
    SharedRegion map = SharedRegion::open_peer(static_cast<pid_t>(pid), static_cast<int>(fd), mapped_bytes(bytes));
    const auto* h = reinterpret_cast<const Header*>(map.data());
    if (h->magic != region_layout::kMagic || h->bytes != bytes) throw malformed();
    return std::make_unique<ShmAccess>(name, owner, bytes, std::move(map));
  }
  if (mode == "ofi") {
    std::string hex, caps, address;
    unsigned long long key = 0, base = 0;
    if (!(in >> hex >> caps >> key >> base) || !from_hex(hex, &address) || address.empty() ||
        (caps != "atomic" && caps != "rma" && caps != "msg")) {
      throw malformed();
    }
    return std::make_unique<OfiAccess>(name, owner, bytes, cfg, address, caps, key, base, peers);
  }
  throw malformed();
}

}  // namespace sluice::detail

namespace sluice {

MemoryRegion::MemoryRegion() = default;
MemoryRegion::MemoryRegion(std::unique_ptr<detail::RegionOwner> impl) : impl_(std::move(impl)) {}
MemoryRegion::MemoryRegion(MemoryRegion&&) noexcept = default;
MemoryRegion& MemoryRegion::operator=(MemoryRegion&&) noexcept = default;
MemoryRegion::~MemoryRegion() = default;
std::byte* MemoryRegion::data() const { return impl_->data(); }
size_t MemoryRegion::size() const { return impl_->size(); }
const std::string& MemoryRegion::name() const { return impl_->name(); }
const char* MemoryRegion::path() const { return impl_->path(); }
void MemoryRegion::revoke() { impl_->revoke(); }

RemoteRegion::RemoteRegion() = default;
RemoteRegion::RemoteRegion(std::unique_ptr<detail::RegionAccess> impl) : impl_(std::move(impl)) {}
RemoteRegion::RemoteRegion(RemoteRegion&&) noexcept = default;
RemoteRegion& RemoteRegion::operator=(RemoteRegion&&) noexcept = default;
RemoteRegion::~RemoteRegion() = default;

Status RemoteRegion::read(uint64_t offset, std::span<std::byte> out, Deadline deadline) {
  return impl_->read(offset, out.data(), out.size(), deadline);
}
Status RemoteRegion::write(uint64_t offset, std::span<const std::byte> in, Deadline deadline) {
  return impl_->write(offset, in.data(), in.size(), deadline);
}
Status RemoteRegion::compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired, uint64_t* previous,
                                      Deadline deadline) {
  return impl_->compare_and_swap(offset, expected, desired, previous, deadline);
}
Status RemoteRegion::fetch_add(uint64_t offset, uint64_t delta, uint64_t* previous, Deadline deadline) {
  return impl_->fetch_add(offset, delta, previous, deadline);
}
size_t RemoteRegion::size() const { return impl_->size(); }
uint32_t RemoteRegion::owner() const { return impl_->owner(); }
const char* RemoteRegion::path() const { return impl_->path(); }
const std::string& RemoteRegion::error() const { return impl_->error(); }

}  // namespace sluice
