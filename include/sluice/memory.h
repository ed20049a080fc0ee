/// @file
/// sluice/memory.h: one-sided memory regions, for NAM-style applications.
///
/// A rank exposes a region of its memory under a name (Cluster::expose);
/// any rank opens it (Cluster::open_region) and reads, writes, and updates
/// 64-bit words atomically without the owner's application threads taking
/// part:
///
/// @code
///   auto counter = cluster.expose("counter", 4096);          // on rank 0
///   cluster.barrier("exposed");
///   auto r = cluster.open_region("counter", /*owner=*/0);    // on any rank
///   auto old = r.fetch_add(0, 1);                          // the word before
///   if (!old) { ... old.status(), r.error() ... } else use(*old);
/// @endcode
///
/// How a region is reached is decided once, when it is exposed, for every
/// rank alike (atomics are only atomic with respect to operations that take
/// the same path):
///   - "shm": every rank of the job is on the owner's host (and
///     SLUICE_TRANSPORT is not ofi). Peers map the owner's memory; reads and
///     writes are memcpy, atomics are the CPU's (std::atomic_ref).
///   - "ofi": otherwise. Every rank, the owner included, goes through
///     libfabric: fi_read / fi_write and fi_fetch_atomic / fi_compare_atomic
///     where the provider has them (tcp;ofi_rxm, verbs, efa). A provider
///     without 64-bit atomics (or SLUICE_OFI_ATOMIC=0) gets the emulated
///     path: the request goes as a message to the owner's region service
///     thread, which applies it with CPU atomics and answers; without RMA
///     (SLUICE_OFI_RMA=0) reads and writes go the same way. Over tcp the
///     owner's service thread also drives the provider's progress, which RMA
///     to that endpoint needs (on verbs and efa the NIC does it).
///     Which atomics a region uses is the owner's decision (its provider and
///     its SLUICE_OFI_ATOMIC), published with the region: every rank follows
///     it whatever its own setting, since the NIC's atomics and the service's
///     CPU atomics are not atomic with respect to each other. A rank whose
///     provider lacks the atomics the owner chose cannot open the region
///     (Error(kResource) saying so); the service refuses emulated atomics on
///     a region that uses the provider's.
///
/// A descriptor names one exposed region: opening a region its owner has
/// since destroyed fails (shm: Error(kResource) calling the descriptor stale,
/// even if the owner's memory or fd numbers were reused; ofi: its operations
/// fail with kClosed or kPeerLost), never reaches other memory.
/// MemoryRegion::data() gives the owner direct access; its plain reads are
/// fine at any time, but an owner that updates words peers update atomically
/// must do so through open_region() too.
///
/// Errors are Status values, as on the data plane: kInvalid for an access out
/// of bounds or a misaligned atomic (nothing is done), kClosed once the owner
/// revoked the region, kPeerLost if the owner is gone (or, over ofi, if the
/// job declared this rank lost: the owner then refuses it, see
/// docs/architecture.md, fencing), kTimeout at the
/// deadline. After kTimeout or kPeerLost on the ofi path the handle is
/// unusable (an operation may still be in flight); open a new one.
/// A write, compare_and_swap or fetch_add that returned kTimeout or kPeerLost
/// may nevertheless have been applied at the owner (the request reached it,
/// the answer did not come back in time), and no previous word is known then:
/// before retrying on a new handle, read the word (or make the update
/// idempotent, e.g. a CAS from a value only this caller can produce).
///
/// Thread safety: a RemoteRegion is used by one thread at a time (open one per
/// thread). MemoryRegion's methods may be called from any thread.
///
/// Ownership: both handles refer to their Cluster and must be destroyed before
/// it. Destroying a MemoryRegion revokes it and withdraws it from the
/// registry: open_region() of it then fails at once (Error(kInvalidArgument)),
/// and its name may be exposed again (a new region: handles opened on the old
/// one never reach it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "sluice/errors.h"
#include "sluice/export.h"
#include "sluice/flow.h"

SLUICE_API_BEGIN
namespace sluice {

namespace detail {
class RegionOwner;
class RegionAccess;
}  // namespace detail

/// The owner's side of an exposed region. Move-only.
class MemoryRegion {
 public:
  /// An empty handle; Cluster::expose makes regions.
  MemoryRegion();
  /// Moves the region; the moved-from handle is empty.
  ///@{
  MemoryRegion(MemoryRegion&&) noexcept;
  MemoryRegion& operator=(MemoryRegion&&) noexcept;
  ///@}
  ~MemoryRegion();

  /// The region's bytes in this process (zeroed when exposed).
  std::byte* data() const;
  /// The region's size in bytes.
  size_t size() const;
  /// The name it is exposed under.
  const std::string& name() const;
  /// "shm" or "ofi": how every rank reaches this region.
  const char* path() const;
  /// Stops all further access by peers: their operations after this returns
  /// fail with kClosed. Idempotent.
  void revoke();
  /// False for a default-constructed or moved-from handle.
  explicit operator bool() const { return impl_ != nullptr; }

 private:
  friend class Cluster;
  explicit MemoryRegion(std::unique_ptr<detail::RegionOwner> impl);
  std::unique_ptr<detail::RegionOwner> impl_;
};

/// A peer's handle to a region, for one thread. Move-only. Every operation
/// waits until it completed at the owner (or fails), so the operations of a
/// handle take effect in the order they are issued: a write is visible to
/// every peer before the handle's next read or atomic runs (over shm a full
/// fence follows each write). Offsets are bytes from the region's start.
class RemoteRegion {
 public:
  /// An empty handle; Cluster::open_region opens regions.
  RemoteRegion();
  /// Moves the handle; the moved-from one is empty.
  ///@{
  RemoteRegion(RemoteRegion&&) noexcept;
  RemoteRegion& operator=(RemoteRegion&&) noexcept;
  ///@}
  ~RemoteRegion();

  /// Copies [offset, offset + out.size()) of the region into `out`.
  [[nodiscard]] Status read(uint64_t offset, std::span<std::byte> out,
                            Deadline deadline = kForever);
  /// Copies `in` to [offset, offset + in.size()).
  [[nodiscard]] Status write(uint64_t offset, std::span<const std::byte> in,
                             Deadline deadline = kForever);
  /// Atomically: previous = word; if (word == expected) word = desired.
  /// Returns the previous word (it swapped exactly when that equals
  /// `expected`), or no value with the Status that says why.
  /// REQUIRES: offset is a multiple of 8.
  Result<uint64_t> compare_and_swap(uint64_t offset, uint64_t expected, uint64_t desired,
                                    Deadline deadline = kForever);
  /// Atomically: previous = word; word += delta (wrapping). Returns the
  /// previous word, or no value with the Status that says why.
  /// REQUIRES: offset is a multiple of 8.
  Result<uint64_t> fetch_add(uint64_t offset, uint64_t delta, Deadline deadline = kForever);

  /// The region's size in bytes.
  size_t size() const;
  /// The rank that exposed the region.
  uint32_t owner() const;
  /// How operations travel: "shm", "ofi" (native RMA and atomics), "ofi
  /// (emulated atomics)" or "ofi (emulated)".
  const char* path() const;
  /// Why the last operation failed.
  const std::string& error() const;
  /// False for a default-constructed or moved-from handle.
  explicit operator bool() const { return impl_ != nullptr; }

 private:
  friend class Cluster;
  explicit RemoteRegion(std::unique_ptr<detail::RegionAccess> impl);
  std::unique_ptr<detail::RegionAccess> impl_;
};

}  // namespace sluice
SLUICE_API_END
