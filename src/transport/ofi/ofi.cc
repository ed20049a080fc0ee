#include "transport/ofi/ofi.h"

#include <rdma/fi_errno.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/random.h"
#include "common/test_hooks.h"
#include "sluice/errors.h"
#include "transport/ofi/fabric_lib.h"
#include "transport/ofi/progress_agent.h"

namespace sluice::detail::ofi {
namespace {

constexpr int kApiVersion = FI_VERSION(1, 9);
// Zero-byte receives kept posted for FI_RX_CQ_DATA providers; every remote
// write with data consumes one and the owner reposts it at once.
constexpr int kDataReceives = 256;

std::string fi_error_text(int rc) {
  return std::string(lib::strerror(-rc)) + " (" + std::to_string(rc) + ")";
}

// libfabric's name for a provider choice: RDM endpoints over tcp and verbs
// come from the rxm utility provider layered on them.
std::string libfabric_name(const std::string& p) {
  if (p == "tcp") return "tcp;ofi_rxm";
  if (p == "verbs") return "verbs;ofi_rxm";
  return p;
}

fi_info* make_hints(const Config& cfg, const std::string& prov, bool rma, bool atomic,
                    bool source) {
  fi_info* h = lib::allocinfo();
  if (h == nullptr) {
    std::string why;
    lib::load(&why);
    throw Error(ErrorCode::kResource, why.empty() ? "fi_allocinfo failed: out of memory" : why);
  }
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV;
  if (source) h->caps |= FI_SOURCE;
  if (rma) h->caps |= FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
  if (rma && cfg.region) h->caps |= FI_READ | FI_REMOTE_READ;
  if (atomic) h->caps |= FI_ATOMIC;
  // The modes sluice can honour; a provider may require any subset.
  h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  h->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  if (!prov.empty()) h->fabric_attr->prov_name = strdup(libfabric_name(prov).c_str());
  return h;
}

}  // namespace

int restore_signal_dispositions() {
  lib::load();
  return lib::signal_dispositions_restored();
}

Config config_from_options(const ClusterOptions& options, const std::string& node) {
  Config c;
  c.node = node;
  switch (options.ofi_provider) {
    case OfiProvider::kAuto:
      break;
    case OfiProvider::kTcp:
      c.provider = "tcp";
      break;
    case OfiProvider::kVerbs:
      c.provider = "verbs";
      break;
    case OfiProvider::kEfa:
      c.provider = "efa";
      break;
    case OfiProvider::kShm:
      c.provider = "shm";
      break;
  }
  c.allow_rma = options.ofi_rma != Switch::kOff;
  c.require_rma = options.ofi_rma == Switch::kOn;
  c.allow_atomic = options.ofi_atomic != Switch::kOff;
  c.require_atomic = options.ofi_atomic == Switch::kOn;
  c.test_unordered = test_hooks::ofi_unordered();
  c.wait_fd = !test_hooks::ofi_no_wait_fd();
  return c;
}

void Endpoint::check(int rc, const char* what) {
  if (rc == 0) return;
  throw Error(ErrorCode::kResource, std::string("libfabric ") + what + " failed on provider " +
                                        (provider_.empty() ? "?" : provider_) + ": " +
                                        fi_error_text(rc));
}

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateBenignRaceSized(const char* file, int line, const volatile void* mem,
                                        unsigned long size, const char* description);
#endif

namespace {
// Memory a peer may write or read at any moment, as a NIC's DMA would (on
// tcp the provider copies it in or out on whichever thread progresses the
// endpoint, the ProgressAgent's included): its readers expect that (a credit
// word only grows, a ring slot is read after its sequence number), so the
// thread sanitizer is told not to report it.
void peer_accessible([[maybe_unused]] void* buf, [[maybe_unused]] size_t len) {
#if defined(__SANITIZE_THREAD__)
  AnnotateBenignRaceSized(__FILE__, __LINE__, buf, len, "memory registered for remote access");
#endif
}
}  // namespace

// One owner call: holds the endpoint against the ProgressAgent and counts.
class SLUICE_SCOPED_CAPABILITY Endpoint::Call {
 public:
  explicit Call(const Endpoint* ep) SLUICE_ACQUIRE(ep->call_mu_) : ep_(ep) {
    ep_->call_mu_.lock();
    ep_->calls_.store(ep_->calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  ~Call() SLUICE_RELEASE() { ep_->call_mu_.unlock(); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  const Endpoint* ep_;
};

Endpoint::Endpoint(const Config& cfg) : test_unordered_(cfg.test_unordered) {
  // Preference order when no provider is pinned: hardware first.
  std::vector<std::string> candidates = cfg.provider.empty()
                                            ? std::vector<std::string>{"verbs", "efa", "tcp"}
                                            : std::vector<std::string>{cfg.provider};
  std::string tried;
  std::set<std::string> present_but_refused;
  // What to ask for, best first: RMA with atomics (region endpoints), RMA,
  // messages only.
  struct Want {
    bool rma, atomic;
  };
  std::vector<Want> wants;
  // Required capabilities (ofi_rma / ofi_atomic = on) leave out the wants
  // without them, so that a provider lacking them is refused by name.
  const bool need_atomic = cfg.region && cfg.require_atomic;
  if (cfg.allow_rma && cfg.region && cfg.allow_atomic) wants.push_back({true, true});
  if (cfg.allow_rma && !need_atomic) wants.push_back({true, false});
  if (!cfg.require_rma && !need_atomic) wants.push_back({false, false});
  for (const std::string& prov : candidates) {
    for (const Want& want : wants) {
      const bool rma = want.rma;
      int rc = 0;
      // With senders named in completions where the provider can, else without.
      for (bool source : {true, false}) {
        fi_info* hints = make_hints(cfg, prov, rma, want.atomic, source);
        fi_info* found = nullptr;
        const char* node = cfg.node.empty() ? nullptr : cfg.node.c_str();
        rc = lib::getinfo(kApiVersion, node, nullptr, node ? FI_SOURCE : 0, hints, &found);
        lib::freeinfo(hints);
        if (rc == 0 && found != nullptr) {
          info_ = lib::dupinfo(found);
          lib::freeinfo(found);
          source_ = (info_->caps & FI_SOURCE) != 0;
          break;
        }
      }
      if (info_ != nullptr) {
        rma_ = rma;
        atomic_ = want.atomic;
        break;
      }
      if (!tried.empty()) tried += "; ";
      tried += libfabric_name(prov) +
               (want.atomic ? " with RMA and atomics"
                : rma       ? " with RMA"
                            : " messages only") +
               ": " + fi_error_text(rc);
      // (FI_ENODATA: no such provider or device here; anything else: one
      // that is here and refused.)
      if (rc != -FI_ENODATA) present_but_refused.insert(libfabric_name(prov));
    }
    if (info_ != nullptr) break;
  }
  if (info_ == nullptr) {
    throw Error(ErrorCode::kResource,
                "no usable libfabric provider for address " +
                    (cfg.node.empty() ? std::string("(any)") : cfg.node) + " (" + tried +
                    "); check `fi_info -t FI_EP_RDM`, or pin one with SLUICE_OFI_PROVIDER" +
                    (cfg.require_rma || need_atomic
                         ? "; RMA or atomics are required (SLUICE_OFI_RMA / SLUICE_OFI_ATOMIC = on)"
                         : ""));
  }
  provider_ = info_->fabric_attr->prov_name;
  if (cfg.provider.empty() && !tried.empty() && !candidates.empty() &&
      libfabric_name(candidates.front()) != provider_) {
    // Not the fabric an operator of an RDMA cluster expects. Where a better
    // provider is here and refused (a device, a driver or a limit), say so
    // once per process with why; where none is here at all (a host without
    // RDMA hardware), this is the expected fabric: say it at info level.
    present_but_refused.erase(provider_);
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      const std::string pin = provider_.find("tcp") != std::string::npos ? "tcp" : provider_;
      if (!present_but_refused.empty()) {
        log::warn("ofi: fell back to ", provider_, " (", rma_ ? "RMA" : "messages only",
                  "): the providers preferred before it were not usable here (", tried,
                  "); SLUICE_OFI_PROVIDER=", pin, " pins it and silences this");
      } else {
        log::info("ofi: using ", provider_, " (", rma_ ? "RMA" : "messages only",
                  "): no RDMA provider (verbs, efa) is present on this host");
      }
    }
  }
  rx_cq_data_ = (info_->mode & FI_RX_CQ_DATA) != 0 || cfg.test_data_receives;
  cq_data_size_ = info_->domain_attr->cq_data_size;

  check(lib::fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric");
  check(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain");
  if (atomic_) {
    // The two operations regions need, on the one type they use.
    fi_atomic_attr attr{};
    atomic_ = fi_query_atomic(domain_, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC) == 0 &&
              fi_query_atomic(domain_, FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC) == 0;
  }
  if (need_atomic && !atomic_) {
    // The constructor's throw skips the destructor: close what is open.
    fi_close(&domain_->fid);
    fi_close(&fabric_->fid);
    lib::freeinfo(info_);
    domain_ = nullptr;
    fabric_ = nullptr;
    info_ = nullptr;
    throw Error(ErrorCode::kResource,
                "provider " + provider_ +
                    " has no 64-bit fetch-add and compare-swap, but ofi_atomic = on "
                    "(SLUICE_OFI_ATOMIC=on) requires them; use auto");
  }
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  check(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open");
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = 4096;
  // A file descriptor to wait on lets one thread sleep on several
  // endpoints at once (a Worker's poll(2)); a provider without one still
  // blocks in fi_cq_sread, and one without any wait object polls in slices.
  cq_attr.wait_obj = FI_WAIT_FD;
  if (cfg.wait_fd && fi_cq_open(domain_, &cq_attr, &cq_, nullptr) == 0) {
    if (fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) wait_fd_ = -1;
  } else {
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    if (fi_cq_open(domain_, &cq_attr, &cq_, nullptr) != 0) {
      cq_attr.wait_obj = FI_WAIT_NONE;
      cq_waitable_ = false;
      check(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open");
    }
  }
  check(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint");
  check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
  check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
  check(fi_enable(ep_), "fi_enable");
  if (rx_cq_data_) {
    data_rx_ctx_ = allocate_array<fi_context2>(kDataReceives);
    data_rx_done_.reserve(kDataReceives);  // poll never allocates
    for (int i = 0; i < kDataReceives; ++i) post_data_receive(&data_rx_ctx_[i]);
  }
  log::debug("ofi endpoint on ", provider_, " (", info_->domain_attr->name, "), ",
             rma_ ? "RMA" : "messages", wait_fd_ >= 0 ? ", CQ wait fd" : "",
             rx_cq_data_ ? ", FI_RX_CQ_DATA" : "", source_ ? ", FI_SOURCE" : "");
  // A provider that moves data by itself needs nobody to call it.
  if (info_->domain_attr->data_progress != FI_PROGRESS_AUTO) {
    ProgressAgent::add(this);
    watched_ = true;
  }
}

void Endpoint::abandon() {
  // Nothing may touch an abandoned endpoint again, the agent included.
  if (watched_) ProgressAgent::remove(this);
  watched_ = false;
  abandoned_ = true;
}

bool Endpoint::progress_if_idle() {
  if (!call_mu_.try_lock()) return false;  // the owner is in a call: it progresses
  fi_cq_read(cq_, nullptr, 0);
  call_mu_.unlock();
  return true;
}

ssize_t Endpoint::posted(ssize_t rc) {
  if (rc == 0) outstanding_.fetch_add(1, std::memory_order_relaxed);
  return rc;
}

Endpoint::~Endpoint() {
  if (watched_) ProgressAgent::remove(this);
  if (abandoned_) {
    // Kept reachable, so that leak checkers see them as deliberately kept.
    static Mutex mu;
    static auto* kept SLUICE_PT_GUARDED_BY(mu) = new std::vector<void*>;
    MutexLock lock(mu);
    kept->insert(kept->end(), {info_, fabric_, domain_, av_, cq_, ep_});
    kept->insert(kept->end(), mrs_.begin(), mrs_.end());
    for (const auto& o : owned_) kept->push_back(o.first);
    log::info("ofi: left an endpoint on ", provider_,
              " open: a peer left it in the middle of a transfer");
    return;
  }
  if (ep_ != nullptr) fi_close(&ep_->fid);
  for (fid_mr* mr : mrs_) fi_close(&mr->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) lib::freeinfo(info_);
  // Only now: nothing can reach this memory any more.
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) it->second(it->first);
}

void Endpoint::own(void* p, void (*release)(void*)) {
  if (p == nullptr || release == nullptr) {
    throw Error(ErrorCode::kInternal, "ofi::Endpoint::own() needs a buffer and a release function");
  }
  owned_.emplace_back(p, release);
}

std::byte* Endpoint::allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  try {
    owned_.reserve(owned_.size() + 1);
  } catch (...) {
    std::free(p);
    throw;
  }
  own(p, std::free);
  return static_cast<std::byte*>(p);
}

std::string Endpoint::address() const {
  char buf[256];
  size_t len = sizeof(buf);
  Call call(this);
  int rc = fi_getname(&ep_->fid, buf, &len);
  if (rc != 0)
    throw Error(ErrorCode::kResource, "libfabric fi_getname failed: " + fi_error_text(rc));
  return std::string(buf, len);
}

std::string Endpoint::address_text(const std::string& address) const {
  char buf[128];
  size_t len = sizeof(buf);
  if (fi_av_straddr(av_, address.data(), buf, &len) == nullptr) return "?";
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

fi_addr_t Endpoint::insert(const std::string& address) {
  fi_addr_t a = FI_ADDR_UNSPEC;
  int n;
  {
    Call call(this);
    n = fi_av_insert(av_, address.data(), 1, &a, 0, nullptr);
  }
  if (n != 1) {
    throw Error(ErrorCode::kResource, "libfabric fi_av_insert of a peer address (" +
                                          std::to_string(address.size()) + " bytes) failed on " +
                                          provider_);
  }
  return a;
}

uint64_t Endpoint::requested_key() const {
  if (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) return 0;  // the provider's choice
  const size_t bytes = info_->domain_attr->mr_key_size;
  uint64_t key = random_u64();
  if (bytes > 0 && bytes < sizeof(key)) key &= (uint64_t{1} << (8 * bytes)) - 1;
  return key;
}

bool Endpoint::remove(fi_addr_t addr) {
  Call call(this);
  return fi_av_remove(av_, &addr, 1, 0) == 0;
}

Memory Endpoint::register_memory(void* buf, size_t len, uint64_t access) {
  Memory m;
  int rc;
  Call call(this);
  // A random key may collide with one in use: then draw another.
  for (int attempt = 0;; ++attempt) {
    rc = fi_mr_reg(domain_, buf, len, access, 0, requested_key(), 0, &m.mr, nullptr);
    if (rc != -FI_ENOKEY || attempt == 16) break;
  }
  check(rc, "fi_mr_reg");
  mrs_.push_back(m.mr);
  if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    check(fi_mr_bind(m.mr, &ep_->fid, 0), "fi_mr_bind");
    check(fi_mr_enable(m.mr), "fi_mr_enable");
  }
  if (access & (FI_REMOTE_WRITE | FI_REMOTE_READ)) peer_accessible(buf, len);
  m.desc = fi_mr_desc(m.mr);
  m.key = fi_mr_key(m.mr);
  m.base = remote_base(buf);
  return m;
}

uint64_t Endpoint::remote_base(const void* buf) const {
  return (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(buf) : 0;
}

ssize_t Endpoint::write_data(const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t peer,
                             uint64_t addr, uint64_t key, void* context) {
  Call call(this);
  return posted(fi_writedata(ep_, buf, len, desc, data, peer, addr, key, context));
}

void Endpoint::unregister(Memory& m) {
  if (m.mr == nullptr) return;
  Call call(this);
  for (auto it = mrs_.begin(); it != mrs_.end(); ++it) {
    if (*it == m.mr) {
      mrs_.erase(it);
      break;
    }
  }
  fi_close(&m.mr->fid);
  m = Memory{};
}

ssize_t Endpoint::read(void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t addr,
                       uint64_t key, void* context) {
  Call call(this);
  return posted(fi_read(ep_, buf, len, desc, peer, addr, key, context));
}

ssize_t Endpoint::write(const void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t addr,
                        uint64_t key, void* context) {
  Call call(this);
  return posted(fi_write(ep_, buf, len, desc, peer, addr, key, context));
}

ssize_t Endpoint::fetch_add(const uint64_t* operand, uint64_t* result, void* desc, fi_addr_t peer,
                            uint64_t addr, uint64_t key, void* context) {
  Call call(this);
  return posted(fi_fetch_atomic(ep_, operand, 1, desc, result, desc, peer, addr, key, FI_UINT64,
                                FI_SUM, context));
}

ssize_t Endpoint::compare_swap(const uint64_t* desired, const uint64_t* expected, uint64_t* result,
                               void* desc, fi_addr_t peer, uint64_t addr, uint64_t key,
                               void* context) {
  Call call(this);
  return posted(fi_compare_atomic(ep_, desired, 1, desc, expected, desc, result, desc, peer, addr,
                                  key, FI_UINT64, FI_CSWAP, context));
}

ssize_t Endpoint::tsend(const void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t tag,
                        void* context) {
  Call call(this);
  return posted(fi_tsend(ep_, buf, len, desc, peer, tag, context));
}

ssize_t Endpoint::send(const void* buf, size_t len, void* desc, fi_addr_t peer, void* context) {
  Call call(this);
  return posted(fi_send(ep_, buf, len, desc, peer, context));
}

ssize_t Endpoint::trecv(void* buf, size_t len, void* desc, uint64_t tag, void* context) {
  Call call(this);
  return fi_trecv(ep_, buf, len, desc, FI_ADDR_UNSPEC, tag, 0, context);
}

bool Endpoint::is_data_receive(const void* context) const {
  if (data_rx_ctx_ == nullptr || context == nullptr) return false;
  const auto* c = static_cast<const fi_context2*>(context);
  return std::less_equal<const fi_context2*>()(data_rx_ctx_, c) &&
         std::less<const fi_context2*>()(c, data_rx_ctx_ + kDataReceives);
}

void Endpoint::post_data_receive(fi_context2* ctx) {
  ssize_t rc;
  Call call(this);
  do {
    rc = fi_recv(ep_, nullptr, 0, nullptr, FI_ADDR_UNSPEC, ctx);
    if (rc == -FI_EAGAIN) fi_cq_read(cq_, nullptr, 0);
  } while (rc == -FI_EAGAIN);
}

void Endpoint::repost_data_receive() {
  if (data_rx_done_.empty()) return;
  fi_context2* ctx = data_rx_done_.back();
  data_rx_done_.pop_back();
  post_data_receive(ctx);
}

ssize_t Endpoint::poll(fi_cq_data_entry* out, size_t max, std::string* error,
                       void** failed_context) {
  Call call(this);
  return poll_locked(out, max, error, failed_context);
}

ssize_t Endpoint::poll_locked(fi_cq_data_entry* out, size_t max, std::string* error,
                              void** failed_context) {
  return complete(fi_cq_read(cq_, out, max), out, error, failed_context);
}

ssize_t Endpoint::poll_from(fi_cq_data_entry* out, fi_addr_t* sources, size_t max,
                            std::string* error, void** failed_context) {
  Call call(this);
  return poll_from_locked(out, sources, max, error, failed_context);
}

ssize_t Endpoint::poll_from_locked(fi_cq_data_entry* out, fi_addr_t* sources, size_t max,
                                   std::string* error, void** failed_context) {
  if (!source_) {
    for (size_t i = 0; i < max; ++i) sources[i] = FI_ADDR_NOTAVAIL;
    return poll_locked(out, max, error, failed_context);
  }
  return complete(fi_cq_readfrom(cq_, out, max, sources), out, error, failed_context);
}

namespace {
// A completion of an operation this endpoint posted (not of a receive, nor
// of a peer's write into it).
bool posted_here(uint64_t flags) {
  return (flags & (FI_SEND | FI_WRITE | FI_READ | FI_ATOMIC)) != 0 && (flags & FI_RECV) == 0;
}
}  // namespace

// What poll and wait return for `n`, the result of a CQ read into `out`;
// notes the data receives that completed.
ssize_t Endpoint::complete(ssize_t n, fi_cq_data_entry* out, std::string* error,
                           void** failed_context) {
  int64_t done = 0;
  for (ssize_t i = 0; i < n; ++i) {
    if (is_data_receive(out[i].op_context))
      data_rx_done_.push_back(static_cast<fi_context2*>(out[i].op_context));
    if (posted_here(out[i].flags)) ++done;
  }
  if (done != 0) outstanding_.fetch_sub(done, std::memory_order_relaxed);
  if (n >= 0) return n;
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    fi_cq_readerr(cq_, &err, 0);
    if (is_data_receive(err.op_context))
      data_rx_done_.push_back(static_cast<fi_context2*>(err.op_context));
    if (posted_here(err.flags)) outstanding_.fetch_sub(1, std::memory_order_relaxed);
    if (failed_context != nullptr) *failed_context = err.op_context;
    *error = std::string("a libfabric operation failed: ") + lib::strerror(err.err) + " (" +
             fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0) + ")";
    return -static_cast<ssize_t>(err.err == 0 ? FI_EIO : err.err);
  }
  *error = "fi_cq_read: " + fi_error_text(static_cast<int>(n));
  return n;
}

bool Endpoint::ready_to_block() {
  if (wait_fd_ < 0) return false;
  Call call(this);
  fid* f = &cq_->fid;
  return fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
}

ssize_t Endpoint::wait(fi_cq_data_entry* out, size_t max, std::chrono::milliseconds timeout,
                       std::string* error, void** failed_context) {
  if (!cq_waitable_) {
    ssize_t n = poll(out, max, error, failed_context);
    if (n == 0) {
      timespec ts{0, 200000};  // no wait object: poll every 0.2 ms
      nanosleep(&ts, nullptr);
    }
    return n;
  }
  Call call(this);
  return wait_locked(out, max, timeout, error, failed_context);
}

ssize_t Endpoint::wait_locked(fi_cq_data_entry* out, size_t max, std::chrono::milliseconds timeout,
                              std::string* error, void** failed_context) {
  ssize_t n = fi_cq_sread(cq_, out, max, nullptr, static_cast<int>(timeout.count()));
  if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == -FI_EINTR) return 0;
  if (n == -FI_EAVAIL) return poll_locked(out, max, error, failed_context);
  if (n >= 0) return complete(n, out, error, failed_context);
  *error = "fi_cq_sread: " + fi_error_text(static_cast<int>(n));
  return n;
}

ssize_t Endpoint::wait_from(fi_cq_data_entry* out, fi_addr_t* sources, size_t max,
                            std::chrono::milliseconds timeout, std::string* error,
                            void** failed_context) {
  if (!source_) {
    for (size_t i = 0; i < max; ++i) sources[i] = FI_ADDR_NOTAVAIL;
    return wait(out, max, timeout, error, failed_context);
  }
  if (!cq_waitable_) {
    ssize_t n = poll_from(out, sources, max, error, failed_context);
    if (n == 0) {
      timespec ts{0, 200000};  // no wait object: poll every 0.2 ms
      nanosleep(&ts, nullptr);
    }
    return n;
  }
  Call call(this);
  ssize_t n = fi_cq_sreadfrom(cq_, out, max, sources, nullptr, static_cast<int>(timeout.count()));
  if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == -FI_EINTR) return 0;
  if (n == -FI_EAVAIL) return poll_from_locked(out, sources, max, error, failed_context);
  if (n >= 0) return complete(n, out, error, failed_context);
  *error = "fi_cq_sreadfrom: " + fi_error_text(static_cast<int>(n));
  return n;
}

void Endpoint::interrupt_wait() {
  // Thread-safe by the API (a wait object's signal); not under Call, which
  // the blocked thread holds.
  if (cq_ != nullptr && cq_waitable_) (void)fi_cq_signal(cq_);
}

}  // namespace sluice::detail::ofi
