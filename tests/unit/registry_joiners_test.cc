// Elastic jobs at the registry: a job of world_size rank numbers launched
// with fewer ranks (RegistryOptions::initial_ranks, `sluice run
// --max-ranks`) holds the others as vacancies, in no view; a process that
// asks to join (HELLO with kJoinRank, SLUICE_JOIN=1) takes the lowest
// vacancy or the number of a rank that left, as that number's next
// incarnation, and every member sees a new view with it. While every
// number is held, a joiner waits, silent, until a rank leaves.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "control/bootstrap.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_observer.h"
#include "control/registry_server.h"
#include "registry_fixture.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

using namespace std::chrono_literals;

class RegistryJoinersTest : public RegistryFixture {
 protected:
  void start_elastic(uint32_t initial, uint32_t world) {
    RegistryOptions o;
    o.initial_ranks = initial;
    start(world, o);
  }
  // What a joiner's Cluster::join does: connect() returns once it has a rank.
  std::future<std::unique_ptr<RegistryClient>> joiner(uint32_t world) {
    BootstrapInfo i = info(kJoinerRank, world);
    i.join = true;
    return std::async(std::launch::async, [i] {
      ClientOptions o;
      o.connect_timeout = 10s;
      return RegistryClient::connect(i, o);
    });
  }
};

TEST_F(RegistryJoinersTest, VacanciesAreInNoViewAndJoinersTakeTheLowestAsNewMembers) {
  start_elastic(2, 4);
  auto c0 = join(0, 4);
  auto c1 = join(1, 4);
  // The job as launched: ranks 0 and 1; 2 and 3 are vacancies (left, as
  // incarnation 0), and a barrier or gather of the view does not wait for them.
  PeerTable::ViewState v = c0->peers().view();
  EXPECT_EQ(v.epoch, 0u);
  EXPECT_EQ(v.members, (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(c0->peers().left(2));
  EXPECT_NE(c0->peers().describe(3).find("a vacancy of this elastic job"), std::string::npos)
      << c0->peers().describe(3);
  auto g1 = std::async(std::launch::async, [&] { return c1->gather("g0", 0, "b", in(10s)); });
  EXPECT_EQ(c0->gather("g0", 0, "a", in(10s)).values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(g1.get().values, (std::vector<std::string>{"a", "b"}));

  // A joiner takes rank 2 as its incarnation 1: view 1 of three members.
  auto first = joiner(4);
  ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
  auto j2 = first.get();
  EXPECT_EQ(j2->rank(), 2u);
  ASSERT_TRUE(c0->peers().await_epoch(0, in(5s)));
  v = c0->peers().view();
  EXPECT_EQ(v.epoch, 1u);
  EXPECT_EQ(v.members, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(c0->peers().incarnation(2), 1u);
  EXPECT_EQ(j2->peers().view().members, v.members);
  auto f0 = std::async(std::launch::async, [&] { return c0->gather("g1", 1, "a", in(10s)); });
  auto f1 = std::async(std::launch::async, [&] { return c1->gather("g1", 1, "b", in(10s)); });
  EXPECT_EQ(j2->gather("g1", 1, "c", in(10s)).values, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(f0.get().ranks, (std::vector<uint32_t>{0, 1, 2}));
  (void)f1.get();

  // The next takes rank 3; the job is then full, and a third waits until a
  // rank leaves, then takes its number as that rank's next incarnation.
  auto second = joiner(4);
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  auto j3 = second.get();
  EXPECT_EQ(j3->rank(), 3u);
  auto third = joiner(4);
  EXPECT_EQ(third.wait_for(300ms), std::future_status::timeout);
  EXPECT_TRUE(c1->leave(in(5s)));
  ASSERT_EQ(third.wait_for(10s), std::future_status::ready);
  auto j1 = third.get();
  EXPECT_EQ(j1->rank(), 1u);
  ASSERT_TRUE(c0->peers().await_epoch(3, in(5s)));
  v = c0->peers().view();
  EXPECT_EQ(v.epoch, 4u);  // joined 2, joined 3, 1 left, joined 1
  EXPECT_EQ(v.members, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(c0->peers().incarnation(1), 1u);
}

// A joiner of a job whose numbers are all held waits; one that speaks
// while it waits, or says another world size, is refused; one whose
// connection closes leaves the queue. A rank launched by its number into
// a vacancy joins it, and a rank that left cannot come back by its number.
TEST_F(RegistryJoinersTest, FullJobsQueueJoinersAndHostileOnesAreRefused) {
  start_elastic(1, 3);
  auto c0 = join(0, 3);
  RawConn wrong(server_->port());
  wrong.send(hello_frame(kJoinRank, 5));
  EXPECT_NE(wrong.read_error().text.find("serves a job of 3 ranks"), std::string::npos);
  auto c2 = join(2, 3);  // by its number, into a vacancy
  ASSERT_TRUE(c0->peers().await_epoch(0, in(5s)));
  EXPECT_EQ(c0->peers().view().members, (std::vector<uint32_t>{0, 2}));
  auto j1 = joiner(3);
  ASSERT_EQ(j1.wait_for(10s), std::future_status::ready);
  auto c1 = j1.get();  // (kept: a client destroyed leaves the job)
  EXPECT_EQ(c1->rank(), 1u);
  // Full: a raw joiner waits, then speaks and is refused; another closes.
  RawConn talker(server_->port());
  talker.send(hello_frame(kJoinRank, 3));
  talker.send(make_frame(MsgType::kPut, 2, encode(PutMsg{"k", "v"})));
  EXPECT_NE(talker.read_error().text.find("sends nothing until it takes a rank's place"),
            std::string::npos);
  RawConn gone(server_->port());
  gone.send(hello_frame(kJoinRank, 3));
  auto waiting = joiner(3);
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  gone.close();
  EXPECT_TRUE(c2->leave(in(5s)));
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto c2_again = waiting.get();
  EXPECT_EQ(c2_again->rank(), 2u);
  // Rank 2's number is held again; a process naming it is refused.
  RawConn named(server_->port());
  named.send(hello_frame(2, 3));
  EXPECT_NE(named.read_error().text.find("already joined"), std::string::npos);
}

// A joiner takes the number of a rank that left while any member runs;
// once every rank has left, the job is over and a joiner is refused, not
// made its only member.
TEST_F(RegistryJoinersTest, AJoinerOfAJobEveryRankLeftIsRefused) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  auto waiting = joiner(2);
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  EXPECT_TRUE(c0->leave(in(5s)));  // rank 1 still runs: the number is taken
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto j0 = waiting.get();
  EXPECT_EQ(j0->rank(), 0u);
  EXPECT_TRUE(c1->leave(in(5s)));
  EXPECT_TRUE(j0->leave(in(5s)));  // the last member: the job is over
  auto after = joiner(2);
  ASSERT_EQ(after.wait_for(10s), std::future_status::ready);
  try {
    (void)after.get();
    ADD_FAILURE() << "a joiner entered a job every rank had left";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRegistry) << e.what();
    EXPECT_NE(std::string(e.what()).find("the job has finished: every rank left it"),
              std::string::npos)
        << e.what();
  }
}

// `sluice info --registry` lists a vacancy as such, and then the rank that
// took it.
TEST_F(RegistryJoinersTest, AnObserverListsVacanciesAndTheRanksThatTookThem) {
  start_elastic(1, 2);
  auto c0 = join(0, 2);
  const auto observe = [&] {
    return observe_job("127.0.0.1", server_->port(), kTestSecret, "host/", 200, Clock::now() + 10s);
  };
  std::vector<ObservedRank> seen = observe();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].state, "alive");
  EXPECT_EQ(seen[1].state, "vacant");
  EXPECT_NE(seen[1].reason.find("a vacancy of this elastic job"), std::string::npos);
  auto j = joiner(2);
  ASSERT_EQ(j.wait_for(10s), std::future_status::ready);
  auto c1 = j.get();
  seen = observe();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].state, "alive");
}

