// KeyGroups (sluice/membership.h): each group's owner in a view is its home
// while the home is a member; a lost owner's groups, and only they, move to
// the other owners, about evenly, the same on every rank, and go home when
// it is back.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "sluice/errors.h"
#include "sluice/membership.h"

namespace sluice {
namespace {

View view_of(uint64_t epoch, std::vector<uint32_t> members) {
  return View{epoch, std::move(members), {}};
}

TEST(KeyGroupsTest, EveryGroupIsAtHomeWhileItsHomeIsAMember) {
  const KeyGroups groups(16, {0, 1, 2, 3});
  EXPECT_EQ(groups.size(), 16u);
  const std::vector<uint32_t> owners = groups.assign(view_of(0, {0, 1, 2, 3}));
  for (uint32_t g = 0; g < 16; ++g) {
    EXPECT_EQ(owners[g], g % 4);
    EXPECT_EQ(groups.home(g), g % 4);
  }
  // Owners in any order: home of g is owners[g % n]; members outside the
  // owners take nothing.
  const KeyGroups shuffled(4, {7, 2});
  EXPECT_EQ(shuffled.assign(view_of(0, {0, 2, 5, 7})), (std::vector<uint32_t>{7, 2, 7, 2}));
}

TEST(KeyGroupsTest, OnlyALostOwnersGroupsMoveSpreadOverTheOthersAndComeBack) {
  const KeyGroups groups(1024, {0, 1, 2, 3});
  const std::vector<uint32_t> before = groups.assign(view_of(0, {0, 1, 2, 3}));
  const std::vector<uint32_t> after = groups.assign(view_of(1, {0, 1, 3}));
  std::map<uint32_t, int> took;
  for (uint32_t g = 0; g < 1024; ++g) {
    if (before[g] != 2) {
      EXPECT_EQ(after[g], before[g]) << "group " << g;
    } else {
      EXPECT_NE(after[g], 2u) << "group " << g;
      ++took[after[g]];
    }
  }
  // 256 groups over 3 owners: each takes a share near 85.
  ASSERT_EQ(took.size(), 3u);
  for (const auto& [owner, n] : took) {
    EXPECT_GT(n, 50) << "owner " << owner;
    EXPECT_LT(n, 120) << "owner " << owner;
  }
  // A second loss moves only that owner's groups (rank 2's stay where they went,
  // unless they went to it).
  const std::vector<uint32_t> later = groups.assign(view_of(2, {0, 3}));
  for (uint32_t g = 0; g < 1024; ++g) {
    if (after[g] != 1) {
      EXPECT_EQ(later[g], after[g]) << "group " << g;
    }
    EXPECT_TRUE(later[g] == 0 || later[g] == 3) << "group " << g;
  }
  // Back: every group at home again, whatever the epoch.
  EXPECT_EQ(groups.assign(view_of(3, {0, 1, 2, 3})), before);
  // The same view gives the same map (every rank computes it alone).
  EXPECT_EQ(groups.assign(view_of(7, {0, 1, 3})), after);
}

TEST(KeyGroupsTest, GroupOfIsTheHashModuloTheGroups) {
  const KeyGroups groups(10, {0});
  EXPECT_EQ(groups.group_of(0), 0u);
  EXPECT_EQ(groups.group_of(23), 3u);
  EXPECT_EQ(groups.group_of(~uint64_t{0}), static_cast<uint32_t>(~uint64_t{0} % 10));
}

TEST(KeyGroupsTest, BadArgumentsAndNoOwnerLeftAreClearErrors) {
  try {
    KeyGroups bad(0, {0});
    ADD_FAILURE() << "no groups accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_THROW(KeyGroups(4, {}), Error);
  try {
    KeyGroups dup(4, {1, 2, 1});
    ADD_FAILURE() << "a duplicate owner accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("owner rank 1 appears more than once"), std::string::npos)
        << e.what();
  }
  const KeyGroups groups(4, {1, 2});
  try {
    (void)groups.assign(view_of(5, {0, 3}));
    ADD_FAILURE() << "a view without owners gave a map";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
    EXPECT_NE(std::string(e.what()).find("none of the owners 1,2 is a member of view 5"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sluice
