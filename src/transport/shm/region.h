// Shared memory for the shm transport: a memfd mapping. A memfd has no name
// in /dev/shm, so a process killed with SIGKILL leaves nothing behind; the
// memory lives exactly as long as some process maps it or holds its fd.
// Peers on the same host open it through /proc/<pid>/fd/<fd>, which the
// kernel allows only to processes of the same user (the owner's fd is never
// handed to anyone who did not join the job through the registry).
//
// The size is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL): a peer that
// holds the fd cannot ftruncate it, so no process mapping it can take SIGBUS
// because another shrank it. Peers refuse to map a memfd without those seals.
//
// A region's identity is a random 64-bit nonce, carried in its memfd name
// ("sluice:<16 hex digits>:<name>"). "pid fd" alone names whatever that
// process holds as that fd number *now*: if the region was closed and the
// number reused, a stale descriptor would map some other memory. A peer that
// was told the nonce checks, after opening, that the file it opened carries
// it (/proc/self/fd/<fd>, so the check is of the very file it will map).
//
// Thread safety: a region is owned by one object; its memory is shared.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::detail {

class SharedRegion {
 public:
  SharedRegion() = default;
  // Creates a zeroed region of `bytes`, named `name` in /proc/<pid>/fd, with
  // a fresh random nonce, seals its size, and touches every page so the data
  // path takes no page faults. Throws Error(kResource) naming the size and
  // the reason.
  static SharedRegion create(const std::string& name, size_t bytes);
  // Maps the region that process `pid` holds as file descriptor `fd`, and
  // checks that it is the region whose nonce() was `nonce`. Throws
  // Error(kResource) if it cannot be opened (the process is gone, or belongs
  // to another user), if its size is not `bytes`, if its size is not sealed,
  // or if it is another file (the region was closed and the fd number
  // reused: a stale descriptor).
  static SharedRegion open_peer(pid_t pid, int fd, size_t bytes, uint64_t nonce);
  // As above without the identity check: for callers that verify what they
  // mapped by other means (a header of their own). Prefer the nonce.
  static SharedRegion open_peer(pid_t pid, int fd, size_t bytes);

  SharedRegion(SharedRegion&& o) noexcept { *this = std::move(o); }
  SharedRegion& operator=(SharedRegion&& o) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  // The identity to publish beside pid and fd (0 for an empty region).
  uint64_t nonce() const { return nonce_; }

 private:
  static SharedRegion open_checked(pid_t pid, int fd, size_t bytes, const uint64_t* nonce);
  void reset();
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  uint64_t nonce_ = 0;
};

// An identity for "this host" (hostname, kernel boot id and network
// namespace): the shm transport is used between processes whose identities
// are equal, the ofi transport otherwise.
std::string host_identity();
std::string host_name();

}  // namespace sluice::detail
