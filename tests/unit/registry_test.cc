// The registry and its client over real TCP on 127.0.0.1: membership,
// key/value, flow declarations, barriers and allgathers. (A rank's loss:
// registry_loss_test.cc; limits and hostile input: registry_limits_test.cc.)
// Every wait has a deadline; nothing sleeps to "let things happen".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/test_hooks.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_server.h"
#include "registry_fixture.h"
#include "sluice/cluster.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

class RegistryTest : public RegistryRawFixture {};

TEST_F(RegistryTest, JoiningRanksLearnEachOthersHosts) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  EXPECT_EQ(c1->rank(), 1u);
  EXPECT_EQ(c1->world_size(), 2u);
  EXPECT_FALSE(c1->peers().host(0).empty()) << "WELCOME names ranks that joined before";
  EXPECT_TRUE(eventually([&] { return !c0->peers().host(1).empty(); }))
      << "a PEER_EVENT names ranks that join later";
  EXPECT_EQ(c0->peers().state(1), PeerTable::kAlive);
  EXPECT_NE(c0->peers().describe(1).find("pid"), std::string::npos) << c0->peers().describe(1);
}

TEST_F(RegistryTest, WrongSecretIsRefusedWithAuth) {
  start(1);
  std::string msg;
  EXPECT_EQ(code_of([&] { RegistryClient::connect(info(0, 1, "guess"), ClientOptions{}); }, &msg),
            ErrorCode::kAuth);
  EXPECT_NE(msg.find("wrong job secret"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SLUICE_SECRET"), std::string::npos) << msg;
}

TEST_F(RegistryTest, SameRankTwiceIsRefused) {
  start(2);
  auto c0 = join(0, 2);
  std::string msg;
  EXPECT_EQ(code_of([&] { join(0, 2); }, &msg), ErrorCode::kRegistry);
  EXPECT_NE(msg.find("rank 0 already joined"), std::string::npos) << msg;
}

TEST_F(RegistryTest, WrongWorldSizeIsRefused) {
  start(2);
  std::string msg;
  EXPECT_EQ(code_of([&] { join(0, 3); }, &msg), ErrorCode::kRegistry);
  EXPECT_NE(msg.find("job of 2 ranks"), std::string::npos) << msg;
}

TEST_F(RegistryTest, NothingListeningTimesOutNamingTheAddress) {
  start(1);
  BootstrapInfo i = info(0, 1);
  server_->stop();
  thread_.join();
  server_.reset();  // closes the listening socket
  ClientOptions o;
  o.connect_timeout = 300ms;
  std::string msg;
  const Deadline started = Clock::now();
  EXPECT_EQ(code_of([&] { RegistryClient::connect(i, o); }, &msg), ErrorCode::kTimeout);
  EXPECT_LT(Clock::now() - started, 5s);
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(i.registry_port)), std::string::npos) << msg;
}

TEST_F(RegistryTest, GetWaitsForAPutFromAnotherRank) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  std::string got;
  std::thread getter([&] { got = c1->get("ring/0", in(10s)); });
  c0->put("ring/0", "descriptor");
  getter.join();
  EXPECT_EQ(got, "descriptor");
  EXPECT_EQ(c1->get("ring/0", Clock::now()), "descriptor") << "an existing key needs no time";
}

TEST_F(RegistryTest, GetTimesOutNamingTheKey) {
  start(1);
  auto c0 = join(0, 1);
  std::string msg;
  EXPECT_EQ(code_of([&] { c0->get("never", in(200ms)); }, &msg), ErrorCode::kTimeout);
  EXPECT_NE(msg.find("'never'"), std::string::npos) << msg;
}

TEST_F(RegistryTest, GetFailsWhenTheOwnerLeavesWithoutPutting) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  std::thread leaver([&] { c0.reset(); });
  try {
    c1->get("from-rank-0", in(10s), 0);
    ADD_FAILURE() << "get returned";
  } catch (const PeerLostError& e) {
    EXPECT_EQ(e.rank(), 0u);
    EXPECT_NE(std::string(e.what()).find("left the job"), std::string::npos) << e.what();
  }
  leaver.join();
}

