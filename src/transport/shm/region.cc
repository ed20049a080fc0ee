#include "transport/shm/region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/random.h"
#include "sluice/errors.h"

namespace sluice::detail {
namespace {

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

// Seals every region carries: its size is fixed for good.
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
// The kernel's limit on a memfd name (NAME_MAX minus "memfd:").
constexpr size_t kMaxMemfdName = 249;

std::string nonce_text(uint64_t nonce) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, nonce >>= 4) s[static_cast<size_t>(i)] = digits[nonce & 0xf];
  return s;
}

// "sluice:<nonce>:" starts the name of the region with that nonce.
std::string name_prefix(uint64_t nonce) { return "sluice:" + nonce_text(nonce) + ":"; }

}  // namespace

SharedRegion SharedRegion::create(const std::string& name, size_t bytes) {
  SharedRegion r;
  r.nonce_ = random_u64();
  std::string memfd_name = name_prefix(r.nonce_) + name;
  if (memfd_name.size() > kMaxMemfdName) memfd_name.resize(kMaxMemfdName);
  r.fd_ = ::memfd_create(memfd_name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r.fd_ < 0) {
    throw Error(ErrorCode::kResource,
                "cannot create shared memory for " + name + ": memfd_create: " + errno_text(errno));
  }
  if (::ftruncate(r.fd_, static_cast<off_t>(bytes)) != 0) {
    throw Error(ErrorCode::kResource, "cannot size shared memory for " + name + " to " +
                                          std::to_string(bytes) + " bytes: " + errno_text(errno));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r.fd_, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::kResource,
                "cannot map " + std::to_string(bytes) + " bytes of shared memory for " + name +
                    ": " + errno_text(errno) + "; check `ulimit -v` and free memory");
  }
  r.data_ = static_cast<std::byte*>(p);
  r.size_ = bytes;
  // tmpfs allocates on first touch; do it now, and fail here with a clear
  // message rather than with SIGBUS in the data path if memory is short.
  if (::fallocate(r.fd_, 0, 0, static_cast<off_t>(bytes)) != 0 && errno != EOPNOTSUPP) {
    throw Error(ErrorCode::kResource, "cannot reserve " + std::to_string(bytes) +
                                          " bytes of shared memory for " + name + ": " +
                                          errno_text(errno));
  }
  // Sealed last: fallocate above must still be free to allocate the pages.
  if (::fcntl(r.fd_, F_ADD_SEALS, kSizeSeals) != 0) {
    throw Error(ErrorCode::kResource,
                "cannot seal the size of the shared memory for " + name + ": " + errno_text(errno));
  }
  return r;
}

SharedRegion SharedRegion::open_peer(pid_t pid, int fd, size_t bytes, uint64_t nonce) {
  SharedRegion r = open_checked(pid, fd, bytes, &nonce);
  r.nonce_ = nonce;
  return r;
}

SharedRegion SharedRegion::open_peer(pid_t pid, int fd, size_t bytes) {
  return open_checked(pid, fd, bytes, nullptr);
}

SharedRegion SharedRegion::open_checked(pid_t pid, int fd, size_t bytes, const uint64_t* nonce) {
  SharedRegion r;
  const std::string who = "the shared memory of process " + std::to_string(pid);
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  r.fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (r.fd_ < 0) {
    throw Error(ErrorCode::kResource, "cannot open " + who + " (" + path +
                                          "): " + errno_text(errno) +
                                          "; the process has exited, or runs as another user");
  }
  if (nonce != nullptr) {
    // The file this process now holds, not the owner's fd table entry, which
    // may have changed since the open.
    char link[512];
    const std::string self = "/proc/self/fd/" + std::to_string(r.fd_);
    const ssize_t n = ::readlink(self.c_str(), link, sizeof(link) - 1);
    const std::string want = "/memfd:" + name_prefix(*nonce);
    if (n < 0 || std::string(link, static_cast<size_t>(n)).rfind(want, 0) != 0) {
      throw Error(ErrorCode::kResource,
                  who + " at fd " + std::to_string(fd) +
                      " is not the region it published (expected nonce " + nonce_text(*nonce) +
                      ", found '" +
                      (n < 0 ? errno_text(errno) : std::string(link, static_cast<size_t>(n))) +
                      "'): the descriptor is stale, the region was closed and its fd number "
                      "reused; look it up again");
    }
  }
  struct stat st {};
  if (::fstat(r.fd_, &st) != 0) {
    throw Error(ErrorCode::kResource,
                "cannot stat " + who + " (" + path + "): " + errno_text(errno));
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    throw Error(ErrorCode::kResource, who + " has " + std::to_string(st.st_size) +
                                          " bytes, expected " + std::to_string(bytes));
  }
  // Unsealed memory could shrink under the mapping and SIGBUS this process.
  const int seals = ::fcntl(r.fd_, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    throw Error(ErrorCode::kResource,
                who + " at fd " + std::to_string(fd) +
                    " does not have its size sealed, so it is not a sluice region (or one of "
                    "an older sluice version); refusing to map it");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r.fd_, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::kResource, "cannot map " + who + ": " + errno_text(errno));
  }
  r.data_ = static_cast<std::byte*>(p);
  r.size_ = bytes;
  return r;
}

SharedRegion& SharedRegion::operator=(SharedRegion&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    fd_ = o.fd_;
    nonce_ = o.nonce_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.fd_ = -1;
    o.nonce_ = 0;
  }
  return *this;
}

SharedRegion::~SharedRegion() { reset(); }

void SharedRegion::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
  nonce_ = 0;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

std::string host_identity() {
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  // Two network namespaces on one kernel are two hosts as far as the
  // network is concerned (that is how the multihost tests simulate hosts);
  // flows between them go over the network, like between machines.
  char net[64] = {};
  ssize_t n = ::readlink("/proc/self/ns/net", net, sizeof(net) - 1);
  return host_name() + "/" + boot + "/" +
         (n > 0 ? std::string(net, static_cast<size_t>(n)) : std::string("net"));
}

}  // namespace sluice::detail
