// One-sided regions over libfabric tcp;ofi_rxm on loopback, owner and
// handles in one process: the emulated region service (its bounded client
// table, requests tied to their sender) and the owner's decision on atomics.
#include <gtest/gtest.h>
#include <rdma/fi_errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/hex.h"
#include "control/registry_client.h"
#include "memory/region.h"

namespace sluice::detail {
namespace {

ofi::Config loopback(bool atomic) {
  ofi::Config c;
  c.provider = "tcp";
  c.node = "127.0.0.1";
  c.allow_atomic = atomic;
  return c;
}

std::unique_ptr<RegionAccess> open(const RegionOwner& owner, const ofi::Config& cfg) {
  return RegionAccess::open(owner.name(), 0, owner.descriptor(), "host", cfg, nullptr);
}

Deadline in_seconds(int s) { return Clock::now() + std::chrono::seconds(s); }

uint64_t word(const RegionOwner& owner, size_t offset) {
  uint64_t v;
  std::memcpy(&v, owner.data() + offset, 8);
  return v;
}

// A descriptor left by a process that has exited (its rank may already be
// back as a new incarnation, which the registry counts alive): opening it
// is a lost peer at once, not a resource error.
TEST(RegionAccessTest, ARegionWhoseExposingProcessExitedIsALostPeer) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string descriptor = "shm 4096 " + std::to_string(child) + " 3 12345 host";
  try {
    (void)RegionAccess::open("gone", 2, descriptor, "host", loopback(false), nullptr);
    FAIL() << "opened a region of an exited process";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 2u);
    EXPECT_NE(std::string(e.what()).find("which exposed it, has exited"), std::string::npos)
        << e.what();
  }
}