TEST_F(RegistryTest, IdenticalDeclarationsAgree) {
  start(3);
  std::vector<std::unique_ptr<RegistryClient>> c;
  for (uint32_t r = 0; r < 3; ++r) c.push_back(join(r, 3));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        c[r]->declare_flow("orders", "record_size=16\nmode=shuffle\n", {0, 1, 2}, in(10s));
      } catch (const Error& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  // A later identical declaration is answered at once.
  c[1]->declare_flow("orders", "record_size=16\nmode=shuffle\n", {0, 1, 2}, Clock::now());
}

TEST_F(RegistryTest, MismatchedDeclarationsFailOnBothSidesNamingRanksAndField) {
  start(3);
  auto c0 = join(0, 3);
  auto c2 = join(2, 3);
  std::string msg0;
  std::string msg2;
  ErrorCode code0 = ErrorCode::kInternal;
  std::thread t0([&] {
    code0 = code_of(
        [&] {
          c0->declare_flow("orders", "mode=shuffle\nrecord_size=16\n", {0, 1, 2}, in(10s));
        },
        &msg0);
  });
  const ErrorCode code2 = code_of(
      [&] {
        c2->declare_flow("orders", "mode=shuffle\nrecord_size=24\n", {0, 1, 2}, in(10s));
      },
      &msg2);
  t0.join();
  EXPECT_EQ(code0, ErrorCode::kSpecMismatch);
  EXPECT_EQ(code2, ErrorCode::kSpecMismatch);
  for (const std::string& msg : {msg0, msg2}) {
    EXPECT_NE(msg.find("flow 'orders' declared differently: record_size:"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 0 declared 16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2 declared 24"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("mode"), std::string::npos) << "only differing fields: " << msg;
  }
}

TEST_F(RegistryTest, EraseRemovesAKeyOrEveryKeyUnderAPrefix) {
  start(1);
  auto c0 = join(0, 1);
  c0->put("region/a/0", "x");
  c0->put("flow/f/shm/0", "1");
  c0->put("flow/f/ofi/s/0", "2");
  c0->put("flow/fg/shm/0", "3");
  EXPECT_EQ(c0->erase("region/a/0"), 1u);
  EXPECT_EQ(c0->erase("region/a/0"), 0u) << "erasing a missing key is not an error";
  EXPECT_EQ(c0->erase("flow/f/", /*prefix=*/true), 2u);
  EXPECT_EQ(code_of([&] { c0->get("flow/f/shm/0", in(100ms)); }), ErrorCode::kTimeout);
  EXPECT_EQ(code_of([&] { c0->get("region/a/0", in(100ms)); }), ErrorCode::kTimeout);
  EXPECT_EQ(c0->get("flow/fg/shm/0", Clock::now()), "3") << "a prefix is not a name";
}

TEST_F(RegistryTest, GetOfAnErasedKeyKeepsWaitingForTheNextPut) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  c0->put("k", "old");
  EXPECT_EQ(c0->erase("k"), 1u);
  std::string got;
  std::thread getter([&] { got = c1->get("k", in(10s)); });
  // The getter's GET and this PUT race; either order must give "new".
  c0->put("k", "new");
  getter.join();
  EXPECT_EQ(got, "new");
}

TEST_F(RegistryTest, UndeclaredFlowCanBeDeclaredAgainWithAnotherSpecAndLosesItsKeys) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  auto both = [&](const std::string& spec, std::vector<uint32_t> parts) {
    std::thread t([&] { c1->declare_flow("q", spec, parts, in(10s)); });
    c0->declare_flow("q", spec, parts, in(10s));
    t.join();
  };
  both("record_size=16\n", {0, 1});
  c0->put("flow/q/shm/0", "ring");
  // Undeclare returns only when both ranks undeclared: rank 0 waits for 1.
  std::atomic<bool> done0{false};
  std::thread u0([&] {
    c0->undeclare_flow("q", in(10s));
    done0 = true;
  });
  std::this_thread::sleep_for(50ms);  // not a synchronisation: only a chance to be early
  EXPECT_FALSE(done0) << "undeclare returned before the other participant's";
  c1->undeclare_flow("q", in(10s));
  u0.join();
  EXPECT_EQ(code_of([&] { c0->get("flow/q/shm/0", in(100ms)); }), ErrorCode::kTimeout)
      << "the flow's keys are gone with it";
  both("record_size=24\n", {0, 1});  // no mismatch with the old declaration
}

