// One-sided memory regions (include/sluice/memory.h): the owner's side and
// the two ways a peer reaches a region (shm mapping, libfabric).
//
// Region memory is a memfd (so a killed owner leaves nothing behind):
//
//   0    Header: u64 magic | u64 bytes | u32 revoked | pad to 64
//   64   the region's bytes
//
// The emulated ofi path (no provider atomics, or no RMA) carries requests as
// tagged messages to the owner's service thread and answers the same way:
//
//   ServiceMessage (48 bytes), then up to kServicePayload bytes of data:
//   u32 magic | u16 op | u16 status | u32 client | u32 len | u64 id |
//   u64 offset | u64 a | u64 b
//
// op HELLO carries the requester's libfabric address as data; the answer's
// `a` is the client number it uses from then on. READ answers with the data,
// WRITE sends it; CAS takes (a = expected, b = desired), FETCH_ADD takes a =
// delta; both answer the previous value in `a`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sluice/memory.h"
#include "transport/ofi/ofi.h"
#include "transport/shm/region.h"

namespace sluice::control {
class PeerTable;
}

namespace sluice::detail {

namespace region_layout {
inline constexpr uint64_t kMagic = 0x4e4f494745524d53ULL;  // "SMREGION" little-endian
struct alignas(64) Header {
  uint64_t magic;
  uint64_t bytes;
  std::atomic<uint32_t> revoked;  // 1 once the owner revoked the region (release; peers acquire)
};
static_assert(sizeof(Header) == 64);
inline constexpr size_t kDataOffset = sizeof(Header);

enum Op : uint16_t { kHello = 1, kRead = 2, kWrite = 3, kCas = 4, kFetchAdd = 5 };
enum ServiceStatus : uint16_t { kServed = 0, kOutOfBounds = 1, kRevoked = 2, kBadRequest = 3 };
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
};
static_assert(sizeof(ServiceMessage) == 48);
inline constexpr size_t kServicePayload = 4096;
inline constexpr size_t kServiceMessageBytes = sizeof(ServiceMessage) + kServicePayload;
inline constexpr uint64_t kTagRequest = 5ULL << 60;
inline constexpr uint64_t kTagReply = 6ULL << 60;
}  // namespace region_layout

class RegionOwner {
 public:
  // Creates the memory and, if `use_ofi`, the endpoint, its registration and
  // the service thread. Throws Error(kResource).
  RegionOwner(std::string name, size_t bytes, bool use_ofi, const ofi::Config& cfg, const std::string& host_id);
  ~RegionOwner();

  // What peers need to open it (published in the registry).
  const std::string& descriptor() const { return descriptor_; }
  std::byte* data() const { return mem_.data() + region_layout::kDataOffset; }
  size_t size() const { return bytes_; }
  const std::string& name() const { return name_; }
  const char* path() const { return ep_ != nullptr ? "ofi" : "shm"; }
  void revoke();

 private:
  void serve();
  void handle_request(uint32_t slot, size_t len);
  void post_request_receive(uint32_t slot);
  region_layout::Header* header() const { return reinterpret_cast<region_layout::Header*>(mem_.data()); }

  std::string name_;
  size_t bytes_;
  SharedRegion mem_;
  std::string descriptor_;
  // ofi only. The endpoint is touched only by the service thread once it runs.
  std::unique_ptr<ofi::Endpoint> ep_;
  ofi::Memory mr_;
  std::vector<std::byte> requests_;  // kServiceRequests buffers
  std::vector<std::byte> replies_;
  ofi::Memory requests_mr_, replies_mr_;
  std::vector<fi_context2> recv_ctx_, send_ctx_;
  std::vector<fi_addr_t> clients_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> revoke_requested_{false};
  std::atomic<bool> revoke_done_{false};
  std::thread service_;
};

class RegionAccess {
 public:
  virtual ~RegionAccess() = default;
  // Opens region `name` of rank `owner` from the descriptor it published.
  // Throws Error naming the region on a malformed or unreachable descriptor.
  static std::unique_ptr<RegionAccess> open(const std::string& name, uint32_t owner, const std::string& descriptor,
                                            const std::string& host_id, const ofi::Config& cfg,
                                            const control::PeerTable* peers);

  virtual Status read(uint64_t offset, std::byte* out, size_t len, Deadline deadline) = 0;
  virtual Status write(uint64_t offset, const std::byte* in, size_t len, Deadline deadline) = 0;
  virtual Status compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired, uint64_t* previous,
                                  Deadline deadline) = 0;
  virtual Status fetch_add(uint64_t offset, uint64_t delta, uint64_t* previous, Deadline deadline) = 0;
  virtual const char* path() const = 0;

  size_t size() const { return bytes_; }
  uint32_t owner() const { return owner_; }
  const std::string& error() const { return error_; }

 protected:
  RegionAccess(std::string name, uint32_t owner, size_t bytes) : name_(std::move(name)), owner_(owner), bytes_(bytes) {}
  // kInvalid naming the problem if [offset, offset+len) is outside the
  // region, or (atomics) not one aligned 64-bit word.
  Status check_range(uint64_t offset, size_t len, bool atomic);
  Status fail(Status s, const std::string& what);
  std::string what() const;

  std::string name_;
  uint32_t owner_;
  size_t bytes_;
  std::string error_;
};

}  // namespace sluice::detail