TEST(RegionServiceTest, KeepsAtMostItsBoundOfClientsAndServesEvictedOnesAgain) {
  RegionOwner owner("bounded", 4096, true, loopback(false), "host", /*max_clients=*/4);
  std::vector<std::unique_ptr<RegionAccess>> handles;
  for (int i = 0; i < 7; ++i) handles.push_back(open(owner, loopback(false)));
  ASSERT_EQ(std::string(handles[0]->path()), "ofi (emulated atomics)");
  uint64_t prev = 0;
  for (int round = 0; round < 3; ++round) {
    for (auto& h : handles) {
      ASSERT_EQ(h->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk) << h->error();
      EXPECT_LE(owner.service_clients(), 4u);
    }
  }
  EXPECT_EQ(word(owner, 0), 21u);
  // Closed handles say BYE: their entries are freed.
  handles.clear();
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (owner.service_clients() != 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(owner.service_clients(), 0u);
}

TEST(RegionServiceTest, OpeningAndClosingHandlesDoesNotGrowTheClientTable) {
  RegionOwner owner("churn", 4096, true, loopback(false), "host");
  for (int i = 0; i < 40; ++i) {
    auto h = open(owner, loopback(false));
    uint64_t prev;
    ASSERT_EQ(h->fetch_add(8, 1, &prev, in_seconds(10)), Status::kOk) << h->error();
    ASSERT_EQ(prev, static_cast<uint64_t>(i));
  }
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (owner.service_clients() != 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(owner.service_clients(), 0u);
}

// What waits for the owner's answer calls the handle's while-waiting hook
// between polls (an ordered flow's source drives its own endpoint there),
// and the answers are still right.
TEST(RegionServiceTest, CallsTheWhileWaitingHookBetweenPolls) {
  RegionOwner owner("hooked", 4096, true, loopback(false), "host");
  auto h = open(owner, loopback(false));
  uint64_t calls = 0;
  h->set_while_waiting([](void* n) { ++*static_cast<uint64_t*>(n); }, &calls);
  for (uint64_t i = 0; i < 50; ++i) {
    uint64_t prev = 0;
    ASSERT_EQ(h->fetch_add(0, 2, &prev, in_seconds(10)), Status::kOk) << h->error();
    ASSERT_EQ(prev, 2 * i);
  }
  EXPECT_EQ(word(owner, 0), 100u);
  // Each answer crosses the owner's service thread and loopback tcp: tens
  // of microseconds, many polls.
  EXPECT_GT(calls, 0u);
  h->set_while_waiting(nullptr, nullptr);
  const uint64_t before = calls;
  uint64_t prev = 0;
  ASSERT_EQ(h->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk) << h->error();
  EXPECT_EQ(calls, before);
  // A handle that yields from its first poll (as a sequencer's does after
  // 100) gets the same answers.
  h->set_spin_polls(0);
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_EQ(h->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk) << h->error();
    ASSERT_EQ(prev, 101 + i);
  }
}

// A provider whose queue to a lost owner never drains refuses every post
// with -FI_EAGAIN (the test hook does it here): a write with no deadline
// must still end, with kPeerLost, once the owner is known lost, as a wait
// for a completion does.
TEST(RegionServiceTest, APostThatTheProviderKeepsRefusingEndsOnceTheOwnerIsLost) {
  RegionOwner owner("refused", 4096, true, loopback(false), "host");
  control::PeerTable peers(1);
  auto h = RegionAccess::open(owner.name(), 0, owner.descriptor(), "host", loopback(false), &peers);
  ASSERT_NE(h, nullptr);
  const uint64_t v = 7;
  ASSERT_EQ(h->write(0, reinterpret_cast<const std::byte*>(&v), 8, in_seconds(10)), Status::kOk)
      << h->error();
  ASSERT_EQ(::setenv("SLUICE_TEST_REGION_POST_REFUSED", "1", 1), 0);
  // Refused, but the owner is alive: only the deadline ends it.
  EXPECT_EQ(h->write(0, reinterpret_cast<const std::byte*>(&v), 8,
                     Clock::now() + std::chrono::milliseconds(200)),
            Status::kTimeout);
  auto h2 =
      RegionAccess::open(owner.name(), 0, owner.descriptor(), "host", loopback(false), &peers);
  ASSERT_NE(h2, nullptr);
  peers.set(0, control::PeerTable::kDied, "no heartbeat for 5000 ms");
  const auto start = Clock::now();
  EXPECT_EQ(h2->write(0, reinterpret_cast<const std::byte*>(&v), 8, kForever), Status::kPeerLost);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  EXPECT_NE(h2->error().find("no heartbeat"), std::string::npos) << h2->error();
  ::unsetenv("SLUICE_TEST_REGION_POST_REFUSED");
}

// A raw endpoint that speaks the service protocol by hand: it can say and
// claim what no RegionAccess would.
class RawClient {
 public:
  explicit RawClient(const RegionOwner& owner) : ep_(config()) {
    std::istringstream desc(owner.descriptor());
    std::vector<std::string> fields;
    for (std::string f; desc >> f;) fields.push_back(f);
    EXPECT_EQ(fields.size(), 8u) << owner.descriptor();
    std::string address;
    EXPECT_TRUE(from_hex(fields.at(2), &address));
    nonce_ = std::stoull(fields.at(6));
    service_ = ep_.insert(address);
    buf_ = ep_.allocate(2 * region_layout::kServiceMessageBytes);
    ctx_ = ep_.allocate_array<fi_context2>(2);
  }
  ~RawClient() { ep_.abandon(); }  // a reply receive may still be posted

  std::string address() const { return ep_.address(); }
  uint64_t nonce() const { return nonce_; }

  // Sends `req` (with `payload`) and waits up to `wait` for the answer with
  // its id; false if none came.
  bool call(region_layout::ServiceMessage req, const std::string& payload,
            region_layout::ServiceMessage* rep, std::chrono::milliseconds wait) {
    req.magic = region_layout::kServiceMagic;
    req.len = static_cast<uint32_t>(payload.size());
    std::memcpy(buf_, &req, sizeof(req));
    std::memcpy(buf_ + sizeof(req), payload.data(), payload.size());
    std::byte* reply = buf_ + region_layout::kServiceMessageBytes;
    if (!reply_posted_) {
      EXPECT_EQ(ep_.trecv(reply, region_layout::kServiceMessageBytes, nullptr,
                          region_layout::kTagReply, &ctx_[1]),
                0);
      reply_posted_ = true;
    }
    ssize_t rc;
    const auto posted_by = Clock::now() + std::chrono::seconds(10);
    while ((rc = ep_.tsend(buf_, sizeof(req) + payload.size(), nullptr, service_,
                           region_layout::kTagRequest, &ctx_[0])) == -FI_EAGAIN &&
           Clock::now() < posted_by) {
      fi_cq_data_entry e[1];
      std::string err;
      (void)ep_.poll(e, 0, &err, nullptr);  // tcp;ofi_rxm connects meanwhile
    }
    EXPECT_EQ(rc, 0);
    const auto give_up = Clock::now() + wait;
    while (Clock::now() < give_up) {
      fi_cq_data_entry e[4];
      std::string err;
      const ssize_t n = ep_.poll(e, 4, &err, nullptr);
      for (ssize_t i = 0; i < n; ++i) {
        if (e[i].op_context != &ctx_[1]) continue;
        std::memcpy(rep, reply, sizeof(*rep));
        EXPECT_EQ(ep_.trecv(reply, region_layout::kServiceMessageBytes, nullptr,
                            region_layout::kTagReply, &ctx_[1]),
                  0);
        if (rep->id == req.id) return true;  // else an answer to someone else's words
      }
    }
    return false;
  }

 private:
  static ofi::Config config() {
    ofi::Config c = loopback(false);
    c.region = true;
    return c;
  }
  ofi::Endpoint ep_;
  fi_addr_t service_ = FI_ADDR_UNSPEC;
  uint64_t nonce_ = 0;
  std::byte* buf_ = nullptr;
  fi_context2* ctx_ = nullptr;
  bool reply_posted_ = false;
};

region_layout::ServiceMessage request(uint16_t op, uint64_t id) {
  region_layout::ServiceMessage m{};
  m.op = op;
  m.id = id;
  return m;
}

// A client number it was never given.
TEST(RegionServiceTest, RefusesARequestNamingAnotherClient) {
  RegionOwner owner("spoofed", 4096, true, loopback(false), "host");
  auto honest = open(owner, loopback(false));
  uint64_t prev;
  ASSERT_EQ(honest->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk)
      << honest->error();  // client 0 exists

  RawClient forger(owner);
  auto req = request(region_layout::kFetchAdd, 1);
  req.client = 0;  // the honest handle's number, without its token
  req.a = 1000;
  region_layout::ServiceMessage rep{};
  // Whatever the service does, it must not apply the forged request.
  if (forger.call(req, "", &rep, std::chrono::seconds(2))) {
    EXPECT_EQ(rep.status, region_layout::kUnknownClient);
  }
  EXPECT_EQ(word(owner, 0), 1u);
  ASSERT_EQ(honest->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk) << honest->error();
  EXPECT_EQ(prev, 1u);
}

// A first HELLO carries its sender's address. A stranger that claims an
// admitted client's address must not replace that client's token (which
// evicted the client before).
TEST(RegionServiceTest, AHelloClaimingAClientsAddressDoesNotEvictIt) {
  RegionOwner owner("claimed", 4096, true, loopback(false), "host");
  RawClient honest(owner), stranger(owner);
  auto hello = request(region_layout::kHello, 1);
  hello.a = honest.nonce();
  region_layout::ServiceMessage rep{};
  ASSERT_TRUE(honest.call(hello, honest.address(), &rep, std::chrono::seconds(10)));
  ASSERT_EQ(rep.status, region_layout::kServed);
  const auto client = static_cast<uint32_t>(rep.a);
  const uint64_t token = rep.b;

  auto add = request(region_layout::kFetchAdd, 2);
  add.client = client;
  add.token = token;
  add.a = 1;
  ASSERT_TRUE(honest.call(add, "", &rep, std::chrono::seconds(10)));
  ASSERT_EQ(rep.status, region_layout::kServed);

  // The stranger's HELLO names the honest client's address. Any answer goes
  // there, not to the stranger.
  auto claim = request(region_layout::kHello, 3);
  claim.a = stranger.nonce();
  EXPECT_FALSE(stranger.call(claim, honest.address(), &rep, std::chrono::milliseconds(500)));

  add.id = 4;
  ASSERT_TRUE(honest.call(add, "", &rep, std::chrono::seconds(10)));
  EXPECT_EQ(rep.status, region_layout::kServed)
      << "the honest client was evicted by a claim of its address";
  EXPECT_EQ(rep.a, 1u);  // the old value: the second add was applied
  EXPECT_EQ(word(owner, 0), 2u);
  EXPECT_EQ(owner.service_clients(), 1u);
}

TEST(RegionServiceTest, RefusesAHelloForAnotherRegion) {
  // What a stale descriptor looks like when the owner's new endpoint took
  // over the old one's address: the same address, another region's nonce.
  RegionOwner owner("current", 4096, true, loopback(false), "host");
  std::istringstream in(owner.descriptor());
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(f);
  ASSERT_EQ(fields.size(), 8u) << owner.descriptor();
  fields[6] = std::to_string(std::stoull(fields[6]) ^ 1);
  std::string stale;
  for (const std::string& f : fields) stale += (stale.empty() ? "" : " ") + f;
  auto h = RegionAccess::open("current", 0, stale, "host", loopback(false), nullptr);
  uint64_t prev;
  EXPECT_EQ(h->fetch_add(0, 1, &prev, in_seconds(10)), Status::kClosed);
  EXPECT_NE(h->error().find("stale"), std::string::npos) << h->error();
  EXPECT_EQ(word(owner, 0), 0u);
  EXPECT_EQ(owner.service_clients(), 0u);
}

TEST(RegionServiceTest, ClientsFollowTheOwnersChoiceOfProviderAtomics) {
  // The owner may use the provider's atomics: a client whose own setting
  // says otherwise uses them too, or the two kinds of atomics would mix.
  RegionOwner native("native", 4096, true, loopback(true), "host");
  ASSERT_NE(native.descriptor().find(" atomic "), std::string::npos) << native.descriptor();
  auto reluctant = open(native, loopback(false));
  EXPECT_EQ(std::string(reluctant->path()), "ofi");
  uint64_t prev;
  ASSERT_EQ(reluctant->fetch_add(0, 5, &prev, in_seconds(10)), Status::kOk) << reluctant->error();
  auto keen = open(native, loopback(true));
  ASSERT_EQ(keen->compare_and_swap(0, 5, 9, &prev, in_seconds(10)), Status::kOk) << keen->error();
  EXPECT_EQ(prev, 5u);
  EXPECT_EQ(word(native, 0), 9u);

  // The owner chose emulation: every client emulates, whatever it could do.
  RegionOwner emulated("emulated", 4096, true, loopback(false), "host");
  auto able = open(emulated, loopback(true));
  EXPECT_EQ(std::string(able->path()), "ofi (emulated atomics)");
  ASSERT_EQ(able->fetch_add(0, 2, &prev, in_seconds(10)), Status::kOk) << able->error();
  EXPECT_EQ(word(emulated, 0), 2u);
}

}  // namespace
}  // namespace sluice::detail
