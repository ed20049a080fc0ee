// `sluice top --once --json` reads a running job's counters from outside:
// every rank's source and target are listed, and their counters equal what
// the ranks themselves say they pushed and consumed (exactly, after the end
// of the flow). Over shm and ofi (the ctest variants set SLUICE_TRANSPORT).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;
using testing::run_process;

// The endpoints of flow `flow` in a snapshot, by (role, rank).
std::map<std::pair<std::string, uint64_t>, nlohmann::json> ticks_endpoints(
    const nlohmann::json& snap, const std::string& job, const std::string& flow) {
  std::map<std::pair<std::string, uint64_t>, nlohmann::json> out;
  for (const auto& p : snap.at("processes")) {
    if (p.at("job") != job) continue;
    for (const auto& e : p.at("endpoints")) {
      if (e.at("flow") == flow)
        out[{e.at("role").get<std::string>(), e.at("rank").get<uint64_t>()}] = e;
    }
  }
  return out;
}

TEST(SluiceTopTest, OnceJsonListsARunningJobsEndpointsWithCountersEqualToWhatTheRanksDid) {
  constexpr int kRanks = 3;
  constexpr uint64_t kRecords = 50000;
  const std::string hold = "/tmp/sluice-top-test-" + std::to_string(::getpid());
  // A flow name of its own: other tests' jobs may run the same program.
  const std::string flow = "ticks-" + std::to_string(::getpid());
  std::remove(hold.c_str());
  testing::ProcessResult job;
  std::thread runner([&] {
    job = run_process(testing::job_argv(kRanks, 120, "sluice-test-top-job",
                                        {"--records", std::to_string(kRecords), "--hold-until",
                                         hold, "--flow", flow}),
                      {{"SLUICE_LOG", "info"}}, std::chrono::seconds(150));
  });
  // Poll until every rank's source and target have ended.
  nlohmann::json snap;
  std::map<std::pair<std::string, uint64_t>, nlohmann::json> eps;
  std::string job_id;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < until) {
    const auto r =
        run_process({bin("sluice"), "top", "--once", "--json"}, {}, std::chrono::seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    snap = nlohmann::json::parse(r.output);
    // The job is the one whose processes have our flow.
    eps.clear();
    for (const auto& p : snap.at("processes")) {
      for (const auto& e : p.at("endpoints")) {
        if (e.at("flow") == flow) job_id = p.at("job");
      }
    }
    if (!job_id.empty()) eps = ticks_endpoints(snap, job_id, flow);
    bool done = eps.size() == 2 * kRanks;
    for (const auto& [key, e] : eps) done = done && e.at("state") == "ended";
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  { std::ofstream touch(hold); }
  runner.join();
  std::remove(hold.c_str());
  ASSERT_EQ(job.exit_code, 0) << job.output;
  ASSERT_EQ(eps.size(), 2u * kRanks) << snap.dump();
  // Nobody was lost: every process of the job is in the job's first view.
  for (const auto& p : snap.at("processes")) {
    if (p.at("job") == job_id) {
      EXPECT_EQ(p.at("epoch"), 0) << p.dump();
    }
  }

  // What each rank says it consumed.
  std::map<uint64_t, uint64_t> consumed;
  const std::regex line(R"(rank (\d+) pushed (\d+) consumed (\d+))");
  for (std::sregex_iterator it(job.output.begin(), job.output.end(), line), end; it != end; ++it) {
    consumed[std::stoull((*it)[1])] = std::stoull((*it)[3]);
  }
  ASSERT_EQ(consumed.size(), static_cast<size_t>(kRanks)) << job.output;
  uint64_t total_in = 0;
  for (uint64_t r = 0; r < kRanks; ++r) {
    const nlohmann::json& src = eps.at({"source", r});
    const nlohmann::json& dst = eps.at({"target", r});
    EXPECT_EQ(src.at("state"), "ended") << src.dump();
    EXPECT_EQ(dst.at("state"), "ended") << dst.dump();
    EXPECT_EQ(src.at("records"), kRecords) << src.dump();
    EXPECT_EQ(src.at("bytes"), kRecords * 16) << src.dump();
    EXPECT_EQ(dst.at("records"), consumed.at(r)) << dst.dump();
    EXPECT_EQ(dst.at("bytes"), consumed.at(r) * 16) << dst.dump();
    // Each source published at least one segment (its END) to every target.
    EXPECT_GE(src.at("segments").get<uint64_t>(), static_cast<uint64_t>(kRanks)) << src.dump();
    EXPECT_EQ(src.at("peers"), kRanks);
    EXPECT_EQ(src.at("ring_segments"), 16) << src.dump();
    EXPECT_LE(src.at("ring_fill").get<uint64_t>(), 16u) << src.dump();
    EXPECT_TRUE(dst.at("ring_fill").is_null()) << dst.dump();
    // Peers one by one: every target took a segment of each source (its END
    // at least) and saw it end; a source lists its targets.
    ASSERT_EQ(dst.at("peer_detail").size(), static_cast<size_t>(kRanks)) << dst.dump();
    ASSERT_EQ(src.at("peer_detail").size(), static_cast<size_t>(kRanks)) << src.dump();
    for (uint64_t p = 0; p < kRanks; ++p) {
      const nlohmann::json& in = dst.at("peer_detail")[p];
      EXPECT_EQ(in.at("rank"), p) << dst.dump();
      EXPECT_EQ(in.at("ended"), true) << dst.dump();
      EXPECT_FALSE(in.at("last_segment_ns").is_null()) << dst.dump();
      EXPECT_EQ(src.at("peer_detail")[p].at("rank"), p) << src.dump();
    }
    total_in += dst.at("records").get<uint64_t>();
  }
  EXPECT_EQ(total_in, kRanks * kRecords);
  // The job ended: its counters areas went with its processes.
  const auto after =
      run_process({bin("sluice"), "top", "--once", "--json"}, {}, std::chrono::seconds(30));
  ASSERT_EQ(after.exit_code, 0) << after.output;
  const nlohmann::json later = nlohmann::json::parse(after.output);
  for (const auto& p : later.at("processes")) EXPECT_NE(p.at("job"), job_id);
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A shell function for the tests' scripts: `pid_of R` prints the pid of
// the child of the launcher $p whose SLUICE_RANK is R (nothing if none).
constexpr const char* kPidOfRank =
    "pid_of() { for c in /proc/[0-9]*; do "
    "if grep -qs \"^PPid:[[:space:]]*$p\\$\" $c/status && "
    "tr '\\0' '\\n' < $c/environ 2>/dev/null | grep -qx SLUICE_RANK=$1; then "
    "echo ${c#/proc/}; fi; done; }; ";

// A job whose rank 1 never closes: every target waits for its END. When
// --timeout passes, `sluice run` reports each rank's endpoints and marks the
// ones that never ended; SIGUSR1 gets the same report without stopping it.
TEST(SluiceRunHangReportTest, ATimeoutAndSigusr1NameTheEndpointsThatNeverEnded) {
  const std::string hold = "/tmp/sluice-hang-test-" + std::to_string(::getpid());
  std::remove(hold.c_str());
  // The launcher in the background; SIGUSR1 once the job is stuck, as
  // `sluice top --pid` shows it for each of its ranks (two targets waiting a second for rank 1,
  // after segments from it: not at a fixed time, which a loaded machine may reach before the ranks
  // have set their flow up); then the timeout at 8 s. (The hold file is never made: rank 1 stalls
  // to the end.)
  const std::string script =
      "\"$0\" run -n 3 --timeout 8 -- \"$1\" --records 20000 --stall-rank 1 --hold-until \"$2\" & "
      "p=$!; i=0; "
      "while [ $i -lt 40 ]; do n=0; "
      "for c in $(cat /proc/$p/task/*/children); do "
      "k=$(\"$0\" top --once --pid $c | grep -c '^    waiting for source (1,0) on rank 1: last "
      "segment taken'); n=$((n+k)); done; "
      "[ \"$n\" -ge 2 ] && break; sleep 0.1; i=$((i+1)); done; "
      "echo \"top saw $n\"; [ \"$n\" -ge 2 ] || \"$0\" top --once; "
      "kill -USR1 $p; wait $p; echo \"launcher exit $?\"";
  const auto r =
      run_process({"/bin/sh", "-c", script, bin("sluice"), bin("sluice-test-top-job"), hold}, {},
                  std::chrono::seconds(60));
  EXPECT_NE(r.output.find("launcher exit 124"), std::string::npos) << r.output;
  // The live view shows, under the two targets rank 1 starves, whom they
  // wait for. (Only this job's ranks, the launcher's children, are looked
  // at: another run of this test, e.g. the other transport's, may be
  // stalled beside it.)
  std::smatch saw;
  ASSERT_TRUE(std::regex_search(r.output, saw, std::regex(R"(top saw (\d+))"))) << r.output;
  EXPECT_GE(std::stoi(saw[1]), 2) << r.output;
  // Both reports: every rank, its source and its target.
  for (const char* when : {"on SIGUSR1", "at the timeout"}) {
    for (int rank = 0; rank < 3; ++rank) {
      const std::string head = "rank " + std::to_string(rank) + " (pid ";
      bool found = false;
      for (size_t at = r.output.find(head); at != std::string::npos;
           at = r.output.find(head, at + 1)) {
        const size_t eol = r.output.find('\n', at);
        if (r.output.substr(at, eol - at).find(when) != std::string::npos) found = true;
      }
      EXPECT_TRUE(found) << "no report of rank " << rank << " " << when << ":\n" << r.output;
    }
  }
  // Every target waits for rank 1's END, and rank 1's source never closed.
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(testing::count_lines_with(
                  r.output, "flow 'ticks' target (" + std::to_string(rank) + ",0) open: "),
              2)
        << r.output;
  }
  EXPECT_EQ(testing::count_lines_with(r.output, "flow 'ticks' source (1,0) open: "), 2) << r.output;
  // The sources that closed are reported as ended, with all they pushed.
  EXPECT_EQ(testing::count_lines_with(r.output, "flow 'ticks' source (0,0) ended: 20000 records"),
            2)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "<- not ended"), 2 * 4) << r.output;
  // Each waiting target names the source it waits for, its rank and host and
  // when it last took a segment of it (rank 1 published segments, then
  // stalled), and the sources that ended: 2 targets, in both reports (rank
  // 1's own target, stalled with it, has taken nothing from anyone).
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(testing::count_lines_with(r.output, "waiting for source (1,0) on rank 1 (" +
                                                    std::string(host) + "): last segment taken "),
            2 * 2)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, " s ago; (0,0),(2,0) ended"), 2 * 2) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "waiting for sources (0,0) on rank 0 (" +
                                                    std::string(host) +
                                                    "): no segment taken yet; (1,0) on rank 1"),
            2)
      << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// SIGUSR1 to one rank (not the launcher) makes that rank print its own
