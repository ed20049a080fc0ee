// One-sided regions over libfabric tcp;ofi_rxm on loopback, owner and
// handles in one process: the emulated region service (its bounded client
// table, requests tied to their sender) and the owner's decision on atomics.
#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/hex.h"
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

// A raw endpoint that speaks the service protocol with a client number it
// was never given.
TEST(RegionServiceTest, RefusesARequestNamingAnotherClient) {
  RegionOwner owner("spoofed", 4096, true, loopback(false), "host");
  auto honest = open(owner, loopback(false));
  uint64_t prev;
  ASSERT_EQ(honest->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk)
      << honest->error();  // client 0 exists

  ofi::Config c = loopback(false);
  c.region = true;
  ofi::Endpoint forger(c);
  std::istringstream desc(owner.descriptor());
  std::string mode, bytes, hex, address;
  desc >> mode >> bytes >> hex;
  ASSERT_TRUE(from_hex(hex, &address));
  const fi_addr_t service = forger.insert(address);
  auto* buf = forger.allocate(2 * region_layout::kServiceMessageBytes);
  fi_context2* ctx = forger.allocate_array<fi_context2>(2);
  ASSERT_EQ(
      forger.trecv(buf + region_layout::kServiceMessageBytes, region_layout::kServiceMessageBytes,
                   nullptr, region_layout::kTagReply, &ctx[1]),
      0);
  region_layout::ServiceMessage req{};
  req.magic = region_layout::kServiceMagic;
  req.op = region_layout::kFetchAdd;
  req.client = 0;  // the honest handle's number, without its token
  req.id = 1;
  req.a = 1000;
  std::memcpy(buf, &req, sizeof(req));
  ssize_t rc;
  const auto posted_by = Clock::now() + std::chrono::seconds(10);
  while ((rc = forger.tsend(buf, sizeof(req), nullptr, service, region_layout::kTagRequest,
                            &ctx[0])) == -FI_EAGAIN &&
         Clock::now() < posted_by) {
    fi_cq_data_entry e[1];
    std::string err;
    (void)forger.poll(e, 0, &err, nullptr);  // tcp;ofi_rxm connects meanwhile
  }
  ASSERT_EQ(rc, 0);
  // Whatever the service does, it must not apply the forged request.
  bool answered = false;
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < give_up && !answered) {
    fi_cq_data_entry e[4];
    std::string err;
    const ssize_t n = forger.poll(e, 4, &err, nullptr);
    for (ssize_t i = 0; i < n; ++i) answered |= e[i].op_context == &ctx[1];
  }
  if (answered) {
    region_layout::ServiceMessage rep;
    std::memcpy(&rep, buf + region_layout::kServiceMessageBytes, sizeof(rep));
    EXPECT_EQ(rep.status, region_layout::kUnknownClient);
  }
  EXPECT_EQ(word(owner, 0), 1u);
  ASSERT_EQ(honest->fetch_add(0, 1, &prev, in_seconds(10)), Status::kOk) << honest->error();
  EXPECT_EQ(prev, 1u);
  forger.abandon();  // its receive may still be posted
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
