#include "transport/shm/region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "sluice/errors.h"

namespace sluice::detail {
namespace {

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

}  // namespace

SharedRegion SharedRegion::create(const std::string& name, size_t bytes) {
  SharedRegion r;
  r.fd_ = ::memfd_create(("sluice:" + name).c_str(), MFD_CLOEXEC);
  if (r.fd_ < 0) {
    throw Error(ErrorCode::kResource, "cannot create shared memory for " + name + ": memfd_create: " + errno_text(errno));
  }
  if (::ftruncate(r.fd_, static_cast<off_t>(bytes)) != 0) {
    throw Error(ErrorCode::kResource, "cannot size shared memory for " + name + " to " + std::to_string(bytes) +
                                          " bytes: " + errno_text(errno));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r.fd_, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::kResource, "cannot map " + std::to_string(bytes) + " bytes of shared memory for " + name +
                                          ": " + errno_text(errno) + "; check `ulimit -v` and free memory");
  }
  r.data_ = static_cast<std::byte*>(p);
  r.size_ = bytes;
  // tmpfs allocates on first touch; do it now, and fail here with a clear
  // message rather than with SIGBUS in the data path if memory is short.
  if (::fallocate(r.fd_, 0, 0, static_cast<off_t>(bytes)) != 0 && errno != EOPNOTSUPP) {
    throw Error(ErrorCode::kResource, "cannot reserve " + std::to_string(bytes) + " bytes of shared memory for " +
                                          name + ": " + errno_text(errno));
  }
  return r;
}

SharedRegion SharedRegion::open_peer(pid_t pid, int fd, size_t bytes) {
  SharedRegion r;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  r.fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (r.fd_ < 0) {
    throw Error(ErrorCode::kResource, "cannot open the shared memory of process " + std::to_string(pid) + " (" + path +
                                          "): " + errno_text(errno) +
                                          "; the process has exited, or runs as another user");
  }
  struct stat st;
  if (::fstat(r.fd_, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    throw Error(ErrorCode::kResource, "shared memory of process " + std::to_string(pid) + " has " +
                                          std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r.fd_, 0);
  if (p == MAP_FAILED) {
    throw Error(ErrorCode::kResource, "cannot map the shared memory of process " + std::to_string(pid) + ": " +
                                          errno_text(errno));
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
    o.data_ = nullptr;
    o.size_ = 0;
    o.fd_ = -1;
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
  return host_name() + "/" + boot + "/" + (n > 0 ? std::string(net, static_cast<size_t>(n)) : std::string("net"));
}

}  // namespace sluice::detail
