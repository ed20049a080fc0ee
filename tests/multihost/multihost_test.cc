// sluice across separate IP hosts: three network namespaces joined by veth,
// a standalone `sluice registry` in the first, one rank in each, started by
// hand with the bootstrap environment a cluster manager would set. The
// shuffles check exactly-once delivery and per-source order inside
// sluice-test-worker (rank 0 prints VERIFIED only if all of it holds); the
// fault test kills one host's rank and expects the others to report PeerLost
// within the deadline.
//
// The transport is the one real multi-host jobs use, ofi over the tcp
// provider. MULTIHOST_TRANSPORT=<name> sets SLUICE_TRANSPORT=<name> instead
// (no SLUICE_OFI_*), and MULTIHOST_TRANSPORT=default sets no transport
// variable at all. Where the library lets shm span namespaces of one machine
// (they share /dev/shm and /proc), that checks the harness and the control
// plane across hosts without the network data path.
// MULTIHOST_TOPOLOGY=bridge|mesh forces how the hosts are joined.
//
// Needs root and iproute2; skips with the reason otherwise.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "multihost/child_process.h"
#include "multihost/netns.h"
#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;
using testing::ChildProcess;
using testing::Clock;
using testing::ProcessResult;
using testing::TestHosts;
using testing::Topology;

constexpr char kSecret[] = "multihost-test-secret";
constexpr int kHosts = 3;
constexpr auto kRegistryStartLimit = std::chrono::seconds(20);
// Five jobs at this limit still fit in the CTest timeout (600 s).
constexpr auto kJobLimit = std::chrono::seconds(100);

#define SKIP_WITHOUT_NAMESPACES()                                                  \
  do {                                                                             \
    std::string why;                                                               \
    if (!TestHosts::can_create(&why)) {                                            \
      GTEST_SKIP() << "multihost: cannot create network namespaces here: " << why; \
    }                                                                              \
  } while (0)

std::string transport() {
  const char* t = std::getenv("MULTIHOST_TRANSPORT");
  return t != nullptr && *t != '\0' ? t : "ofi";
}

// The environment of every process the tests start: the test's own, minus
// any SLUICE_* a developer's shell or an enclosing launcher left there (they
// would change the bootstrap or transport under test), plus `set`.
// SLUICE_LOG is kept because it only helps to debug.
std::vector<std::string> job_environment(std::map<std::string, std::string> set) {
  if (const char* log = std::getenv("SLUICE_LOG"); log != nullptr && set.count("SLUICE_LOG") == 0) {
    set["SLUICE_LOG"] = log;
  }
  return proc::environment_with(set, {"SLUICE_"});
}

std::map<std::string, std::string> with_secret(std::map<std::string, std::string> env) {
  env["SLUICE_SECRET"] = kSecret;
  return env;
}

// A standalone registry in one host, bound to that host's address, as the
// first step of a job a cluster manager starts. Stopped on destruction.
class Registry {
 public:
  // `env`: more of its environment (SLUICE_PEER_TIMEOUT_MS, ...).
  Registry(const TestHosts& hosts, int host, int world, std::map<std::string, std::string> env = {})
      : child_(hosts.spawn(host,
                           {bin("sluice"), "registry", "--bind", hosts.ip(host) + ":0", "--world",
                            std::to_string(world)},
                           // The secret in the environment: a command line is
                           // readable by every user (/proc/<pid>/cmdline).
                           job_environment(with_secret(std::move(env))))) {
    address_ = child_
                   ->wait_for_output(std::regex("SLUICE_REGISTRY=([^\\s]+)\n"),
                                     Clock::now() + kRegistryStartLimit)
                   .value_or("");
  }
  // SIGTERM, then SIGKILL if it does not stop within 5 s.
  ~Registry() { child_->stop(std::chrono::seconds(5)); }

  // "HOST:PORT", or "" if it did not print one in time.
  const std::string& address() const { return address_; }
  std::string output() const { return child_->output(); }

 private:
  std::unique_ptr<ChildProcess> child_;
  std::string address_;
};

// MULTIHOST_TOPOLOGY=bridge|mesh forces one way of joining the hosts (to
// exercise the fallback); by default a bridge, else a mesh.
Topology topology() {
  const char* t = std::getenv("MULTIHOST_TOPOLOGY");
  const std::string v = t != nullptr ? t : "";
  if (v == "bridge") return Topology::kBridge;
  if (v == "mesh") return Topology::kMesh;
  return Topology::kAuto;
}

