// The registry's observers (control/registry_observer.h): `sluice info
// --registry` lists a running job's ranks, with what they published, without
// joining the job; observers are held to reading.
#include "control/registry_observer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "control/registry_client.h"
#include "control/registry_server.h"
#include "sluice/errors.h"
#include "support/test_support.h"

namespace sluice::control {
namespace {

using namespace std::chrono_literals;

constexpr const char* kObserverSecret = "observer-test-secret";

class RegistryObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegistryOptions o;
    o.secret = kObserverSecret;
    o.world_size = 3;
    o.heartbeat_timeout = 5000ms;
    server_ = std::make_unique<RegistryServer>(o);
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  std::unique_ptr<RegistryClient> join(uint32_t rank) {
    BootstrapInfo i;
    i.rank = rank;
    i.world_size = 3;
    i.registry_host = "127.0.0.1";
    i.registry_port = server_->port();
    i.secret = kObserverSecret;
    ClientOptions o;
    o.heartbeat_timeout = 5000ms;
    o.connect_timeout = 10s;
    return RegistryClient::connect(i, o);
  }
  std::vector<ObservedRank> observe(const std::string& secret = kObserverSecret) {
    return observe_job("127.0.0.1", server_->port(), secret, "host/", 200, Clock::now() + 10s);
  }

  std::unique_ptr<RegistryServer> server_;
  std::thread thread_;
};

TEST_F(RegistryObserverTest, ListsEveryRankWithItsPublishedValueAndIsNeverOneOfThem) {
  EXPECT_TRUE(observe().empty()) << "no rank joined yet";
  auto r0 = join(0);
  auto r2 = join(2);
  r0->put("host/0", "identity-of-0");
  // Rank 2 publishes nothing: it is listed without a value (after the
  // 200 ms the observer waits for it).
  const std::vector<ObservedRank> seen = observe();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].rank, 0u);
  EXPECT_EQ(seen[0].state, "alive");
  EXPECT_EQ(seen[0].pid, static_cast<uint32_t>(::getpid()));
  EXPECT_FALSE(seen[0].host.empty());
  EXPECT_EQ(seen[0].value, "identity-of-0");
  EXPECT_EQ(seen[1].rank, 2u);
  EXPECT_EQ(seen[1].value, "");
  // Observing took no rank's place and cost the ranks nothing: rank 1 can
  // still join, and the three ranks meet at a barrier.
  auto r1 = join(1);
  std::thread t0([&] { r0->barrier("after-observers", Clock::now() + 10s); });
  std::thread t2([&] { r2->barrier("after-observers", Clock::now() + 10s); });
  r1->barrier("after-observers", Clock::now() + 10s);
  t0.join();
  t2.join();
  // A rank that left is listed as such.
  r2.reset();
  std::vector<ObservedRank> later;
  for (int i = 0; i < 100; ++i) {
    later = observe();
    if (later.size() == 3 && later[2].state == "left") break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(later.size(), 3u);
  EXPECT_EQ(later[2].state, "left");
}

TEST_F(RegistryObserverTest, AWrongSecretIsRefusedWithAuth) {
  try {
    observe("guess");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAuth) << e.what();
    EXPECT_NE(std::string(e.what()).find("wrong job secret"), std::string::npos) << e.what();
  }
}

TEST_F(RegistryObserverTest, NothingListeningIsAnErrorNamingTheAddress) {
  // A port nobody listens on: the registry's, after it stopped.
  const uint16_t port = server_->port();
  server_->stop();
  thread_.join();
  server_.reset();  // closes its listening socket
  try {
    observe_job("127.0.0.1", port, kObserverSecret, "host/", 200, Clock::now() + 5s);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach the registry at 127.0.0.1:" +
                                         std::to_string(port)),
              std::string::npos)
        << e.what();
  }
  // TearDown stops it again: harmless on a stopped server.
  RegistryOptions o;
  o.secret = kObserverSecret;
  o.world_size = 3;
  server_ = std::make_unique<RegistryServer>(o);
  thread_ = std::thread([this] { server_->run(); });
}

}  // namespace
}  // namespace sluice::control