TEST(JoinerBootstrapTest, SluiceJoinMakesAJoinerAndItsMistakesAreNamed) {
  const BootstrapInfo info = parse_bootstrap({{"SLUICE_JOIN", "1"},
                                              {"SLUICE_WORLD_SIZE", "8"},
                                              {"SLUICE_REGISTRY", "node1:29600"},
                                              {"SLUICE_SECRET", "s"}});
  EXPECT_TRUE(info.join);
  EXPECT_TRUE(info.rankless());
  EXPECT_EQ(info.rank, kJoinerRank);
  EXPECT_EQ(info.world_size, 8u);
  const auto& error = bootstrap_error;
  EXPECT_NE(error({{"SLUICE_JOIN", "1"},
                   {"SLUICE_RANK", "2"},
                   {"SLUICE_WORLD_SIZE", "4"},
                   {"SLUICE_REGISTRY", "h:1"}})
                .find("SLUICE_JOIN=1 and a rank (SLUICE_RANK=2) are both given"),
            std::string::npos);
  EXPECT_NE(error({{"SLUICE_JOIN", "1"}, {"SLUICE_SPARE", "1"}, {"SLUICE_WORLD_SIZE", "4"}})
                .find("SLUICE_SPARE=1 and SLUICE_JOIN=1 are both set"),
            std::string::npos);
  EXPECT_NE(error({{"SLUICE_JOIN", "1"}, {"SLURM_NTASKS", "6"}, {"SLUICE_REGISTRY", "h:1"}})
                .find("SLUICE_JOIN=1 but SLUICE_WORLD_SIZE is not set"),
            std::string::npos);
  EXPECT_NE(error({{"SLUICE_JOIN", "yes"}, {"SLUICE_WORLD_SIZE", "4"}, {"SLUICE_REGISTRY", "h:1"}})
                .find("SLUICE_JOIN='yes' is not 0 or 1"),
            std::string::npos);
}

}  // namespace
}  // namespace sluice::control
