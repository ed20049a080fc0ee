// One-sided memory regions (include/sluice/memory.h): the owner's side and
// the two ways a peer reaches a region (shm mapping, libfabric).
//
// Region memory is a memfd (so a killed owner leaves nothing behind):
//
//   0    Header: u64 magic | u64 bytes | u32 revoked | pad to 64
//   64   the region's bytes
//
// Descriptors (published in the registry under region/<name>/<owner>):
//
//   shm <bytes> <pid> <fd> <nonce> <host identity>
//   ofi <bytes> <address hex> <caps> <key> <base> <nonce> <host identity>
//
// (<key> is 0: over ofi every client gets its own registration of the
// region, and its key, from HELLO; see fencing below.)
//
// <nonce> is the memfd's random identity (SharedRegion::nonce): a peer maps
// the region only if the file it opened carries it, so a descriptor left
// behind by a region whose fd number was since reused fails to open instead
// of mapping other memory; over ofi, HELLO presents it (in `a`) and the
// service refuses another region's (WRONG_REGION). <caps> is the owner's
// decision for every rank: "atomic" (provider RMA and atomics: every client
// must use the provider's atomics, the service refuses emulated ones), "rma"
// (provider RMA, atomics emulated by the service) or "msg" (everything
// through the service).
//
// The emulated ofi path (no provider atomics, or no RMA) carries requests as
// tagged messages to the owner's service thread and answers the same way:
//
//   ServiceMessage (56 bytes), then up to kServicePayload bytes of data:
//   0  u32 magic | 4 u16 op | 6 u16 status | 8 u32 client | 12 u32 len |
//   16 u64 id | 24 u64 offset | 32 u64 a | 40 u64 b | 48 u64 token
//
// op HELLO carries the requester's libfabric address as data, the region's
// nonce in `a` and the requester's rank + 1 and incarnation in `b` (low and
// high 32 bits; rank 0 there: not a rank of the job); the answer's `offset`
// is the client's own key for provider RMA and atomics (an owner without RMA:
// 0), `a` is the client number and `b` the token it uses from then on (the token
// is random: a request is served only with the token its client number was
// given, and, where the provider names senders (FI_SOURCE), only from the
// address that client said HELLO from). The service keeps at most
// kMaxServiceClients clients: BYE frees one (sent when a handle closes), and
// a HELLO beyond the bound evicts the least recently used (its address stays
// in the address vector among the last kMaxServiceClients evicted; its key
// is closed, so an evicted handle's provider operations fail kClosed, as on
// a revoked region, and it must be opened again). A
// request it cannot tie to a client is answered UNKNOWN_CLIENT where the
// provider names the sender (the client says HELLO again and retries:
// nothing was applied), and dropped otherwise (the client times out). READ answers with the data,
// WRITE sends it; CAS takes (a = expected, b = desired), FETCH_ADD takes a = delta; both answer the
// previous value in `a`.
//
// Fencing (docs/architecture.md): when the registry declares a rank lost,
// the Cluster asks every region it owns to fence that rank's incarnation
// before the new view reaches any thread of this process (ask_fence): the
// service forgets the rank's clients and closes their registrations, so
// their RMA, atomics and emulated requests are refused from then on, and a
// HELLO from that incarnation is answered FENCED. A process on another host
// that the survivors gave up on (stopped, cut off) and that resumes can then
// write nothing more into the region.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "observe/endpoint_counters.h"
#include "sluice/memory.h"
#include "transport/ofi/ofi.h"
#include "transport/shm/region.h"

namespace sluice::control {
class PeerTable;
}

