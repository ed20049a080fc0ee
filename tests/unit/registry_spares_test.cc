// Spares at the registry: a process that says HELLO without a rank waits,
// silent, until a rank dies, and then joins as that rank's next incarnation
// (`sluice run --spares K`, SLUICE_SPARE=1). A rank that leaves is not
// replaced; a spare that speaks, or one too many, is refused; a spare whose
// connection closes leaves the queue.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "control/bootstrap.h"
#include "control/protocol.h"
#include "control/registry_client.h"
#include "control/registry_server.h"
#include "registry_fixture.h"
#include "sluice/errors.h"

namespace sluice::control {
namespace {

using namespace std::chrono_literals;

class RegistrySparesTest : public RegistryFixture {
 protected:
  // What a spare's Cluster::join does: connect() returns once it has a rank.
  std::future<std::unique_ptr<RegistryClient>> spare(uint32_t world) {
    BootstrapInfo i = info(kSpareRank, world);
    i.spare = true;
    return std::async(std::launch::async, [i] {
      ClientOptions o;
      o.connect_timeout = 10s;
      return RegistryClient::connect(i, o);
    });
  }
  // A rank on a raw socket: closing it is the process's death.
  std::unique_ptr<RawConn> raw_rank(uint32_t rank, uint32_t world) {
    auto raw = std::make_unique<RawConn>(server_->port());
    raw->send(hello_frame(rank, world));
    Frame f;
    EXPECT_TRUE(raw->read_frame(&f));
    EXPECT_EQ(f.header.type, static_cast<uint16_t>(MsgType::kWelcome));
    return raw;
  }
};

TEST_F(RegistrySparesTest, ASpareWaitsUntilARankDiesAndJoinsAsItsNextIncarnation) {
  start(3);
  auto c0 = join(0, 3);
  auto r1 = raw_rank(1, 3);
  auto c2 = join(2, 3);
  auto waiting = spare(3);
  // No rank died: the spare has no answer.
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  r1->close();  // rank 1's process dies
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  auto s = waiting.get();
  EXPECT_EQ(s->rank(), 1u);
  // The survivors saw the loss (view 1) and then the spare come in as
  // incarnation 1 (view 2).
  ASSERT_TRUE(c0->peers().await_epoch(1, in(5s)));
  const PeerTable::ViewState v = c0->peers().view();
  EXPECT_EQ(v.epoch, 2u);
  EXPECT_EQ(v.members, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(c0->peers().incarnation(1), 1u);
  EXPECT_EQ(s->peers().incarnation(1), 1u);
  // It is rank 1 now: a view-scoped gather of every member completes.
  auto f0 = std::async(std::launch::async, [&] { return c0->gather("g", 2, "a", in(10s)); });
  auto f2 = std::async(std::launch::async, [&] { return c2->gather("g", 2, "c", in(10s)); });
  const GatheredMsg g = s->gather("g", 2, "b", in(10s));
  EXPECT_EQ(g.values, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(f0.get().values, g.values);
  EXPECT_EQ(f2.get().values, g.values);
}

// A spare that arrives after the death takes the died rank at once; with two
// dead, the lowest first, and the spare that waited longest first.
TEST_F(RegistrySparesTest, SparesTakeDiedRanksInOrderAtOnce) {
  start(4);
  auto c0 = join(0, 4);
  auto r1 = raw_rank(1, 4);
  auto r2 = raw_rank(2, 4);
  auto c3 = join(3, 4);
  r2->close();
  r1->close();
  ASSERT_TRUE(c0->peers().await_epoch(1, in(5s)));
  while (c0->peers().view().members.size() != 2) {
    ASSERT_TRUE(c0->peers().await_epoch(c0->peers().epoch(), in(5s)));
  }
  auto first = spare(4);
  ASSERT_EQ(first.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(first.get()->rank(), 1u);
  auto second = spare(4);
  ASSERT_EQ(second.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(second.get()->rank(), 2u);
}

// Leaving is not dying: nobody takes the place of a rank that left.
TEST_F(RegistrySparesTest, ARankThatLeftIsNotReplaced) {
  start(2);
  auto c0 = join(0, 2);
  auto c1 = join(1, 2);
  auto waiting = spare(2);
  EXPECT_TRUE(c1->leave(in(5s)));
  ASSERT_TRUE(c0->peers().await_epoch(0, in(5s)));
  EXPECT_EQ(waiting.wait_for(500ms), std::future_status::timeout);
  // The registry's end is the spare's: it fails naming why it never joined.
  server_->stop();
  thread_.join();
  server_.reset();
  try {
    (void)waiting.get();
    ADD_FAILURE() << "the spare joined a stopped registry";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRegistry) << e.what();
    EXPECT_NE(std::string(e.what()).find("waited as a spare"), std::string::npos) << e.what();
  }
}

// Hostile or broken spares: one that speaks before it has a place is
// refused; one whose connection closed is skipped, and the next one takes
// the place; a spare of another world size is refused naming both.
TEST_F(RegistrySparesTest, ASpareThatSpeaksOrLeftIsSkippedAndTheNextTakesThePlace) {
  start(2);
  auto c0 = join(0, 2);
  auto r1 = raw_rank(1, 2);
  RawConn talker(server_->port());
  talker.send(hello_frame(kNoRank, 2));
  talker.send(make_frame(MsgType::kPut, 2, encode(PutMsg{"k", "v"})));
  const ErrorMsg e = talker.read_error();
  EXPECT_NE(e.text.find("a spare sends nothing until it takes a rank's place"), std::string::npos)
      << e.text;
  RawConn gone(server_->port());
  gone.send(hello_frame(kNoRank, 2));
  RawConn wrong(server_->port());
  wrong.send(hello_frame(kNoRank, 3));
  const ErrorMsg w = wrong.read_error();
  EXPECT_NE(w.text.find("a spare says the job has 3 ranks, but this registry serves a job of 2"),
            std::string::npos)
      << w.text;
  auto waiting = spare(2);
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  gone.close();
  std::this_thread::sleep_for(100ms);  // the registry reads the EOF (either order is covered)
  r1->close();
  ASSERT_EQ(waiting.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(waiting.get()->rank(), 1u);
}

TEST(SpareBootstrapTest, SluiceSpareMakesASpareOfTheJobsWorldSize) {
  const BootstrapInfo info = parse_bootstrap({{"SLUICE_SPARE", "1"},
                                              {"SLUICE_WORLD_SIZE", "4"},
                                              {"SLUICE_REGISTRY", "node1:29600"},
                                              {"SLUICE_SECRET", "s"}});
  EXPECT_TRUE(info.spare);
  EXPECT_EQ(info.rank, kSpareRank);
  EXPECT_EQ(info.world_size, 4u);
  const BootstrapInfo not_spare = parse_bootstrap({{"SLUICE_SPARE", "0"},
                                                   {"SLUICE_RANK", "1"},
                                                   {"SLUICE_WORLD_SIZE", "4"},
                                                   {"SLUICE_REGISTRY", "node1:29600"},
                                                   {"SLUICE_SECRET", "s"}});
  EXPECT_FALSE(not_spare.spare);
  EXPECT_EQ(not_spare.rank, 1u);
}

TEST(SpareBootstrapTest, ASpareWithARankOrWithoutAWorldSizeIsAnErrorNamingTheVariables) {
  const auto& error = bootstrap_error;
  EXPECT_NE(error({{"SLUICE_SPARE", "1"},
                   {"SLUICE_RANK", "2"},
                   {"SLUICE_WORLD_SIZE", "4"},
                   {"SLUICE_REGISTRY", "h:1"}})
                .find("SLUICE_SPARE=1 and a rank (SLUICE_RANK=2) are both given"),
            std::string::npos);
  // Slurm's task count includes the spares: only SLUICE_WORLD_SIZE counts.
  EXPECT_NE(error({{"SLUICE_SPARE", "1"}, {"SLURM_NTASKS", "6"}, {"SLUICE_REGISTRY", "h:1"}})
                .find("SLUICE_SPARE=1 but SLUICE_WORLD_SIZE is not set"),
            std::string::npos);
  EXPECT_NE(error({{"SLUICE_SPARE", "yes"}, {"SLUICE_WORLD_SIZE", "4"}, {"SLUICE_REGISTRY", "h:1"}})
                .find("SLUICE_SPARE='yes' is not 0 or 1"),
            std::string::npos);
}

}  // namespace
}  // namespace sluice::control