// report to stderr: its flow endpoints, its region handle and the sequence
// numbers its ordered source took; the job goes on and ends well.
TEST(RankSigusr1ReportTest, ARankReportsItsEndpointsAndRegionHandlesAndCarriesOn) {
  const std::string hold = "/tmp/sluice-usr1-test-" + std::to_string(::getpid());
  std::remove(hold.c_str());
  // Once every rank pushed and consumed (and holds its endpoints), signal
  // the launcher's child whose SLUICE_RANK is 1, give its control thread a
  // heartbeat interval or two, then let the job end.
  const std::string script =
      std::string(kPidOfRank) +
      ": >\"$2.out\"; "
      "\"$0\" run -n 3 --timeout 60 -- \"$1\" --records 20000 --region-ops 25 --ordered 800 "
      "--hold-until \"$2\" >>\"$2.out\" 2>&1 & p=$!; "
      "i=0; while n=$(grep -c ' pushed ' \"$2.out\"); [ \"${n:-0}\" -lt 3 ] && [ $i -lt 600 ]; "
      "do sleep 0.1; i=$((i+1)); done; "
      "r1=$(pid_of 1); [ -n \"$r1\" ] && echo \"signalled $r1\" && kill -USR1 $r1; "
      "sleep 3; touch \"$2\"; wait $p; echo \"launcher exit $?\"; cat \"$2.out\"; rm -f \"$2.out\"";
  const auto r =
      run_process({"/bin/sh", "-c", script, bin("sluice"), bin("sluice-test-top-job"), hold}, {},
                  std::chrono::seconds(90));
  std::remove(hold.c_str());
  EXPECT_EQ(testing::count_lines_with(r.output, "signalled "), 1) << r.output;
  EXPECT_NE(r.output.find("launcher exit 0"), std::string::npos) << r.output;
  // Only rank 1 reported, once, and it lists all its endpoints: ticks source
  // and target, seq source and target, and the region handle.
  EXPECT_EQ(testing::count_lines_with(r.output, "report on SIGUSR1: rank 1 (pid "), 1) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "report on SIGUSR1: rank 0 "), 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "has 5 endpoint(s), 0 flow endpoint(s) not ended"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "flow 'ticks' source (1,0) ended: 20000 records"),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "flow 'ticks' target (1,0) ended: "), 1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "flow 'seq' source (1,0) ended: 2400 records in "),
            1)
      << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, " sequence numbers taken"), 1) << r.output;
  // Nothing failed on the way out (the flows are destroyed after their
  // endpoints).
  EXPECT_EQ(r.output.find("error"), std::string::npos) << r.output;
  EXPECT_EQ(testing::count_lines_with(
                r.output,
                "region 'tally' handle 0 of rank 1 (owner rank 0) open: 26 operations, "
                "208 bytes"),
            1)
      << r.output;
  // The job itself was untouched: every record consumed once, and every
  // rank consumed all 3 x 800 of the ordered flow.
  uint64_t consumed = 0;
  const std::regex line(R"(rank \d+ pushed 20000 consumed (\d+))");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it) {
    consumed += std::stoull((*it)[1]);
  }
  EXPECT_EQ(consumed, 3u * 20000) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, " seq consumed 2400"), 3) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

