// `sluice info` and `sluice doctor` as a user runs them: the report parses
// and describes this host, every check passes where the rest of the suite
// runs, and each limit that breaks jobs is caught and answered with its fix
// when it is really imposed (a shell's ulimit, a memory cgroup, a loopback
// registry for a job across hosts).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace sluice {
namespace {

using testing::bin;
using testing::run_process;

// The JSON object a command printed (the last line that starts with '{').
nlohmann::json last_json(const std::string& output) {
  size_t at = output.rfind("\n{");
  const size_t start =
      at == std::string::npos ? (output.rfind('{', 0) == 0 ? 0 : std::string::npos) : at + 1;
  if (start == std::string::npos) return nullptr;
  const size_t end = output.find('\n', start);
  return nlohmann::json::parse(
      output.substr(start, end == std::string::npos ? std::string::npos : end - start));
}

// Runs `sluice doctor --json args...` through `sh -c PREFIX; exec ...` so
// that a limit set by PREFIX (ulimit, joining a cgroup) holds for it.
testing::ProcessResult doctor(const std::string& prefix, const std::vector<std::string>& args) {
  std::string command = prefix + (prefix.empty() ? "" : " && ") + "exec \"$0\" doctor --json";
  for (size_t i = 0; i < args.size(); ++i) command += " \"$" + std::to_string(i + 1) + "\"";
  std::vector<std::string> argv = {"/bin/sh", "-c", command, bin("sluice")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, std::chrono::seconds(60));
}

// The check named `name` in a doctor report.
nlohmann::json check_named(const nlohmann::json& report, const std::string& name) {
  for (const nlohmann::json& c : report.at("checks")) {
    if (c.at("check") == name) return c;
  }
  ADD_FAILURE() << "no check named '" << name << "' in " << report.dump();
  return nlohmann::json::object({{"verdict", "?"}, {"finding", ""}, {"fix", ""}});
}

TEST(SluiceInfoTest, JsonDescribesThisHostAndTheProviderTheOfiTestsUse) {
  const auto r = run_process({bin("sluice"), "info", "--json", "--registry", "127.0.0.1:29600"}, {},
                             std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = last_json(r.output);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(j.at("host").at("name"), host);
  // The identity peers compare to choose shm: hostname, boot id, net namespace.
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  const std::string identity = j.at("host").at("identity");
  EXPECT_NE(identity.find(boot_id), std::string::npos) << identity;
  EXPECT_EQ(j.at("registry").at("local_address"), "127.0.0.1");
  bool has_lo = false;
  for (const auto& i : j.at("interfaces"))
    has_lo = has_lo || (i.at("loopback") == true && i.at("up") == true);
  EXPECT_TRUE(has_lo) << j.at("interfaces").dump();
  // The ofi tests of this suite run on tcp;ofi_rxm: info must find it usable,
  // with the capabilities those tests exercise, and auto must pick a provider.
  bool tcp = false;
  for (const auto& p : j.at("libfabric").at("providers")) {
    if (p.at("choice") != "tcp") continue;
    tcp = true;
    ASSERT_TRUE(p.at("usable").get<bool>()) << p.dump();
    EXPECT_EQ(p.at("libfabric_name"), "tcp;ofi_rxm");
    EXPECT_TRUE(p.at("rma").get<bool>()) << p.dump();
    EXPECT_FALSE(p.at("pins_memory").get<bool>());
  }
  EXPECT_TRUE(tcp);
  EXPECT_NE(j.at("libfabric").at("auto"), "");
}

TEST(SluiceDoctorTest, PassesWhereTheSuiteRuns) {
  const auto r = doctor("", {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = last_json(r.output);
  EXPECT_EQ(j.at("failed"), 0) << r.output;
  for (const char* name :
       {"shared memory", "shared memory between processes", "open files", "libfabric provider"}) {
    EXPECT_EQ(check_named(j, name).at("verdict"), "PASS") << name << ": " << r.output;
  }
}

TEST(SluiceDoctorTest, TooLittleLockedMemoryFailsForAProviderThatPinsAndNamesTheFix) {
  // verbs locks what it registers: 64 KiB of memlock cannot hold 256 MiB.
  const auto low = doctor("ulimit -l 64", {"--ofi-provider", "verbs"});
  EXPECT_EQ(low.exit_code, 1) << low.output;
  const nlohmann::json c = check_named(last_json(low.output), "locked memory");
  EXPECT_EQ(c.at("verdict"), "FAIL") << low.output;
  EXPECT_NE(c.at("fix").get<std::string>().find("ulimit -l unlimited"), std::string::npos)
      << c.dump();
  EXPECT_NE(c.at("fix").get<std::string>().find("--ulimit memlock=-1:-1"), std::string::npos)
      << c.dump();
  // tcp locks nothing: the same limit is only a warning.
  const auto tcp = doctor("ulimit -l 64", {"--ofi-provider", "tcp"});
  EXPECT_EQ(tcp.exit_code, 0) << tcp.output;
  EXPECT_EQ(check_named(last_json(tcp.output), "locked memory").at("verdict"), "WARN")
      << tcp.output;
  // Within the limit this process has, the same provider passes.
  rlimit mine{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &mine), 0);
  const uint64_t mib = mine.rlim_cur == RLIM_INFINITY ? 256 : mine.rlim_cur >> 20;
  if (mib >= 1) {
    const auto within = doctor("", {"--ofi-provider", "verbs", "--shm-mib", std::to_string(mib)});
    EXPECT_EQ(check_named(last_json(within.output), "locked memory").at("verdict"), "PASS")
        << within.output;
  }
}

// libfabric's shm provider keeps its queues in /dev/shm: with a 1 MiB one
// it does not open, and doctor names /dev/shm and its room (it used to say
// the provider was "not present ... install libfabric"). Needs a mount
// namespace (root and unshare); skipped with the reason otherwise.
TEST(SluiceDoctorTest, ASmallDevShmIsNamedWhenTheShmProviderCannotOpen) {
  if (::geteuid() != 0 || ::access("/usr/bin/unshare", X_OK) != 0)
    GTEST_SKIP() << "needs root and unshare(1) to mount a small /dev/shm in a namespace of its own";
  const auto small = doctor(
      "exec unshare -m /bin/sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm "
      "&& exec \"$0\" \"$@\"' \"$0\" doctor --json \"$@\"; : ",
      {"--ofi-provider", "shm"});
  const nlohmann::json report = last_json(small.output);
  ASSERT_FALSE(report.is_null()) << small.output;
  const nlohmann::json c = check_named(report, "libfabric provider");
  const std::string finding = c.at("finding").get<std::string>();
  EXPECT_NE(finding.find("/dev/shm has 1 MiB free of 1 MiB"), std::string::npos) << c.dump();
  EXPECT_EQ(finding.find("install libfabric"), std::string::npos) << c.dump();
  EXPECT_NE(c.at("fix").get<std::string>().find("--shm-size"), std::string::npos) << c.dump();
}

TEST(SluiceDoctorTest, TooFewOpenFilesFailsAndNamesTheFix) {
  const auto r = doctor("ulimit -n 200", {"--ranks-per-host", "8"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const nlohmann::json c = check_named(last_json(r.output), "open files");
  EXPECT_EQ(c.at("verdict"), "FAIL") << r.output;
  EXPECT_NE(c.at("fix").get<std::string>().find("ulimit -n"), std::string::npos) << c.dump();
}

TEST(SluiceDoctorTest, ALoopbackRegistryFailsForAJobAcrossHosts) {
  const auto many = doctor("", {"--registry", "127.0.0.1:1", "--hosts", "2"});
  EXPECT_EQ(many.exit_code, 1) << many.output;
  const nlohmann::json c = check_named(last_json(many.output), "registry address");
  EXPECT_EQ(c.at("verdict"), "FAIL") << many.output;
  EXPECT_NE(c.at("finding").get<std::string>().find("loopback"), std::string::npos) << c.dump();
  EXPECT_NE(c.at("fix").get<std::string>().find("--bind"), std::string::npos) << c.dump();
  // On one host a loopback registry is right; nothing listening is a warning.
  const auto one = doctor("", {"--registry", "127.0.0.1:1", "--hosts", "1"});
  EXPECT_EQ(check_named(last_json(one.output), "registry address").at("verdict"), "WARN")
      << one.output;
}

// A container's memory limit is what bounds sluice's shared memory (memfd),
// so it is imposed for real: a memory cgroup of 256 MiB, flows of 512 MiB.
TEST(SluiceDoctorTest, SharedMemoryBeyondTheCgroupLimitFailsAndNamesTheFix) {
  const std::string dir = "/sys/fs/cgroup/memory/sluice-doctor-test-" + std::to_string(::getpid());
  if (::geteuid() != 0 || ::mkdir(dir.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot make a memory cgroup (needs root and cgroup v1's memory controller at "
                    "/sys/fs/cgroup/memory): "
                 << dir;
  }
  {
    std::ofstream limit(dir + "/memory.limit_in_bytes");
    limit << (256u << 20);
  }
  const std::string join = "echo $$ > " + dir + "/cgroup.procs";
  const auto big = doctor(join, {"--shm-mib", "512"});
  const auto fits = doctor(join, {"--shm-mib", "32"});
  // Its processes have ended: the cgroup can go.
  for (int i = 0; i < 50 && ::rmdir(dir.c_str()) != 0; ++i) ::usleep(20000);
  EXPECT_EQ(big.exit_code, 1) << big.output;
  const nlohmann::json c = check_named(last_json(big.output), "shared memory");
  EXPECT_EQ(c.at("verdict"), "FAIL") << big.output;
  EXPECT_NE(c.at("finding").get<std::string>().find("256.0 MiB"), std::string::npos) << c.dump();
  EXPECT_NE(c.at("fix").get<std::string>().find("--memory"), std::string::npos) << c.dump();
  EXPECT_EQ(check_named(last_json(fits.output), "shared memory").at("verdict"), "PASS")
      << fits.output;
  EXPECT_TRUE(testing::sluice_shm_entries().empty());
}

}  // namespace
}  // namespace sluice
