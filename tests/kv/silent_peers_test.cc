// How a rank's pushes treat a peer that takes nothing (apps/kv/silent_peers.h):
// which peers are quiet, which of them kv-accept waits for, and the job
// messages a full ring refused.
#include "silent_peers.h"

#include <gtest/gtest.h>

namespace kv {
namespace {

TEST(SilentPeersTest, APeerIsQuietOnceNothingCameFromItForTheWait) {
  SilentPeers s(400);  // waits 100 ms
  s.new_epoch({0, 1, 2, 3}, 3, 0, 1000);
  EXPECT_FALSE(s.quiet(1, 1099));
  EXPECT_TRUE(s.quiet(1, 1100));
  s.heard(1, 1100);
  EXPECT_FALSE(s.quiet(1, 1150));
  EXPECT_TRUE(s.quiet(2, 1150));
  // A new epoch: nobody is quiet.
  s.new_epoch({0, 2, 3}, 3, 0, 5000);
  EXPECT_FALSE(s.quiet(1, 5050));
}

// kv-accept's targets are the other replicas: a quiet client rank, or this
// rank itself, is no reason to skip its wait.
TEST(SilentPeersTest, OnlyAnotherReplicaCountsAsAQuietFollower) {
  SilentPeers s(400);
  s.new_epoch({0, 2, 3, 4}, 3, 2, 0);  // replicas 0 and 2 (this rank), clients 3 and 4
  s.heard(0, 150);
  EXPECT_FALSE(s.a_follower_quiet(200));  // 2 is this rank, 3 and 4 clients
  EXPECT_TRUE(s.a_follower_quiet(250));   // 0, 100 ms after its last message
}

TEST(SilentPeersTest, AJobMessageARingRefusedIsKeptAndSentAgainWhenDue) {
  SilentPeers s(400);
  s.new_epoch({0, 1, 2, 3}, 3, 0, 0);
  Message finish;
  finish.type = MsgType::kFinish;
  Message accept;
  accept.type = MsgType::kAccept;
  s.refused(1, accept, 10);
  s.refused(1, finish, 10);
  EXPECT_TRUE(s.stuck(1));
  EXPECT_EQ(s.dropped(), 1u);  // the Accept (the protocol sends it again)
  Outbox out;
  s.take_due(out, 50, false);
  EXPECT_TRUE(out.empty());
  s.take_due(out, 110, false);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type, MsgType::kFinish);
  s.sent(1);
  EXPECT_FALSE(s.stuck(1));
}

}  // namespace
}  // namespace kv
