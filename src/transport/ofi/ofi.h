// The ofi transport's libfabric layer: one reliable-datagram (FI_EP_RDM)
// endpoint with its own fabric, domain, address vector and completion queue,
// owned by exactly one flow source or target (so no locking is ever needed:
// FI_THREAD_DOMAIN). Everything provider-specific is decided here once, from
// what fi_getinfo reports, so that tcp;ofi_rxm, verbs;ofi_rxm and efa take
// the same code path:
//   - FI_MR_LOCAL / FI_MR_VIRT_ADDR / FI_MR_PROV_KEY / FI_MR_ENDPOINT are
//     honoured when the provider asks for them;
//   - FI_RX_CQ_DATA (remote CQ data consumes a posted receive, as on verbs)
//     is handled by keeping zero-byte receives posted;
//   - a provider without FI_RMA (or ofi_rma = off) gets the message path;
//   - FI_SOURCE is asked for where the provider has it, so that receive
//     completions name their sender (poll_from / wait_from);
//   - RMA keys are the provider's (FI_MR_PROV_KEY) or random ones of the
//     provider's key size, never guessable sequence numbers.
//
// Ownership of memory a NIC may touch: registered buffers and operation
// contexts must outlive every operation that uses them, and an abandoned
// endpoint (see abandon()) never finishes its operations. Hand such memory to
// the endpoint with own() or get it from allocate(): the endpoint frees it
// after closing itself and its registrations, or never if it was abandoned.
//
// Thread safety: an Endpoint is used by one thread at a time.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "sluice/options.h"

namespace sluice::detail::ofi {

// How this process uses libfabric: from the Cluster's options
// (ClusterOptions::ofi_*), shared by every endpoint of the Cluster.
struct Config {
  // "tcp", "verbs", "efa" or "shm"; empty: the best present, in that order
  // of preference: verbs, efa, tcp.
  std::string provider;
  // Use RMA writes when the provider offers them (ofi_rma = off: never).
  bool allow_rma = true;
  // ofi_rma = on: fail rather than fall back to messages without RMA.
  bool require_rma = false;
  // The local address to bind endpoints to (the interface the registry is
  // reached through, so that data goes where control does).
  std::string node;
  // Test builds only (SLUICE_OFI_TEST_UNORDERED=1): deliver completions and
  // post receive buffers in shuffled order, as an unordered provider might.
  bool test_unordered = false;
  // Use the provider's 64-bit atomics for memory regions when it has them
  // (ofi_atomic = off: never, so regions use their emulated path).
  bool allow_atomic = true;
  // ofi_atomic = on: a region endpoint fails rather than go without them.
  bool require_atomic = false;
  // The endpoint serves or accesses a memory region: it also asks for RMA
  // reads and, where allowed, atomics.
  bool region = false;
  // Tests only (no environment switch): keep zero-byte data receives posted
  // as on an FI_RX_CQ_DATA provider, even where the provider needs none.
  bool test_data_receives = false;
  // Ask for a completion queue with a wait fd (FI_WAIT_FD) first. False in
  // test builds with SLUICE_TEST_OFI_NO_WAIT_FD=1, as on a provider
  // without one.
  bool wait_fd = true;
};

// The Config for `options` (validated), binding to `node`; test_unordered
// and wait_fd come from the test hooks (common/test_hooks.h).
Config config_from_options(const ClusterOptions& options, const std::string& node);

// Loads libfabric (fabric_lib.h) if it is not loaded yet; returns how many
// of SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT and SIGTERM loading put back to
// what they were before, where libfabric's dependencies (Debian's
// libinfinipath, for the PSM provider) installed handlers that turn them
// into exit(1). Handlers the program installed itself are kept.
int restore_signal_dispositions();

// A registered memory region.
struct Memory {
  fid_mr* mr = nullptr;
  void* desc = nullptr;  // for local operations (FI_MR_LOCAL providers)
  uint64_t key = 0;      // for peers
  uint64_t base = 0;     // remote address of byte 0 (virtual address or 0)
};

class Endpoint {
 public:
  // Opens fabric, domain, AV, CQ and endpoint for `cfg`. Throws
  // Error(kResource) naming the provider and the failing call, with a hint.
  explicit Endpoint(const Config& cfg);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  const std::string& provider_name() const { return provider_; }
  // What the provider granted (caps, modes, ordering, MR mode, names), for
  // diagnostics (`sluice info`); valid while the endpoint lives.
  const fi_info* info() const { return info_; }
  bool rma() const { return rma_; }
  // 64-bit fetch-add and compare-and-swap (region endpoints only).
  bool atomic() const { return atomic_; }
  // This endpoint's address, as bytes to publish through the registry.
  std::string address() const;
  // A published address as text (fi_av_straddr: e.g.
  // "fi_sockaddr_in://10.0.0.2:41234"), for logs; "?" if the provider cannot.
  std::string address_text(const std::string& address) const;
  // Adds a peer's published address; returns its fi_addr_t.
  fi_addr_t insert(const std::string& address);
  // Removes a peer insert() added (its fi_addr_t may be reused). Returns
  // false if the provider refused (the entry then stays).
  bool remove(fi_addr_t addr);