// What the transport under test needs in every rank's environment.
// `rma` picks the ofi data path: RMA writes, or tagged messages.
std::map<std::string, std::string> transport_env(bool rma) {
  const std::string t = transport();
  if (t == "default") return {};  // whatever the library picks by itself
  if (t != "ofi") return {{"SLUICE_TRANSPORT", t}};
  std::map<std::string, std::string> env = {{"SLUICE_TRANSPORT", "ofi"},
                                            {"SLUICE_OFI_PROVIDER", "tcp"}};
  if (!rma) env["SLUICE_OFI_RMA"] = "0";
  return env;
}

struct Job {
  std::vector<ProcessResult> ranks;  // rank r ran in host r
  std::string registry_output;
  double seconds = 0;

  // Every rank's and the registry's output, for failure messages.
  std::string describe() const {
    std::ostringstream out;
    for (size_t r = 0; r < ranks.size(); ++r) {
      out << "--- rank " << r << " (exit " << ranks[r].exit_code << ", signal "
          << ranks[r].term_signal << (ranks[r].timed_out ? ", TIMED OUT" : "") << ", "
          << ranks[r].seconds << " s)\n"
          << ranks[r].output;
    }
    out << "--- registry\n" << registry_output;
    return out.str();
  }
};

// Starts a registry in host 0 and rank r of the worker in host r, with the
// bootstrap variables set by hand, and waits for every rank to end.
// `inject`, if given, runs once every rank started (a fault test's
// injector: it kills a rank from outside).
Job run_job(const TestHosts& hosts, const std::vector<std::string>& worker_args,
            const std::map<std::string, std::string>& extra_env,
            const std::function<void(std::vector<std::unique_ptr<ChildProcess>>&)>& inject = {}) {
  Job job;
  const auto start = Clock::now();
  Registry registry(hosts, 0, hosts.size());
  if (registry.address().empty()) {
    ADD_FAILURE() << "sluice registry in " << hosts.name(0) << " printed no address within "
                  << kRegistryStartLimit.count() << " s:\n"
                  << registry.output();
    return job;
  }
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < hosts.size(); ++r) {
    std::map<std::string, std::string> env = extra_env;
    env["SLUICE_RANK"] = std::to_string(r);
    env["SLUICE_WORLD_SIZE"] = std::to_string(hosts.size());
    env["SLUICE_REGISTRY"] = registry.address();
    env["SLUICE_SECRET"] = kSecret;
    std::vector<std::string> argv = {bin("sluice-test-worker")};
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    ranks.push_back(hosts.spawn(r, argv, job_environment(env)));
  }
  if (inject) inject(ranks);
  const auto deadline = start + kJobLimit;
  for (auto& rank : ranks) job.ranks.push_back(rank->wait(deadline));
  job.registry_output = registry.output();
  job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return job;
}

// Each host's counts of TCP connections it aborted (a reset instead of an
// orderly close loses whatever the sender had not yet delivered), for the
// output of a failed job.
std::string tcp_aborts(const TestHosts& hosts) {
  std::string out = "\nTCP aborts per host (nstat -az TcpExtTCPAbort*):\n";
  for (int i = 0; i < hosts.size(); ++i) {
    ProcessResult r = hosts.run(i, {"nstat", "-az", "TcpExtTCPAbort*"}, std::chrono::seconds(10));
    out += hosts.name(i) + ":\n" + r.output;
  }
  return out;
}

class MultihostShuffleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_NAMESPACES();
    hosts_ = std::make_unique<TestHosts>(kHosts, topology());
    std::printf("multihost: %s topology, hosts %s %s %s, transport %s\n",
                testing::to_string(hosts_->topology()), hosts_->ip(0).c_str(),
                hosts_->ip(1).c_str(), hosts_->ip(2).c_str(), transport().c_str());
  }

  // Runs an N:M shuffle over every host and expects `records` delivered
  // exactly once.
  void expect_verified_shuffle(std::vector<std::string> worker_args, bool rma, uint64_t records) {
    Job job = run_job(*hosts_, worker_args, transport_env(rma));
    ASSERT_EQ(job.ranks.size(), static_cast<size_t>(kHosts));
    for (size_t r = 0; r < job.ranks.size(); ++r) {
      EXPECT_FALSE(job.ranks[r].timed_out) << "rank " << r;
      EXPECT_EQ(job.ranks[r].exit_code, 0) << "rank " << r;
      EXPECT_EQ(testing::count_lines_with(job.ranks[r].output, "FAILED"), 0) << "rank " << r;
    }
    EXPECT_EQ(testing::count_lines_with(job.ranks[0].output,
                                        "VERIFIED " + std::to_string(records) + " records"),
              1)
        << "rank 0";
    EXPECT_TRUE(testing::sluice_shm_entries().empty());
    if (HasFailure()) {
      ADD_FAILURE() << "the job's output:\n" << job.describe() << tcp_aborts(*hosts_);
    }
    std::smatch verified;
    if (std::regex_search(job.ranks[0].output, verified, std::regex("VERIFIED[^\n]*"))) {
      std::printf("multihost: rank 0: %s\n", verified[0].str().c_str());
    }
    std::printf("multihost: job took %.2f s\n", job.seconds);
  }

  std::unique_ptr<TestHosts> hosts_;
};