TEST_F(RegistryTest, UndeclareTimesOutNamingTheRankThatHasNotAndALostRankDoesNotBlockIt) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  std::thread t([&] { c1->declare_flow("q", "a=1\n", {0, 1}, in(10s)); });
  c0->declare_flow("q", "a=1\n", {0, 1}, in(10s));
  t.join();
  std::string msg;
  EXPECT_EQ(code_of([&] { c0->undeclare_flow("q", in(200ms)); }, &msg), ErrorCode::kTimeout);
  EXPECT_NE(msg.find("flow 'q' was not destroyed by every participant"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_EQ(code_of([&] { c0->undeclare_flow("q", in(200ms)); }, &msg), ErrorCode::kInvalidArgument)
      << "the timed-out withdrawal counted";
  const std::string probe = "flow/q/x";
  c0->put(probe, "1");
  c1.reset();  // leaves: the flow is forgotten without it
  EXPECT_TRUE(eventually([&] {
    try {
      c0->get(probe, Clock::now());
      return false;
    } catch (const Error&) {
      return true;
    }
  })) << "the registry forgot the flow and its keys once its other participant left";
}

TEST_F(RegistryTest, UndeclaringAFlowNeverDeclaredIsAnError) {
  start(1);
  auto c0 = join(0, 1);
  std::string msg;
  EXPECT_EQ(code_of([&] { c0->undeclare_flow("nope", in(1s)); }, &msg),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
}

TEST_F(RegistryTest, DeclarationTimesOutNamingRanksThatHaveNotDeclared) {
  start(3);
  auto c0 = join(0, 3);
  auto c1 = join(1, 3);
  std::string msg;
  EXPECT_EQ(code_of(
                [&] {
                  c0->declare_flow("f", "a=1\n", {0, 1, 2}, in(200ms));
                },
                &msg),
            ErrorCode::kTimeout);
  EXPECT_NE(msg.find("ranks 1,2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2 has not joined"), std::string::npos) << msg;
}

TEST_F(RegistryTest, BarrierIsReusableAHundredTimesByThreeRanks) {
  start(3);
  std::vector<std::unique_ptr<RegistryClient>> c;
  for (uint32_t r = 0; r < 3; ++r) c.push_back(join(r, 3));
  std::atomic<int> entered{0};
  std::atomic<int> violations{0};
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      for (int i = 0; i < 100; ++i) {
        entered.fetch_add(1);
        try {
          c[r]->barrier("step", in(30s));
        } catch (const Error& e) {
          ADD_FAILURE() << e.what();
          return;
        }
        // Nobody leaves the i-th barrier before all three entered it.
        if (entered.load() < 3 * (i + 1)) ++violations;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(entered, 300);
  EXPECT_EQ(violations, 0);
}

TEST_F(RegistryTest, BarrierTimesOutNamingMissingRanks) {
  start(3);
  auto c0 = join(0, 3);
  auto c1 = join(1, 3);
  std::string msg;
  EXPECT_EQ(code_of([&] { c0->barrier("b", in(200ms)); }, &msg), ErrorCode::kTimeout);
  EXPECT_NE(msg.find("barrier 'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ranks 1,2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 on "), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 2 has not joined"), std::string::npos) << msg;
}

// Two calls of one barrier from one rank (two threads) are outstanding when
// the first times out: the second must move into the first's generation, so
// that it meets the other rank's first call. (It used to stay in the next
// generation, and the ranks' calls never met again.)
TEST_F(RegistryTest, TimedOutBarrierCallDoesNotCountWhenTheSameRankHasALaterOne) {
  start(2);
  auto raw = raw_join(0, 2);
  auto c1 = join(1, 2);
  raw->send(make_frame(MsgType::kBarrier, 1, encode(BarrierMsg{"b", 200, {}, 0})) +
            make_frame(MsgType::kBarrier, 2, encode(BarrierMsg{"b", 20000, {}, 0})));
  Frame f;
  do {
    ASSERT_TRUE(raw->read_frame(&f)) << "no answer to the first call";
  } while (f.header.request_id != 1);
  EXPECT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kError)) << "the first call times out";
  EXPECT_EQ(c1->barrier("b", in(5s)), 0u) << "rank 1's first call meets rank 0's second";
  ASSERT_TRUE(raw->read_frame(&f));
  EXPECT_EQ(f.header.request_id, 2u);
  ASSERT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kOk));
  BarrierDoneMsg done;
  ASSERT_TRUE(decode(f.payload, &done));
  EXPECT_EQ(done.generation, 0u);
}

