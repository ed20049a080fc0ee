// The shm transport's memfd regions: their size is sealed against peers,
// and a descriptor names one region, not whatever holds its fd number now.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "sluice/errors.h"
#include "transport/shm/region.h"

namespace sluice::detail {
namespace {

std::string peer_path(int fd) {
  return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
}

// What a peer process of the same user gets from ftruncate on the region:
// 0 on success, else the errno.
int peer_ftruncate(int fd, off_t size) {
  const pid_t child = ::fork();
  if (child == 0) {
    const int f = ::open(peer_path(fd).c_str(), O_RDWR);
    if (f < 0) ::_exit(100);
    ::_exit(::ftruncate(f, size) == 0 ? 0 : errno);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

TEST(SharedRegionTest, PeerCannotShrinkOrGrowTheOwnersRegion) {
  SharedRegion r = SharedRegion::create("test", 1 << 20);
  r.data()[(1 << 20) - 1] = std::byte{7};
  EXPECT_EQ(peer_ftruncate(r.fd(), 0), EPERM);
  EXPECT_EQ(peer_ftruncate(r.fd(), 2 << 20), EPERM);
  // The owner keeps working on every page (an unsealed region would SIGBUS
  // here after the peer's ftruncate(0)).
  EXPECT_EQ(r.data()[(1 << 20) - 1], std::byte{7});
  r.data()[0] = std::byte{1};
  struct stat st {};
  ASSERT_EQ(::fstat(r.fd(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
}

TEST(SharedRegionTest, PeerMapsARegionByItsNonce) {
  SharedRegion r = SharedRegion::create("test", 8192);
  r.data()[5] = std::byte{42};
  SharedRegion peer = SharedRegion::open_peer(::getpid(), r.fd(), 8192, r.nonce());
  EXPECT_EQ(peer.data()[5], std::byte{42});
  EXPECT_EQ(peer.nonce(), r.nonce());
  EXPECT_NE(r.nonce(), SharedRegion::create("other", 8192).nonce());
}

TEST(SharedRegionTest, StaleDescriptorWhoseFdNumberWasReusedIsRefused) {
  int fd;
  uint64_t old_nonce;
  {
    SharedRegion gone = SharedRegion::create("gone", 8192);
    fd = gone.fd();
    old_nonce = gone.nonce();
  }
  // The same fd number, the same size: only the nonce tells them apart.
  SharedRegion now = SharedRegion::create("now", 8192);
  ASSERT_EQ(now.fd(), fd);
  try {
    SharedRegion wrong = SharedRegion::open_peer(::getpid(), fd, 8192, old_nonce);
    FAIL() << "mapped another region through a stale descriptor";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResource);
    EXPECT_NE(std::string(e.what()).find("stale"), std::string::npos) << e.what();
  }
}

TEST(SharedRegionTest, RefusesToMapMemoryWhoseSizeIsNotSealed) {
  const int fd = ::memfd_create("sluice:0000000000000000:unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  try {
    SharedRegion r = SharedRegion::open_peer(::getpid(), fd, 4096);
    FAIL() << "mapped an unsealed memfd";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sealed"), std::string::npos) << e.what();
  }
  ::close(fd);
}

TEST(SharedRegionTest, SizeMismatchNamesBothSizes) {
  SharedRegion r = SharedRegion::create("test", 4096);
  try {
    SharedRegion p = SharedRegion::open_peer(::getpid(), r.fd(), 8192, r.nonce());
    FAIL() << "mapped a region of the wrong size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4096 bytes, expected 8192"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sluice::detail