TEST_F(MultihostShuffleTest, ShufflesAcrossThreeHostsOverRma) {
  expect_verified_shuffle(
      {"--sources", "0,1,2", "--targets", "0,1,2", "--slots", "2", "--tuples", "200000"},
      /*rma=*/true, 3 * 2 * 200000);
}

TEST_F(MultihostShuffleTest, ShufflesAcrossThreeHostsOverMessages) {
  expect_verified_shuffle(
      {"--sources", "0,1,2", "--targets", "0,1,2", "--slots", "2", "--tuples", "200000"},
      /*rma=*/false, 3 * 2 * 200000);
}

TEST_F(MultihostShuffleTest, ShufflesVariableLengthRecordsAcrossThreeHosts) {
  expect_verified_shuffle({"--sources", "0,1,2", "--targets", "0,1,2", "--slots", "2", "--bytes",
                           "--tuples", "100000", "--segment-bytes", "1024"},
                          /*rma=*/true, 3 * 2 * 100000);
}

TEST_F(MultihostShuffleTest, ShufflesFromTwoHostsToTheThird) {
  expect_verified_shuffle(
      {"--sources", "0,1", "--targets", "2", "--slots", "2", "--tuples", "200000"},
      /*rma=*/true, 2 * 2 * 200000);
}

class MultihostFaultTest : public MultihostShuffleTest {};

// The test kills rank 1 from outside (SIGKILL to its process group) when
// its source prints that it reached record 200000; no rank is told.
TEST_F(MultihostFaultTest, KilledRankIsReportedLostByTheOtherHosts) {
  int64_t killed_us = 0;
  Job job = run_job(
      *hosts_,
      {"--sources", "0,1,2", "--targets", "0,1,2", "--tuples", "50000000", "--mark-after", "200000",
       "--expect-peer-lost", "1"},
      transport_env(/*rma=*/true), [&](std::vector<std::unique_ptr<ChildProcess>>& ranks) {
        if (!ranks[1]->wait_for_output(std::regex("AT rank 1 "), Clock::now() + kJobLimit)) {
          ADD_FAILURE() << "rank 1 never reached its mark";
          return;
        }
        killed_us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
        ::kill(-ranks[1]->pid(), SIGKILL);
      });
  ASSERT_EQ(job.ranks.size(), static_cast<size_t>(kHosts));
  EXPECT_EQ(job.ranks[1].term_signal, SIGKILL) << "rank 1 should have died by the test's SIGKILL";
  EXPECT_FALSE(job.ranks[1].timed_out) << "rank 1";
  const std::regex detected("PEERLOST at_us ([0-9]+): .*rank 1");
  for (int r : {0, 2}) {
    EXPECT_FALSE(job.ranks[r].timed_out) << "rank " << r;
    EXPECT_EQ(job.ranks[r].exit_code, 0) << "rank " << r;
    std::smatch m;
    if (!std::regex_search(job.ranks[r].output, m, detected)) {
      ADD_FAILURE() << "rank " << r << " did not report rank 1 lost";
      continue;
    }
    const long ms = static_cast<long>((std::stoll(m[1]) - killed_us) / 1000);
    EXPECT_GE(ms, 0) << "rank " << r << ": " << m[0];
    EXPECT_LT(ms, 5000) << "rank " << r << ": the peer deadline is 5 s: " << m[0];
    std::printf("multihost: rank %d detected the loss in %ld ms\n", r, ms);
  }
  EXPECT_LT(job.seconds, 60) << "the ranks should end soon after the kill, not at their limit";
  if (HasFailure()) ADD_FAILURE() << "the job's output:\n" << job.describe();
  std::printf("multihost: job took %.2f s\n", job.seconds);
}