// allgather through the public API, two ranks as two Clusters of one process.
class AllgatherTest : public RegistryTest {
 protected:
  Cluster cluster(uint32_t rank) {
    ClusterOptions o;
    o.rank = rank;
    o.world_size = 2;
    o.registry = "127.0.0.1:" + std::to_string(server_->port());
    o.secret = kTestSecret;
    return Cluster::join(o);
  }
};

// A call that timed out does not count, as for barrier(): the retry meets
// the other rank's first call. (A per-rank counter gave the retry the next
// number, so the other rank's first call took the timed-out call's value and
// the retry waited for a second call that never came.)
TEST_F(AllgatherTest, TimedOutCallDoesNotCount) {
  start(2);
  Cluster r0 = cluster(0);
  Cluster r1 = cluster(1);
  EXPECT_THROW(r0.allgather("x", "first try", in(200ms)), Error);
  std::vector<std::string> got0;
  std::vector<std::string> got1;
  std::thread other([&] {
    try {
      got1 = r1.allgather("x", "b", in(10s));
    } catch (const Error& e) {
      ADD_FAILURE() << "rank 1: " << e.what();
    }
  });
  try {
    got0 = r0.allgather("x", "retry", in(10s));
  } catch (const Error& e) {
    ADD_FAILURE() << "rank 0's retry: " << e.what();
  }
  other.join();
  EXPECT_EQ(got0, (std::vector<std::string>{"retry", "b"}));
  EXPECT_EQ(got1, (std::vector<std::string>{"retry", "b"}));
}

// Two threads of each rank call allgather of one name at once, many times.
// Each meeting pairs one call of each rank: both see the same values.
TEST_F(AllgatherTest, ConcurrentCallsOfOneNamePairConsistently) {
  start(2);
  Cluster c[2] = {cluster(0), cluster(1)};
  constexpr int kCalls = 50;
  std::mutex mu;
  std::map<std::vector<std::string>, int> seen;  // result -> how many calls returned it
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, r, t] {
        for (int i = 0; i < kCalls; ++i) {
          const std::string mine = log::cat(r, "/", t, "/", i);
          std::vector<std::string> v;
          try {
            v = c[r].allgather("x", mine, in(30s));
          } catch (const Error& e) {
            ADD_FAILURE() << e.what();
            return;
          }
          EXPECT_EQ(v[r], mine);
          std::lock_guard<std::mutex> lock(mu);
          ++seen[v];
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.size(), size_t{2 * kCalls});
  for (const auto& [v, n] : seen) EXPECT_EQ(n, 2) << v[0] << " + " << v[1];
}

// A Cluster destroyed while its control thread fences a rank that just
// left: the destructor waits for the fence, and the control thread never
// runs the Cluster's destructor itself. (The fence used to hold the whole
// Cluster: when the user's handle went during it, the control thread was
// left its last owner, and the destructor it ran joined the control thread
// from itself, "Resource deadlock avoided" and std::terminate; seen under
// load at the end of ConcurrentCallsOfOneNamePairConsistently.)
TEST_F(AllgatherTest, AClusterDestroyedWhileItFencesALeftRankWaitsForTheFence) {
  // (Set before any thread of the test starts: setenv races with getenv.)
  ASSERT_EQ(::setenv("SLUICE_TEST_FENCE_DELAY_MS", "300", 1), 0);
  start(2);
  {
    std::optional<Cluster> r0(cluster(0));
    Cluster r1 = cluster(1);
    r0.reset();  // rank 0 leaves: rank 1's control thread fences it
    const auto until = Clock::now() + 10s;
    while (sluice::detail::test_hooks::fences_delayed() == 0 && Clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_EQ(sluice::detail::test_hooks::fences_delayed(), 1u) << "rank 1 never fenced rank 0";
  }  // r1 goes while its control thread sleeps in the fence
  EXPECT_EQ(sluice::detail::test_hooks::fence_delays_ended(), 1u)
      << "the Cluster's destructor returned while its control thread was still fencing";
  ::unsetenv("SLUICE_TEST_FENCE_DELAY_MS");  // (only the registry's thread runs: it reads none)
}

}  // namespace
}  // namespace sluice::control