namespace sluice::detail {

class Linger;

namespace region_layout {
inline constexpr uint64_t kMagic = 0x4e4f494745524d53ULL;  // "SMREGION" little-endian
struct alignas(64) Header {
  uint64_t magic;
  uint64_t bytes;
  std::atomic<uint32_t> revoked;  // 1 once the owner revoked the region (release; peers acquire)
};
static_assert(sizeof(Header) == 64);
inline constexpr size_t kDataOffset = sizeof(Header);
// The mapping behind a region of `bytes` bytes: the header, then the data
// rounded up to a cache line (at least 8 bytes, one atomic word).
inline size_t mapped_bytes(size_t bytes) {
  return kDataOffset + (std::max<size_t>(bytes, 8) + 63) / 64 * 64;
}

enum Op : uint16_t { kHello = 1, kRead = 2, kWrite = 3, kCas = 4, kFetchAdd = 5, kBye = 6 };
enum ServiceStatus : uint16_t {
  kServed = 0,
  kOutOfBounds = 1,
  kRevoked = 2,
  kBadRequest = 3,
  kUnknownClient = 4,  // say HELLO again; the request was not applied
  kNotEmulated = 5,    // the region uses provider atomics: emulated ones are refused
  kWrongRegion = 6,    // HELLO named another region's nonce: a stale descriptor
  kFenced = 7,         // HELLO from a rank's incarnation the job declared lost
};
inline constexpr uint32_t kServiceMagic = 0x53525643;  // "CVRS"
struct ServiceMessage {
  uint32_t magic;
  uint16_t op;
  uint16_t status;
  uint32_t client;
  uint32_t len;
  uint64_t id;
  uint64_t offset;
  uint64_t a;
  uint64_t b;
  uint64_t token;
};
static_assert(sizeof(ServiceMessage) == 56);
static_assert(offsetof(ServiceMessage, id) == 16 && offsetof(ServiceMessage, token) == 48);
inline constexpr size_t kServicePayload = 4096;
inline constexpr size_t kServiceMessageBytes = sizeof(ServiceMessage) + kServicePayload;
inline constexpr uint64_t kTagRequest = 5ULL << 60;
inline constexpr uint64_t kTagReply = 6ULL << 60;
// Clients one region service keeps (each an address vector entry).
inline constexpr size_t kMaxServiceClients = 1024;
}  // namespace region_layout

class RegionOwner {
 public:
  // Creates the memory and, if `use_ofi`, the endpoint, its registration and
  // the service thread, which keeps at most `max_clients` clients. Throws
  // Error(kResource).
  RegionOwner(std::string name, size_t bytes, bool use_ofi, const ofi::Config& cfg,
              const std::string& host_id, size_t max_clients = region_layout::kMaxServiceClients);
  ~RegionOwner();

  // What peers need to open it (published in the registry).
  const std::string& descriptor() const { return descriptor_; }
  std::byte* data() const { return mem_.data() + region_layout::kDataOffset; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }
  const char* path() const { return ep_ != nullptr ? "ofi" : "shm"; }
  void revoke();
  // Refuses rank `rank`'s incarnations up to `incarnation` from now on:
  // forgets their clients and closes their registrations (ofi; shm peers map
  // the memory and are fenced by the host, see control/fence.h). In two
  // halves, so that many regions fence side by side: ask_fence queues it
  // for the service thread and returns a ticket (0: nothing to wait for);
  // await_fence waits until the service did it (ask_fence wakes it), or until
  // `give_up` (then false, and a warning). Any thread.
  uint64_t ask_fence(uint32_t rank, uint32_t incarnation);
  bool await_fence(uint64_t ticket, Clock::time_point give_up);
  // Runs `fn` first thing in the destructor (the Cluster withdraws the
  // region's name there). `fn` must not throw.
  void on_destroy(std::function<void()> fn) { on_destroy_ = std::move(fn); }
  // Clients the emulated service currently knows (for tests).
  size_t service_clients() const { return live_clients_.load(std::memory_order_relaxed); }

 private:
  struct ServiceBuffers;
  struct Client {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    uint64_t token = 0;  // 0: the slot is free
    uint64_t last_used = 0;
    uint64_t who = 0;  // HELLO's `b`: rank + 1 (0: none) | incarnation << 32
    ofi::Memory mr;    // its own registration of the region (provider RMA)
  };
  // Applies the fence requests ask_fence queued (service thread).
  void apply_fences();
  // True if `who` (HELLO's `b`) names a fenced incarnation.
  bool fenced(uint64_t who) const;
  void serve();
  void handle_request(uint32_t slot, size_t len, fi_addr_t source);
  // The client `req` names if its token and (where known) its source match.
  Client* client_of(uint32_t id, uint64_t token, fi_addr_t source);
  // True if `addr` is an admitted client's address.
  bool is_client(fi_addr_t addr) const;
  uint32_t admit(fi_addr_t addr);
  void forget(Client& c);
  void retire(fi_addr_t addr);
  void post_request_receive(uint32_t slot);
  void send_reply(uint32_t slot, const region_layout::ServiceMessage& rep, fi_addr_t to);
  region_layout::Header* header() const {
    return reinterpret_cast<region_layout::Header*>(mem_.data());
  }