// A source whose target still has much to take closes and is destroyed, and
// its thread is then descheduled (the test hook holds it 100 ms) before its
// endpoint closes. Closing a tcp connection while the target still sends
// credit makes the kernel reset it, and what the target had not yet taken
// (the END above all) is thrown away: the rare hang of the shuffles above
// under load. A source now closes only after each target confirmed that
// everything arrived, and a target sends nothing after confirming, so no
// connection is ever reset. Counted by the kernel of a namespace of its own.
// `sluice info --registry`, run in host 1 while a job spans the three hosts,
// names the path a rank started there takes to each member: shared memory
// to the rank on its own host, ofi to the two others.
TEST(MultihostInfoTest, InfoNamesShmToTheRankOnItsHostAndOfiToTheOthers) {
  SKIP_WITHOUT_NAMESPACES();
  TestHosts hosts(kHosts, topology());
  Registry registry(hosts, 0, kHosts);
  ASSERT_FALSE(registry.address().empty()) << registry.output();
  const std::string hold = "/tmp/sluice-multihost-info-" + std::to_string(::getpid());
  std::remove(hold.c_str());
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < kHosts; ++r) {
    ranks.push_back(
        hosts.spawn(r, {bin("sluice-test-top-job"), "--records", "1000", "--hold-until", hold},
                    job_environment({{"SLUICE_RANK", std::to_string(r)},
                                     {"SLUICE_WORLD_SIZE", std::to_string(kHosts)},
                                     {"SLUICE_REGISTRY", registry.address()},
                                     {"SLUICE_SECRET", kSecret}})));
  }
  // Every rank joined (and published its host) once it printed its counts.
  for (auto& rank : ranks) {
    ASSERT_TRUE(rank->wait_for_output(std::regex("pushed 1000 consumed"), Clock::now() + kJobLimit))
        << rank->output();
  }
  auto info = hosts.spawn(1, {bin("sluice"), "info", "--json", "--registry", registry.address()},
                          job_environment({{"SLUICE_SECRET", kSecret}}));
  const ProcessResult r = info->wait(Clock::now() + std::chrono::seconds(60));
  { std::ofstream touch(hold); }
  for (auto& rank : ranks) EXPECT_EQ(rank->wait(Clock::now() + kJobLimit).exit_code, 0);
  std::remove(hold.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.rfind("\n{") + 1));
  const nlohmann::json& members = j.at("registry").at("members");
  ASSERT_EQ(members.size(), static_cast<size_t>(kHosts)) << j.dump();
  for (int m = 0; m < kHosts; ++m) {
    EXPECT_EQ(members[m].at("rank"), m);
    EXPECT_EQ(members[m].at("state"), "alive");
    const std::string path = members[m].at("path");
    if (m == 1) {
      EXPECT_EQ(path, "shm (same host identity)") << j.dump();
    } else {
      EXPECT_EQ(path.rfind("ofi (", 0), 0u) << j.dump();
    }
  }
}

TEST(TcpCloseTest, ASourceNeverResetsItsConnectionsToASlowTarget) {
  SKIP_WITHOUT_NAMESPACES();
  for (const char* rma : {"0", "1"}) {
    TestHosts hosts(1);
    ProcessResult r = hosts.run(
        0,
        {"env", "SLUICE_TRANSPORT=ofi", std::string("SLUICE_OFI_RMA=") + rma,
         "SLUICE_TEST_OFI_CLOSE_DELAY_MS=100", bin("sluice"), "run", "-n", "2", "--timeout", "60",
         "--", bin("sluice-fault-worker"), "--scenario", "slow-target", "--n", "200000"},
        std::chrono::seconds(90));
    EXPECT_EQ(r.exit_code, 0) << "SLUICE_OFI_RMA=" << rma << ":\n" << r.output;
    EXPECT_EQ(testing::count_lines_with(r.output, "VERIFIED 200000 records"), 1) << r.output;
    ProcessResult counts =
        hosts.run(0, {"nstat", "-az", "TcpExtTCPAbortOnClose", "TcpExtTCPAbortOnData"},
                  std::chrono::seconds(10));
    std::smatch m;
    std::string text = counts.output;
    uint64_t resets = 0;
    const std::regex line("TcpExtTCPAbortOn(Close|Data) +([0-9]+)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line);
         it != std::sregex_iterator(); ++it) {
      resets += std::stoull((*it)[2]);
    }
    EXPECT_NE(counts.output.find("TcpExtTCPAbortOnClose"), std::string::npos) << counts.output;
    EXPECT_EQ(resets, 0u) << "SLUICE_OFI_RMA=" << rma << ": connections reset:\n" << counts.output;
  }
}

// The harness itself: what it creates goes away again.