  // Registers [buf, buf+len) with the given access (FI_WRITE, FI_REMOTE_WRITE...).
  // The key is the provider's where it chooses keys (FI_MR_PROV_KEY), else
  // random (getrandom) within the provider's mr_key_size.
  // REQUIRES: the buffer stays allocated while the registration is open, and
  // for good if the endpoint may be abandoned: own() or allocate() it.
  Memory register_memory(void* buf, size_t len, uint64_t access);
  // The remote address of `buf` in a registration of it (Memory::base): its
  // virtual address where the provider addresses memory so, else 0.
  uint64_t remote_base(const void* buf) const;
  // Closes a registration early (peers' later accesses through it fail).
  void unregister(Memory& m);

  // Posts. Return 0, or -FI_EAGAIN when the provider is out of resources
  // (the caller progresses and retries), or another negative fi_errno.
  ssize_t write_data(const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t peer,
                     uint64_t addr, uint64_t key, void* context);
  ssize_t tsend(const void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t tag,
                void* context);
  // An untagged message: it lands in one of the data receives (if any).
  ssize_t send(const void* buf, size_t len, void* desc, fi_addr_t peer, void* context);
  ssize_t trecv(void* buf, size_t len, void* desc, uint64_t tag, void* context);
  ssize_t read(void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t addr, uint64_t key,
               void* context);
  ssize_t write(const void* buf, size_t len, void* desc, fi_addr_t peer, uint64_t addr,
                uint64_t key, void* context);
  // 64-bit atomics on the peer's word at addr; the old value lands in *result.
  ssize_t fetch_add(const uint64_t* operand, uint64_t* result, void* desc, fi_addr_t peer,
                    uint64_t addr, uint64_t key, void* context);
  ssize_t compare_swap(const uint64_t* desired, const uint64_t* expected, uint64_t* result,
                       void* desc, fi_addr_t peer, uint64_t addr, uint64_t key, void* context);

  // Gives the endpoint ownership of `p`, memory that a posted operation or a
  // registration may still touch (a registered buffer, an fi_context2):
  // the destructor calls release(p) after closing the endpoint and its
  // registrations; an abandoned endpoint never does (p stays allocated and
  // reachable for the rest of the process, as the endpoint itself does).
  // Released in the reverse order of own() calls.
  // REQUIRES: p != nullptr, release != nullptr; p is owned by nothing else.
  // Throws std::bad_alloc without taking p (the caller still owns it).
  void own(void* p, void (*release)(void*));
  // Allocates `bytes` zeroed bytes aligned to 64 and own()s them.
  // Throws std::bad_alloc.
  std::byte* allocate(size_t bytes);
  // allocate() for an array of `n` trivially destructible T, value-initialised.
  template <class T>
  T* allocate_array(size_t n) {
    static_assert(std::is_trivially_destructible_v<T> && alignof(T) <= 64);
    std::byte* p = allocate(sizeof(T) * (n == 0 ? 1 : n));
    T* first = reinterpret_cast<T*>(p);
    for (size_t i = 0; i < n; ++i) new (first + i) T();
    return first;
  }

  // Reads up to `max` completions without blocking (this is also what drives
  // progress on providers with manual progress). Returns how many, or a
  // negative fi_errno on a failed operation (*error says why and
  // *failed_context is that operation's context).
  ssize_t poll(fi_cq_data_entry* out, size_t max, std::string* error, void** failed_context);
  // As poll, but blocks up to `timeout` for the first completion.
  ssize_t wait(fi_cq_data_entry* out, size_t max, std::chrono::milliseconds timeout,
               std::string* error, void** failed_context);
  // A file descriptor that poll(2) reports readable when completions may be
  // waiting (the CQ's FI_WAIT_FD wait object), for a thread that sleeps on
  // several endpoints at once; -1 where the provider has none (then use
  // wait()). Owned by the endpoint.
  int wait_fd() const { return wait_fd_; }
  // fi_trywait: true if this thread may now block on wait_fd() until it is
  // readable; false if completions (or provider progress) are pending, and
  // the caller must read the queue instead of blocking. Always false where
  // wait_fd() is -1.
  bool ready_to_block();
  // The provider reports who sent a received message or remote CQ data
  // (FI_SOURCE). False: poll_from/wait_from report FI_ADDR_NOTAVAIL.
  bool knows_sources() const { return source_; }
  // As poll and wait, and sets sources[i] to the sender of out[i]: the
  // fi_addr_t that insert() returned for that peer, for completions of
  // receives and of remote writes with CQ data. FI_ADDR_NOTAVAIL where the
  // sender is unknown (not inserted in this endpoint's address vector, or
  // knows_sources() is false); unspecified for local completions (sends,
  // RMA issued here). A caller that must tie data to a sender treats
  // FI_ADDR_NOTAVAIL as "not that sender".
  ssize_t poll_from(fi_cq_data_entry* out, fi_addr_t* sources, size_t max, std::string* error,
                    void** failed_context);
  ssize_t wait_from(fi_cq_data_entry* out, fi_addr_t* sources, size_t max,
                    std::chrono::milliseconds timeout, std::string* error, void** failed_context);
  // Wakes a thread blocked in wait() or wait_from() on this endpoint now
  // (fi_cq_signal: it returns 0 completions); from any thread. A thread
  // not blocked yet is not affected (it waits its timeout as usual), so
  // a caller sets its own flag first and the woken thread reads it.
  void interrupt_wait();

