// Shared memory for the shm transport: a memfd mapping. A memfd has no name
// in /dev/shm, so a process killed with SIGKILL leaves nothing behind; the
// memory lives exactly as long as some process maps it or holds its fd.
// Peers on the same host open it through /proc/<pid>/fd/<fd>, which the
// kernel allows only to processes of the same user (the owner's fd is never
// handed to anyone who did not join the job through the registry).
//
// Thread safety: a region is owned by one object; its memory is shared.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace sluice::detail {

class SharedRegion {
 public:
  SharedRegion() = default;
  // Creates a zeroed region of `bytes`, named `name` in /proc/<pid>/fd, and
  // touches every page so the data path takes no page faults. Throws
  // Error(kResource) naming the size and the reason.
  static SharedRegion create(const std::string& name, size_t bytes);
  // Maps the region that process `pid` holds as file descriptor `fd`. Throws
  // Error(kResource) if it cannot be opened (the process is gone, or belongs
  // to another user) or if its size is not `bytes`.
  static SharedRegion open_peer(pid_t pid, int fd, size_t bytes);

  SharedRegion(SharedRegion&& o) noexcept { *this = std::move(o); }
  SharedRegion& operator=(SharedRegion&& o) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  void reset();
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

// An identity for "this host" (hostname, kernel boot id and network
// namespace): the shm transport is used between processes whose identities
// are equal, the ofi transport otherwise.
std::string host_identity();
std::string host_name();

}  // namespace sluice::detail
