// A RESP job's memory stays flat however long it serves (label slow): 10 M
// SETs of 200-byte values on 1,000 keys through redis-benchmark (-P 16,
// 32 connections), and every rank's resident set at the end within 10% of
// its level after the first million. Neither the gateway (no history kept)
// nor the replicas (no applied identities kept; logs cut at snapshots) may
// grow with the commands served. SLUICE_KV_PROTOCOL picks the protocol;
// SLUICE_KV_MEMORY_SETS the count (default 10,000,000).
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "resp_test_util.h"
#include "support/test_support.h"

namespace {

using kv::testing::Conn;
using kv::testing::request;
using kv::testing::RespJob;
using kv::testing::rss_kib;
using namespace std::chrono_literals;

// The processes whose parent is `parent` (a launcher's ranks).
std::vector<int> children_of(int parent) {
  std::vector<int> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(in, stat);
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

TEST(RespMemoryTest, EveryRanksMemoryStaysFlatOverTenMillionSets) {
  std::string error;
  int status = 0;
  const auto bench = sluice::proc::find_program("redis-benchmark", &error, &status);
  ASSERT_TRUE(bench.has_value()) << "redis-benchmark is missing: make test-tools installs it";
  const char* p = std::getenv("SLUICE_KV_PROTOCOL");
  const std::string protocol = p ? p : "multipaxos";
  const char* n = std::getenv("SLUICE_KV_MEMORY_SETS");
  const uint64_t total = n ? std::strtoull(n, nullptr, 10) : 10'000'000;
  ASSERT_GE(total, 2'000'000u);
  RespJob job(4, {"--protocol", protocol, "--resp-port", "0", "--enable-shutdown", "local"}, {}, {},
              3000);
  ASSERT_NE(job.port(), 0) << job.output();
  const std::vector<int> ranks = children_of(job.process().pid());
  ASSERT_EQ(ranks.size(), 4u) << "the launcher's ranks";
  auto run = [&](uint64_t sets) {
    const sluice::proc::ProcessResult r = sluice::testing::run_process(
        {*bench, "-p", std::to_string(job.port()), "-t", "set", "-n", std::to_string(sets), "-d",
         "200", "-r", "1000", "-c", "32", "-P", "16", "-q"},
        {}, std::chrono::minutes(45));
    EXPECT_EQ(r.exit_code, 0) << r.output.substr(r.output.size() -
                                                 std::min<size_t>(2000, r.output.size()));
    std::printf("%s", r.output.substr(r.output.rfind("SET")).c_str());
    job.drain(0ms);
  };
  run(1'000'000);
  std::map<int, uint64_t> first;
  for (int pid : ranks) first[pid] = rss_kib(pid);
  run(total - 1'000'000);
  for (int pid : ranks) {
    const uint64_t last = rss_kib(pid);
    std::printf("pid %d: %llu KiB after 1 M SETs, %llu KiB after %llu\n", pid,
                static_cast<unsigned long long>(first[pid]), static_cast<unsigned long long>(last),
                static_cast<unsigned long long>(total));
    EXPECT_LE(last, first[pid] + first[pid] / 10) << "pid " << pid << " grew by more than 10%";
  }
  Conn c(job.port());
  c.send(request({"SHUTDOWN"}));
  EXPECT_EQ(c.receive("+OK\r\n"), "+OK\r\n");
  const auto end = job.finish(300s);
  ASSERT_TRUE(end.has_value()) << job.output();
  EXPECT_EQ(end->exit_code, 0) << job.output();
  EXPECT_EQ(sluice::testing::count_lines_with(
                job.output(), "job: every operation completed exactly once; replicas identical"),
            1)
      << job.output();
}

}  // namespace