// A spare (sluice run --spares) waiting for a lost rank's place has no
// endpoints, but sluice top lists it under its job: in the JSON as a
// process with "spare": true and that job's registry address, and on the
// live view's line of the job's view as "spares waiting: pid P".
TEST(SluiceTopTest, ASpareWaitingIsListedUnderItsJob) {
  const std::string hold = "/tmp/sluice-top-spare-test-" + std::to_string(::getpid());
  const std::string flow = "ticks-spare-" + std::to_string(::getpid());
  std::remove(hold.c_str());
  testing::ProcessResult job;
  std::thread runner([&] {
    job = run_process(testing::job_argv(2, 120, "sluice-test-top-job",
                                        {"--records", "1000", "--hold-until", hold, "--flow", flow},
                                        {"--spares", "1"}),
                      {}, std::chrono::seconds(150));
  });
  std::string job_id;
  int spare_pid = 0;
  uint64_t spare_rank = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < until && spare_pid == 0) {
    const auto r =
        run_process({bin("sluice"), "top", "--once", "--json"}, {}, std::chrono::seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const nlohmann::json snap = nlohmann::json::parse(r.output);
    for (const auto& p : snap.at("processes")) {
      for (const auto& e : p.at("endpoints")) {
        if (e.at("flow") == flow) job_id = p.at("job");
      }
    }
    for (const auto& p : snap.at("processes")) {
      if (!job_id.empty() && p.at("job") == job_id && p.at("spare") == true) {
        spare_pid = p.at("pid");
        spare_rank = static_cast<uint64_t>(p.at("rank").get<int64_t>());
        EXPECT_TRUE(p.at("endpoints").empty()) << p.dump();
      }
    }
    if (spare_pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string screen;
  if (spare_pid != 0) {
    const auto r = run_process({bin("sluice"), "top", "--once"}, {}, std::chrono::seconds(30));
    screen = r.output;
  }
  { std::ofstream touch(hold); }
  runner.join();
  std::remove(hold.c_str());
  ASSERT_NE(spare_pid, 0) << "no spare listed under job '" << job_id << "'\n" << job.output;
  EXPECT_EQ(spare_rank, static_cast<uint64_t>(-2));
  EXPECT_EQ(
      testing::count_lines_with(screen, "job " + job_id + " view: epoch 0: ranks 0,1; " +
                                            "spares waiting: pid " + std::to_string(spare_pid)),
      1)
      << screen;
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

TEST(SluiceTopTest, TheLiveViewPrintsATableOfEveryProcess) {
  const auto r = run_process({bin("sluice"), "top", "--iterations", "2", "--interval", "0.1"}, {},
                             std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "sluice top:"), 2) << r.output;
  EXPECT_EQ(testing::count_lines_with(r.output, "rec/s"), 2) << r.output;
}

// SLUICE_LOG=info names the path of every pair of endpoints: over shm one
// line per peer rank on this host; over ofi, per source and target, the
// provider, data path and peer address. A fallback from the preferred
// providers (verbs, efa) to another is a warning, once per process, at any
// log level: it is asserted where the chosen provider shows it happened.
TEST(SluiceLogInfoTest, NamesThePathOfEveryPairOfEndpointsAndWarnsOfAProviderFallback) {
  constexpr int kRanks = 3;
  const std::string hold = "/tmp/sluice-log-test-" + std::to_string(::getpid());
  { std::ofstream touch(hold); }  // the job ends as soon as its flow has
  const testing::ProcessResult job =
      run_process(testing::job_argv(kRanks, 120, "sluice-test-top-job",
                                    {"--records", "1000", "--hold-until", hold}),
                  {{"SLUICE_LOG", "info"}}, std::chrono::seconds(150));
  std::remove(hold.c_str());
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const char* transport = std::getenv("SLUICE_TRANSPORT");
  if (transport != nullptr && std::string(transport) == "ofi") {
    const std::regex out(
        R"(flow 'ticks' source (\d) -> target (\d) \(rank \d on [^)]+\): ofi (\S+), (RMA|messages), peer at \S+)");
    const std::regex in(
        R"(flow 'ticks' target (\d) <- source (\d) \(rank \d on [^)]+\): ofi (\S+), (RMA|messages), peer at \S+)");
    std::set<std::string> pairs_out, pairs_in;
    std::string provider;
    for (std::sregex_iterator it(job.output.begin(), job.output.end(), out), end; it != end; ++it) {
      pairs_out.insert((*it)[1].str() + ">" + (*it)[2].str());
      provider = (*it)[3];
    }
    for (std::sregex_iterator it(job.output.begin(), job.output.end(), in), end; it != end; ++it)
      pairs_in.insert((*it)[2].str() + ">" + (*it)[1].str());
    EXPECT_EQ(pairs_out.size(), static_cast<size_t>(kRanks * kRanks)) << job.output;
    EXPECT_EQ(pairs_in, pairs_out) << job.output;
    // Away from the preferred providers, each rank says so once: a warning
    // where one of them is here and refused, at info level where none is
    // (a host without RDMA hardware, as this one).
    const size_t fell_back = testing::count_lines_with(job.output, "warn: ofi: fell back to");
    const size_t none_here =
        testing::count_lines_with(job.output, "info: ofi: using " + provider + " (");
    if (std::getenv("SLUICE_OFI_PROVIDER") == nullptr &&
        provider.find("verbs") == std::string::npos && provider != "efa") {
      EXPECT_EQ(fell_back + none_here, static_cast<size_t>(kRanks)) << job.output;
      if (none_here > 0) {
        EXPECT_NE(job.output.find("no RDMA provider (verbs, efa) is present on this host"),
                  std::string::npos)
            << job.output;
      }
    } else {
      EXPECT_EQ(fell_back + none_here, 0u) << job.output;
    }
  } else {
    // Every rank maps every other rank's rings.
    EXPECT_EQ(testing::count_lines_with(job.output, "is on this host: shm"),
              static_cast<size_t>(kRanks * (kRanks - 1)))
        << job.output;
    EXPECT_EQ(testing::count_lines_with(job.output, "fell back"), 0u) << job.output;
  }
}

}  // namespace
// A rank stopped (SIGSTOP) while the others push to it: their sources
// block on its full rings, and a hang report (SIGUSR1 to rank 0) names the
// target each waits for and for how long, as `sluice top --json` does
// (waiting_for_credit). Nobody is told which rank stops: the test stops it
// from outside, and lets it go on; the ranks push until the test lets the
// job end, which then delivers every record exactly once.
TEST(SluiceRunHangReportTest, ASourceBlockedOnAFullRingNamesItsTarget) {
  const std::string hold = "/tmp/sluice-credit-test-" + std::to_string(::getpid());
  std::remove(hold.c_str());
  const std::string script =
      std::string(kPidOfRank) +
      ": >\"$2.out\"; "
      "\"$0\" run -n 3 --timeout 90 -- \"$1\" --records 0 --hold-until \"$2\" "
      ">>\"$2.out\" 2>&1 & p=$!; "
      // (Once both ranks' ticks endpoints exist: their flows are declared
      // and the records moving.)
      "i=0; while r2=$(pid_of 2); r0=$(pid_of 0); "
      "n=$(\"$0\" top --once 2>/dev/null | grep -cE \" ($r0|$r2) +ticks \"); "
      "[ \"${n:-0}\" -lt 4 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
      "sleep 1; kill -STOP $r2; echo \"rank 0 is pid $r0\"; sleep 2; "
      "kill -USR1 $r0; sleep 1; "
      "\"$0\" top --once --json > \"$2.top\"; "
      "kill -CONT $r2; touch \"$2\"; wait $p; echo \"launcher exit $?\"; cat \"$2.out\"; "
      "echo \"top: $(cat \"$2.top\")\"; rm -f \"$2.out\" \"$2.top\"";
  const auto r =
      run_process({"/bin/sh", "-c", script, bin("sluice"), bin("sluice-test-top-job"), hold},
                  {{"SLUICE_PEER_TIMEOUT_MS", "30000"}}, std::chrono::seconds(150));
  std::remove(hold.c_str());
  EXPECT_NE(r.output.find("launcher exit 0"), std::string::npos) << r.output;
  // Rank 0's report: its source waits for target (2,0), the stopped rank.
  EXPECT_EQ(testing::count_lines_with(r.output, "report on SIGUSR1: rank 0 (pid "), 1) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex(
          R"(waiting \d+\.\d s for credit from target \(2,0\) on rank 2 \(.*\): its ring of \d+ segments is full)")))
      << r.output;
  // Every record pushed was consumed once (the ranks pushed until the end).
  uint64_t pushed = 0, consumed = 0;
  const std::regex counts(R"(rank \d+ pushed (\d+) consumed (\d+))");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), counts);
       it != std::sregex_iterator(); ++it) {
    pushed += std::stoull((*it)[1]);
    consumed += std::stoull((*it)[2]);
  }
  EXPECT_GT(pushed, 0u) << r.output;
  EXPECT_EQ(pushed, consumed) << r.output;
  // top saw rank 0's source waiting for target (2,0). (top lists every job
  // on the host: other tests' too.)
  std::smatch pid;
  ASSERT_TRUE(std::regex_search(r.output, pid, std::regex(R"(rank 0 is pid (\d+))"))) << r.output;
  const size_t at = r.output.find("top: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const nlohmann::json top = nlohmann::json::parse(r.output.substr(at + 5));
  int waiting_for_2 = 0;
  for (const auto& proc : top.at("processes")) {
    if (proc.at("pid") != std::stoll(pid[1])) continue;
    for (const auto& e : proc.at("endpoints")) {
      if (e.at("role") != "source" || !e.contains("waiting_for_credit")) continue;
      const auto& w = e.at("waiting_for_credit");
      if (!w.is_null() && w.value("rank", -1) == 2) ++waiting_for_2;
    }
  }
  EXPECT_GE(waiting_for_2, 1) << r.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

}  // namespace sluice
