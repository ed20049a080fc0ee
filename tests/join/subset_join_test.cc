// run_join on a subset of the job's ranks (JoinConfig::ranks): a 3-rank job
// (CTest starts it with `sluice run -n 3`) in which ranks 1 and 2 join and
// rank 0 takes no part (as a memory server of apps/nam does). Both
// algorithms must give exactly the single-process reference join of the same
// data, and a rank that is not one of JoinConfig::ranks is refused.
#include <gtest/gtest.h>
#include <sluice/sluice.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data.h"
#include "distributed_join.h"
#include "local_join.h"

namespace sj = sluice::join;

namespace {

sluice::Cluster* g_cluster = nullptr;
constexpr uint32_t kThreads = 2;

sj::DataSpec spec() {
  sj::DataSpec d;
  d.r_tuples = 20000;
  d.s_tuples = 30001;
  d.selectivity = 0.5;
  d.seed = 7;
  return d;
}

std::vector<std::span<const sj::Tuple16>> split(const std::vector<sj::Tuple16>& rows) {
  std::vector<std::span<const sj::Tuple16>> parts;
  for (uint32_t t = 0; t < kThreads; ++t) {
    const uint64_t b = sj::part_begin(rows.size(), kThreads, t);
    const uint64_t e = sj::part_begin(rows.size(), kThreads, t + 1);
    parts.emplace_back(rows.data() + b, e - b);
  }
  return parts;
}

void join_on_ranks_one_and_two(sj::Algorithm algorithm, const std::string& tag) {
  sluice::Cluster& cluster = *g_cluster;
  const sj::DataSpec data = spec();
  sj::JoinConfig config;
  config.algorithm = algorithm;
  config.threads = kThreads;
  config.ranks = {1, 2};
  std::string mine;
  if (cluster.rank() != 0) {
    // This rank's place among the two that take part.
    const auto [r, s] = sj::local_fragments<sj::Tuple16>(data, cluster.rank() - 1, 2, kThreads);
    const sj::RankReport rep = sj::run_join<sj::Tuple16>(cluster, config, split(r), split(s),
                                                         data.r_tuples, data.s_tuples);
    EXPECT_EQ(rep.error, "") << tag;
    // Every tuple it received came from the two ranks taking part.
    EXPECT_GT(rep.bytes_in, 0u) << tag;
    mine = std::to_string(rep.result.matches) + " " + std::to_string(rep.result.checksum);
  }
  // Rank 0 meanwhile did nothing with the join; all meet here.
  const std::vector<std::string> all = cluster.allgather("subset-join-" + tag, mine);
  if (cluster.rank() != 1) return;
  sj::JoinResult total;
  for (uint32_t r = 1; r <= 2; ++r) {
    unsigned long long m = 0, c = 0;
    ASSERT_EQ(std::sscanf(all[r].c_str(), "%llu %llu", &m, &c), 2) << all[r];
    total.add(sj::JoinResult{m, c});
  }
  const auto whole = sj::whole_relations<sj::Tuple16>(data, 1, kThreads);
  const sj::JoinResult reference = sj::hash_join<sj::Tuple16>(
      std::span<const sj::Tuple16>(whole.r), std::span<const sj::Tuple16>(whole.s));
  EXPECT_GT(reference.matches, 0u);
  EXPECT_EQ(total, reference) << tag << ": " << total.matches << " matches vs the reference's "
                              << reference.matches;
}

TEST(SubsetJoinTest, RadixJoinOnTwoOfThreeRanksMatchesTheReference) {
  join_on_ranks_one_and_two(sj::Algorithm::kRadix, "radix");
}

TEST(SubsetJoinTest, ReplicateJoinOnTwoOfThreeRanksMatchesTheReference) {
  join_on_ranks_one_and_two(sj::Algorithm::kReplicate, "replicate");
}

TEST(SubsetJoinTest, ARankOutsideTheSetIsRefused) {
  sj::JoinConfig config;
  config.threads = 1;
  config.ranks = {1, 2};
  if (g_cluster->rank() == 0) {
    std::vector<std::span<const sj::Tuple16>> none(1);
    EXPECT_THROW(sj::run_join<sj::Tuple16>(*g_cluster, config, none, none, 0, 0), sluice::Error);
  }
  config.ranks = {2, 1};  // not ascending: refused on every rank, before any flow
  std::vector<std::span<const sj::Tuple16>> none(1);
  EXPECT_THROW(sj::run_join<sj::Tuple16>(*g_cluster, config, none, none, 0, 0), sluice::Error);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  sluice::Cluster cluster = sluice::Cluster::join();
  g_cluster = &cluster;
  const int code = RUN_ALL_TESTS();
  g_cluster = nullptr;
  return code;
}