  std::string name_;
  size_t bytes_;
  SharedRegion mem_;
  std::string descriptor_;
  std::function<void()> on_destroy_;
  // ofi only. The endpoint is touched only by the service thread once it runs.
  std::unique_ptr<ofi::Endpoint> ep_;
  // Request and reply buffers and their contexts, owned by ep_.
  ServiceBuffers* bufs_ = nullptr;
  ofi::Memory bufs_mr_;
  bool native_atomics_ = false;  // published as "atomic": emulated atomics are refused
  size_t max_clients_;
  std::vector<Client> clients_;    // indexed by client number, at most max_clients_
  std::deque<fi_addr_t> retired_;  // evicted clients' addresses, at most max_clients_
  uint64_t clock_ = 0;             // counts requests, for least-recently-used eviction
  std::atomic<size_t> live_clients_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> revoke_requested_{false};
  std::atomic<bool> revoke_done_{false};
  // ask_fence's requests (rank, incarnation), applied by the service thread.
  std::mutex fence_mu_;
  std::vector<std::pair<uint32_t, uint32_t>> fence_requests_;
  std::atomic<uint64_t> fences_asked_{0}, fences_done_{0};
  std::vector<uint32_t> fenced_below_;  // per rank: incarnations below this are refused
  std::thread service_;
};

class RegionAccess;
// ~RemoteRegion: destroys `access` at once, or on its Linger if that would
// wait for a goodbye to the owner (flow/release.cc).
void release_region(std::unique_ptr<RegionAccess> access) noexcept;

class RegionAccess {
 public:
  virtual ~RegionAccess();
  // Opens region `name` of rank `owner` from the descriptor it published;
  // `who`: this process's rank + 1 and incarnation (HELLO's `b`; 0: not a
  // rank of the job). Throws Error naming the region on a malformed or
  // unreachable descriptor.
  static std::unique_ptr<RegionAccess> open(const std::string& name, uint32_t owner,
                                            const std::string& descriptor,
                                            const std::string& host_id, const ofi::Config& cfg,
                                            const control::PeerTable* peers, uint64_t who = 0);

  virtual Status read(uint64_t offset, std::byte* out, size_t len, Deadline deadline) = 0;
  virtual Status write(uint64_t offset, const std::byte* in, size_t len, Deadline deadline) = 0;
  virtual Status compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired,
                                  uint64_t* previous, Deadline deadline) = 0;
  virtual Status fetch_add(uint64_t offset, uint64_t delta, uint64_t* previous,
                           Deadline deadline) = 0;
  virtual const char* path() const = 0;
  // Destroying it now would wait (at most 200 ms) for its goodbye to the
  // owner's service to leave: ~RemoteRegion destroys it on `linger` then.
  virtual bool ends_with_wait() const { return false; }
  // The Cluster's Linger (set by Cluster::open_region; null elsewhere).
  Linger* linger = nullptr;

  // Calls fn(arg) every few polls while an operation of this handle waits
  // (ofi: an operation takes tens of microseconds; shm operations never
  // wait). An ordered flow's source drives its own endpoint there, so that
  // what it posted keeps moving while its fetch-and-add is out (a provider
  // with manual progress moves data only while its queue is read). fn must
  // not use this handle. Null: nothing.
  void set_while_waiting(void (*fn)(void*), void* arg) {
    while_waiting_ = fn;
    while_waiting_arg_ = arg;
  }

  // How many polls an operation spins before it yields its core between
  // polls (ofi; default kDefaultSpinPolls, tens of operations' worth). A
  // caller whose answer comes from a thread that may need this core spins
  // less.
  static constexpr uint32_t kDefaultSpinPolls = 2000;
  void set_spin_polls(uint32_t polls) { spin_polls_ = polls; }

  size_t size() const { return bytes_; }
  uint32_t owner() const { return owner_; }
  const std::string& error() const { return error_; }

  // Gives the handle a counters slot (role kRegion) as rank `rank`'s: what
  // RemoteRegion does is then counted there (`sluice top`, Prometheus). The
  // flows' own sequencers are not counted here but by their sources.
  void count_as(uint32_t rank);
  // Counts one operation that moved `bytes` and returned `s`; returns `s`.
  Status counted(Status s, size_t bytes);

 protected:
  RegionAccess(std::string name, uint32_t owner, size_t bytes)
      : name_(std::move(name)), owner_(owner), bytes_(bytes) {}
  // kInvalid naming the problem if [offset, offset+len) is outside the
  // region, or (atomics) not one aligned 64-bit word.
  Status check_range(uint64_t offset, size_t len, bool atomic);
  Status fail(Status s, const std::string& what);
  std::string what() const;
  void while_waiting() const {
    if (while_waiting_ != nullptr) while_waiting_(while_waiting_arg_);
  }

  std::string name_;
  uint32_t owner_;
  size_t bytes_;
  std::string error_;
  counters::Slot* stats_ = nullptr;  // set by count_as()
  void (*while_waiting_)(void*) = nullptr;
  void* while_waiting_arg_ = nullptr;
  uint32_t spin_polls_ = kDefaultSpinPolls;
};

}  // namespace sluice::detail