  // Remote CQ data costs a posted receive on this provider (FI_RX_CQ_DATA):
  // call after every such completion to replace it. Each posted receive has
  // a context of its own; poll and wait note which completed, and this
  // reposts one of those (it does nothing if none completed since).
  bool needs_data_receives() const { return rx_cq_data_; }
  void repost_data_receive();
  // Width of remote CQ data in bytes (4 on verbs and efa, 8 on tcp).
  size_t cq_data_size() const { return cq_data_size_; }
  bool test_unordered() const { return test_unordered_; }
  // True for the completion of one of those zero-byte receives.
  bool is_data_receive(const void* context) const;

  // Makes the destructor leave the libfabric objects open (and unused) for
  // the rest of the process instead of closing them, and keep what it owns
  // (own(), allocate()) allocated. For an endpoint that a
  // peer left in the middle of a transfer (it died, or gave up): closing such
  // an endpoint can crash inside libfabric 1.17's tcp;ofi_rxm, whose close
  // flushes the half-received transfer as a cancelled completion and then
  // reads that completion's context as its own. With manual data progress
  // nothing touches an abandoned endpoint again; its sockets and memory go
  // when the process exits. A job loses one endpoint per failed flow endpoint.
  void abandon();

  // The ProgressAgent's view (progress_agent.h). Every libfabric call on
  // this endpoint holds call_mu_, so that the agent's thread never enters
  // the provider beside the owner's (FI_THREAD_DOMAIN).
  // Calls the owner made so far (the agent compares two looks).
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  // Operations this endpoint posted (sends, RMA, atomics) whose completion
  // it has not read yet.
  bool outstanding() const { return outstanding_.load(std::memory_order_relaxed) > 0; }
  // Drives the provider once without reading a completion (they stay for
  // the owner), unless the owner is in a call on it: true if it did.
  bool progress_if_idle();

 private:
  class Call;  // holds call_mu_ for one owner call
  ssize_t posted(ssize_t rc);
  ssize_t poll_locked(fi_cq_data_entry* out, size_t max, std::string* error, void** failed_context);
  ssize_t wait_locked(fi_cq_data_entry* out, size_t max, std::chrono::milliseconds timeout,
                      std::string* error, void** failed_context);
  ssize_t poll_from_locked(fi_cq_data_entry* out, fi_addr_t* sources, size_t max,
                           std::string* error, void** failed_context);
  void check(int rc, const char* what);
  ssize_t complete(ssize_t n, fi_cq_data_entry* out, std::string* error, void** failed_context);
  void post_data_receive(fi_context2* ctx);
  uint64_t requested_key() const;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  std::vector<fid_mr*> mrs_;
  std::string provider_;
  bool rma_ = false;
  bool atomic_ = false;
  bool rx_cq_data_ = false;
  bool cq_waitable_ = true;
  int wait_fd_ = -1;
  bool test_unordered_ = false;
  bool abandoned_ = false;
  bool source_ = false;
  size_t cq_data_size_ = 0;
  // Owned memory, released in reverse order after everything is closed.
  std::vector<std::pair<void*, void (*)(void*)>> owned_;
  // The zero-byte data receives' contexts (kDataReceives, endpoint-owned),
  // and those whose receive completed and awaits repost_data_receive().
  fi_context2* data_rx_ctx_ = nullptr;
  std::vector<fi_context2*> data_rx_done_;
  mutable Mutex call_mu_;  // mutable: const calls (address()) hold it too
  mutable std::atomic<uint64_t> calls_{0};
  std::atomic<int64_t> outstanding_{0};
  bool watched_ = false;  // registered with the ProgressAgent
};

}  // namespace sluice::detail::ofi