// The command lines of every process, from /proc/<pid>/cmdline (NULs as spaces).
std::vector<std::string> command_lines() {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    // A process may exit between the listing and the read: libstdc++'s
    // filebuf then throws from underflow (ESRCH) whatever the stream's
    // exception mask, which ended the whole test binary once (terminate in
    // this watcher thread). Such a process is skipped.
    std::string line;
    try {
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      line.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::exception&) {
      continue;
    }
    std::replace(line.begin(), line.end(), '\0', ' ');
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// `sluice perf --netns` starts a registry and ranks by hand in two hosts (run
// here as sluice-perf-smoke, the build of sluice-perf make test has). The
// job secret must reach them through the environment: a command line is
// readable by every user of the machine (/proc/<pid>/cmdline).
TEST(MultihostPerfTest, PerfAcrossNamespacesKeepsTheSecretOffCommandLines) {
  SKIP_WITHOUT_NAMESPACES();
  TestHosts hosts(2);
  const std::string netns =
      hosts.name(0) + "=" + hosts.ip(0) + "," + hosts.name(1) + "=" + hosts.ip(1);
  std::atomic<bool> done{false};
  std::vector<std::string> leaks;
  int registries_seen = 0;
  std::thread watcher([&] {
    while (!done.load()) {
      for (const std::string& line : command_lines()) {
        if (line.find(" registry ") == std::string::npos ||
            line.find("sluice") == std::string::npos)
          continue;
        ++registries_seen;
        if (line.find("--secret") != std::string::npos && leaks.empty()) leaks.push_back(line);
      }
      // Sampling the process table, not waiting for an event.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  ProcessResult r = testing::run_process(
      {bin("sluice-perf-smoke"), "--transport", "ofi", "--netns", netns, "--modes", "latency",
       "--sizes", "64", "--shapes", "1x1", "--repeats", "1", "--round-trips", "2000"},
      {}, std::chrono::seconds(240));
  done = true;
  watcher.join();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(registries_seen, 0) << "never saw the registry running; the test proves nothing";
  EXPECT_TRUE(leaks.empty()) << "a command line carries the secret: "
                             << (leaks.empty() ? "" : leaks[0]);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(MultihostHarnessTest, NamespacesAndLinksAreRemovedWhenTheHostsGoAway) {
  SKIP_WITHOUT_NAMESPACES();
  for (Topology topology : {Topology::kBridge, Topology::kMesh}) {
    SCOPED_TRACE(testing::to_string(topology));
    std::vector<std::string> names, links;
    {
      TestHosts hosts(kHosts, topology);  // checks that every host reaches every other
      for (int i = 0; i < hosts.size(); ++i) names.push_back(hosts.name(i));
      links = hosts.root_links();
      EXPECT_EQ(topology == Topology::kBridge, !links.empty());
      const auto netns = testing::list_netns();
      for (const auto& n : names) EXPECT_TRUE(contains(netns, n)) << n;
      const auto root = testing::list_root_links();
      for (const auto& l : links) EXPECT_TRUE(contains(root, l)) << l;
      // Each host has its own address, and only that one.
      for (int i = 0; i < hosts.size(); ++i) {
        ProcessResult r = hosts.run(i, {testing::ip_program(), "-4", "-o", "addr", "show"});
        EXPECT_EQ(testing::count_lines_with(r.output, hosts.ip(i) + "/"), 1) << r.output;
        EXPECT_EQ(testing::count_lines_with(r.output, "198.18."), 1) << r.output;
      }
    }
    const auto netns = testing::list_netns();
    for (const auto& n : names) EXPECT_FALSE(contains(netns, n)) << n << " left behind";
    const auto root = testing::list_root_links();
    for (const auto& l : links) EXPECT_FALSE(contains(root, l)) << l << " left behind";
  }
}

TEST(MultihostHarnessTest, LeftoversOfAKilledRunAreRemovedByTheNextRun) {
  SKIP_WITHOUT_NAMESPACES();
  // A child process builds hosts, reports their names and dies by SIGKILL,
  // as a test binary killed by its CTest timeout would: no destructor runs.
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    std::string report;
    try {
      auto* hosts = new TestHosts(2, Topology::kBridge);  // leaked on purpose
      for (int i = 0; i < hosts->size(); ++i) report += hosts->name(i) + "\n";
      for (const auto& l : hosts->root_links()) report += l + "\n";
    } catch (const std::exception& e) {
      report = std::string("ERROR ") + e.what() + "\n";
    }
    (void)!::write(p[1], report.data(), report.size());
    ::raise(SIGKILL);
  }
  ::close(p[1]);
  std::string report;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pf{p[0], POLLIN, 0};
    if (left <= 0 || ::poll(&pf, 1, static_cast<int>(left)) <= 0) break;
    char buf[4096];
    ssize_t n = ::read(p[0], buf, sizeof(buf));
    if (n <= 0) break;
    report.append(buf, static_cast<size_t>(n));
  }
  ::close(p[0]);
  ::kill(pid, SIGKILL);  // in case the deadline passed; a no-op otherwise
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << report;
  ASSERT_EQ(report.find("ERROR"), std::string::npos) << report;
  std::vector<std::string> leftovers;
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) leftovers.push_back(line);
  ASSERT_EQ(leftovers.size(), 5u) << report;  // two namespaces, the bridge and two veths

  auto present = [&] {
    const auto netns = testing::list_netns();
    const auto links = testing::list_root_links();
    std::vector<std::string> out;
    for (const auto& l : leftovers) {
      if (contains(netns, l) || contains(links, l)) out.push_back(l);
    }
    return out;
  };
  ASSERT_EQ(present().size(), leftovers.size()) << "the dead run's hosts should still be there";
  {
    TestHosts next(1);  // removes what dead runs left before building its own
    EXPECT_TRUE(present().empty()) << "left behind: " << ::testing::PrintToString(present());
  }
}

// ------------------------------------------------------------ partitions
//
// A partition never yields two views that both go on: the side that holds
// the registry goes on in the next view, the other stops with a clear error
// (it lost the registry, so it cannot know who is alive). Each host runs one
// rank of the membership program (tests/membership: rounds of a view-scoped
// allgather, an agreement at every new view); the registry is in host 0.
// The test cuts a host off after the ranks started, from outside: no rank
// is told. The peer timeout is 1 s, so each side learns within seconds.

struct PartitionRun {
  Job job;
  double cut_to_end_s[kHosts] = {0, 0, 0};  // from the cut to each rank's end
  int64_t cut_us = 0;                       // the cut, CLOCK_REALTIME (as --watch prints)
};

// Prints, for the closing note's measure, how long after the cut rank `r`
// (on the registry's side) got each view it reports (--watch's EPOCH lines).
void print_view_times(const PartitionRun& run, int r) {
  const std::string& out = run.job.ranks[r].output;
  const std::regex epoch_line("EPOCH rank [0-9]+ epoch ([0-9]+) at_us ([0-9]+)");
  for (std::sregex_iterator it(out.begin(), out.end(), epoch_line), end; it != end; ++it) {
    std::printf("multihost: rank %d got view %s %.3f s after the cut\n", r, (*it)[1].str().c_str(),
                static_cast<double>(std::stoll((*it)[2]) - run.cut_us) / 1e6);
  }
}

PartitionRun run_partitioned(const TestHosts& hosts, int cut_host) {
  PartitionRun run;
  const auto start = Clock::now();
  // The registry and the ranks share the peer timeout, as `sluice run`'s do.
  Registry registry(hosts, 0, hosts.size(), {{"SLUICE_PEER_TIMEOUT_MS", "1000"}});
  if (registry.address().empty()) {
    ADD_FAILURE() << "sluice registry printed no address:\n" << registry.output();
    return run;
  }
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  std::vector<Clock::time_point> spawned;
  for (int r = 0; r < hosts.size(); ++r) {
    spawned.push_back(Clock::now());
    std::map<std::string, std::string> env = transport_env(/*rma=*/true);
    env["SLUICE_RANK"] = std::to_string(r);
    env["SLUICE_WORLD_SIZE"] = std::to_string(hosts.size());
    env["SLUICE_REGISTRY"] = registry.address();
    env["SLUICE_SECRET"] = kSecret;
    env["SLUICE_PEER_TIMEOUT_MS"] = "1000";
    ranks.push_back(hosts.spawn(r,
                                {bin("sluice-test-membership-program"), "--rounds", "300",
                                 "--interval-ms", "50", "--watch"},
                                job_environment(env)));
  }
  // Every rank is running its rounds once each printed its pid and the
  // rounds had a second to go.
  for (int r = 0; r < hosts.size(); ++r) {
    if (!ranks[r]->wait_for_output(std::regex("PID rank [0-9]+ pid ([0-9]+)"),
                                   Clock::now() + kRegistryStartLimit)) {
      ADD_FAILURE() << "rank " << r << " did not start";
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  hosts.isolate(cut_host);
  const auto cut = Clock::now();
  run.cut_us = std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  std::printf("multihost: cut host %d off\n", cut_host);
  const auto deadline = start + kJobLimit;
  for (int r = 0; r < hosts.size(); ++r) {
    run.job.ranks.push_back(ranks[r]->wait(deadline));
    // The process's own run time: when it ended, whichever was waited for first.
    run.cut_to_end_s[r] =
        std::chrono::duration<double>(spawned[r] - cut).count() + run.job.ranks[r].seconds;
  }
  run.job.registry_output = registry.output();
  run.job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

// A rank on the side without the registry: it stops, saying it lost the
// registry, and finishes no round after the cut as if nothing happened.
void expect_stopped_without_the_registry(const PartitionRun& run, int r) {
  const ProcessResult& p = run.job.ranks[r];
  EXPECT_FALSE(p.timed_out) << "rank " << r;
  EXPECT_NE(p.exit_code, 0) << "rank " << r;
  EXPECT_EQ(testing::count_lines_with(p.output, "FAILED"), 1) << "rank " << r;
  EXPECT_NE(p.output.find("lost the registry"), std::string::npos) << "rank " << r;
  EXPECT_EQ(testing::count_lines_with(p.output, "DONE"), 0) << "rank " << r;
  std::printf("multihost: rank %d (cut off) stopped %.2f s after the cut\n", r,
              run.cut_to_end_s[r]);
}

class MultihostPartitionTest : public MultihostShuffleTest {};

// Host 2 is cut off: ranks 0 and 1 (with the registry) go on in view 1 and
// finish every round; rank 2 stops.
TEST_F(MultihostPartitionTest, TheSideWithTheRegistryGoesOnAndTheOtherStops) {
  const PartitionRun run = run_partitioned(*hosts_, 2);
  ASSERT_EQ(run.job.ranks.size(), static_cast<size_t>(kHosts));
  for (int r : {0, 1}) {
    const ProcessResult& p = run.job.ranks[r];
    EXPECT_FALSE(p.timed_out) << "rank " << r;
    EXPECT_EQ(p.exit_code, 0) << "rank " << r;
    EXPECT_EQ(testing::count_lines_with(p.output, "FAILED"), 0) << "rank " << r;
    EXPECT_EQ(testing::count_lines_with(p.output, "MISMATCH"), 0) << "rank " << r;
    EXPECT_EQ(testing::count_lines_with(p.output, "EPOCH rank " + std::to_string(r) + " epoch 1 "),
              1)
        << "rank " << r;
    EXPECT_EQ(testing::count_lines_with_all(p.output,
                                            {"DONE rank " + std::to_string(r), "last 299 epoch 1"}),
              1)
        << "rank " << r;
    EXPECT_EQ(testing::count_lines_with(p.output, "AGREED epoch 1 ranks 0,1 values 300,300"), 1)
        << "rank " << r;
  }
  expect_stopped_without_the_registry(run, 2);
  EXPECT_NE(run.job.registry_output.find("view 1: rank 2 died"), std::string::npos);
  for (int r : {0, 1}) print_view_times(run, r);
  if (HasFailure()) ADD_FAILURE() << "the job's output:\n" << run.job.describe();
}

// Host 0, with the registry and rank 0, is cut off from hosts 1 and 2: the
// registry's side is rank 0 alone, which goes on (views 1 and 2: both
// others lost) and finishes; ranks 1 and 2 both stop, although they still
// reach each other.
TEST_F(MultihostPartitionTest, TheRegistrysSideGoesOnEvenWhenItIsTheSmallerOne) {
  const PartitionRun run = run_partitioned(*hosts_, 0);
  ASSERT_EQ(run.job.ranks.size(), static_cast<size_t>(kHosts));
  const ProcessResult& p = run.job.ranks[0];
  EXPECT_FALSE(p.timed_out);
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_EQ(testing::count_lines_with(p.output, "FAILED"), 0);
  EXPECT_EQ(testing::count_lines_with_all(p.output, {"DONE rank 0", "last 299 epoch 2"}), 1);
  EXPECT_EQ(testing::count_lines_with(p.output, "AGREED epoch 2 ranks 0 values 300"), 1);
  for (int r : {1, 2}) expect_stopped_without_the_registry(run, r);
  print_view_times(run, 0);
  if (HasFailure()) ADD_FAILURE() << "the job's output:\n" << run.job.describe();
}

// ------------------------------------------------------------ spares
//
// A spare in another host takes the place of a killed host's rank: the
// keyed sum of tests/membership (one shuffle per round, declared in the
// current view; key groups over the members) runs one rank in each host
// under the standalone registry, and a spare (SLUICE_SPARE=1, no rank) waits
// in host 1, started as a cluster manager would start it. Once rank 0
// starts round 10, the test kills host 2's processes from outside; no rank
// is told. The registry gives rank 2's place to the spare, which joins as
// its incarnation 1 across the namespaces, and every rank commits every
// round once with its input's sums.

// "DONE rank R incarnation I committed C rounds N checksum X expect X" in
// `out`, once, with equal sums; returns C (-1 if missing).
int committed_rounds(const std::string& out, int rank, int incarnation, int rounds) {
  const std::regex re("DONE rank " + std::to_string(rank) + " incarnation " +
                      std::to_string(incarnation) + " committed ([0-9]+) rounds " +
                      std::to_string(rounds) + " checksum ([0-9]+) expect ([0-9]+)");
  int found = 0;
  int committed = -1;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    ++found;
    committed = std::stoi((*it)[1]);
    EXPECT_EQ((*it)[2].str(), (*it)[3].str()) << it->str();
  }
  EXPECT_EQ(found, 1) << "rank " << rank << " incarnation " << incarnation;
  return committed;
}

class MultihostSpareTest : public MultihostShuffleTest {};

TEST_F(MultihostSpareTest, ASpareInAnotherHostTakesTheRankOfAKilledHost) {
  const auto start = Clock::now();
  Registry registry(*hosts_, 0, kHosts);
  ASSERT_FALSE(registry.address().empty()) << registry.output();
  const auto env_of = [&](int rank) {
    std::map<std::string, std::string> env = transport_env(/*rma=*/true);
    if (rank >= 0) {
      env["SLUICE_RANK"] = std::to_string(rank);
    } else {
      env["SLUICE_SPARE"] = "1";
    }
    env["SLUICE_WORLD_SIZE"] = std::to_string(kHosts);
    env["SLUICE_REGISTRY"] = registry.address();
    env["SLUICE_SECRET"] = kSecret;
    return job_environment(env);
  };
  constexpr int kRounds = 30;
  const std::vector<std::string> program = {bin("sluice-test-reform-program"),
                                            "--rounds",
                                            std::to_string(kRounds),
                                            "--records",
                                            "20000",
                                            "--interval-ms",
                                            "10",
                                            "--mark-round",
                                            "10"};
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < kHosts; ++r) ranks.push_back(hosts_->spawn(r, program, env_of(r)));
  std::unique_ptr<ChildProcess> spare = hosts_->spawn(1, program, env_of(-1));
  const bool marked =
      ranks[0]
          ->wait_for_output(std::regex("MARK round 10 begins"), Clock::now() + kJobLimit)
          .has_value();
  EXPECT_TRUE(marked) << "rank 0 never began round 10";
  if (marked) ::kill(-ranks[2]->pid(), SIGKILL);
  Job job;
  const auto deadline = start + kJobLimit;
  for (auto& rank : ranks) job.ranks.push_back(rank->wait(deadline));
  const ProcessResult taken = spare->wait(deadline);
  job.registry_output = registry.output();
  job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(job.ranks[2].term_signal, SIGKILL) << "rank 2 should have died by the test's SIGKILL";
  for (int r : {0, 1}) {
    EXPECT_FALSE(job.ranks[r].timed_out) << "rank " << r;
    EXPECT_EQ(job.ranks[r].exit_code, 0) << "rank " << r;
    EXPECT_EQ(committed_rounds(job.ranks[r].output, r, 0, kRounds), kRounds) << "rank " << r;
  }
  // The spare, now rank 2: it committed the rounds from where the others
  // were when it joined, the last one included, with the same sums.
  EXPECT_FALSE(taken.timed_out);
  EXPECT_EQ(taken.exit_code, 0);
  EXPECT_GE(committed_rounds(taken.output, 2, 1, kRounds), 1);
  EXPECT_EQ(testing::count_lines_with(taken.output, "FAILED"), 0);
  EXPECT_EQ(testing::count_lines_with_all(job.registry_output,
                                          {"registry: view 2: rank 2 rejoined (incarnation 1, "
                                           "a spare, ",
                                           "members 0,1,2"}),
            1);
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
  if (HasFailure()) {
    ADD_FAILURE() << "the job's output:\n"
                  << job.describe() << "--- the spare (exit " << taken.exit_code << ")\n"
                  << taken.output;
  }
  std::printf("multihost: job with a spare took %.2f s\n", job.seconds);
}

}  // namespace
}  // namespace sluice
