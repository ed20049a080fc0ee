// `sluice doctor`: a preflight for the things that stop jobs in containers
// and clusters before the first record moves. Each check probes what a rank
// does (allocates the shared memory its flows map, opens a peer's memfd,
// opens an ofi endpoint, reaches the registry) and, when it fails, prints the
// exact fix: the docker/podman flag, the ulimit, the Kubernetes setting.
// Exit status 1 when any check fails; warnings do not fail.
#include <sys/resource.h>
#include <sys/timex.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host_commands.h"
#include "host_facts.h"
#include "tool_util.h"

namespace sluice::tool {
namespace {

struct DoctorArgs {
  std::string registry;
  int hosts = 0;  // 0: unknown
  int ranks_per_host = 0;
  uint64_t shm_mib = 256;
  std::string provider = "auto";
  bool json = false;
};

enum class Verdict { kPass, kWarn, kFail };

struct Check {
  std::string name;
  Verdict verdict = Verdict::kPass;
  std::string finding;
  std::string fix;  // empty when passed
};

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kWarn:
      return "WARN";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

// Open files one rank needs: its own handful, and per peer a socket to the
// registry's liveness, its ofi endpoint, the memfds of the peers' rings it
// maps. A generous estimate: cheap to raise, costly to hit mid-job.
uint64_t files_needed(int ranks) { return 256 + 16 * static_cast<uint64_t>(ranks); }

Check check_shared_memory(const DoctorArgs& a) {
  Check c{"shared memory"};
  const uint64_t bytes = a.shm_mib << 20;
  const std::optional<uint64_t> limit = cgroup_memory_limit();
  const std::string fix =
      "flows map their rings from memfd, which counts against the container's memory limit (not "
      "/dev/shm, so "
      "--shm-size does not matter): raise the limit (`docker run --memory 8g`, Kubernetes "
      "resources.limits.memory) or make flows smaller (fewer segments, smaller segment_bytes)";
  // Judged from the numbers first: allocating past a cgroup's limit summons
  // its OOM killer.
  if (limit) {
    const uint64_t used = cgroup_memory_usage().value_or(0);
    const uint64_t room = used < *limit ? *limit - used : 0;
    if (bytes > room) {
      c.verdict = Verdict::kFail;
      c.finding = "flows need " + human_bytes(bytes) +
                  " (--shm-mib) but this cgroup's memory limit of " + human_bytes(*limit) +
                  " leaves " + human_bytes(room);
      c.fix = fix;
      return c;
    }
  }
  std::string error;
  if (memfd_holds(bytes, &error)) {
    c.finding =
        "allocated " + human_bytes(bytes) + " of memfd, what one rank's flows map (--shm-mib)";
    return c;
  }
  c.verdict = Verdict::kFail;
  c.finding = error;
  c.fix = fix;
  return c;
}

Check check_peer_memory() {
  Check c{"shared memory between processes"};
  std::string error;
  if (peer_memfd_opens(&error)) {
    c.finding = "a process opened another's memfd through /proc/<pid>/fd, as ranks on one host do";
    return c;
  }
  c.verdict = Verdict::kFail;
  c.finding = error;
  c.fix =
      "ranks on one host map each other's rings through /proc/<pid>/fd: run them as the same user "
      "in one PID "
      "namespace with /proc mounted without hidepid and ptrace read access allowed (docker: run "
      "all ranks of a "
      "host in one container, or --pid=container:<first> / --pid=host, and --security-opt "
      "apparmor=unconfined "
      "if AppArmor denies ptrace; Kubernetes: one pod with shareProcessNamespace: true), or use "
      "SLUICE_TRANSPORT=ofi";
  return c;
}

Check check_memlock(const DoctorArgs& a, const std::vector<ProviderProbe>& probes) {
  Check c{"locked memory"};
  const std::optional<uint64_t> limit = soft_limit(RLIMIT_MEMLOCK);
  const uint64_t need = a.shm_mib << 20;
  // Which provider a rank would use, and whether it locks what it registers.
  std::string provider = a.provider == "auto" ? auto_provider(probes) : a.provider;
  const bool pins = provider == "verbs" || provider == "efa";
  if (!limit || *limit >= need) {
    c.finding = "memlock " + (limit ? human_bytes(*limit) : std::string("unlimited")) +
                ", enough for " + human_bytes(need) + " of registered memory";
    return c;
  }
  c.finding =
      "memlock is " + human_bytes(*limit) + ", below the " + human_bytes(need) + " flows register";
  c.fix =
      "`ulimit -l unlimited` (docker: --ulimit memlock=-1:-1; systemd: LimitMEMLOCK=infinity; "
      "/etc/security/limits.conf: '* - memlock unlimited')";
  if (pins) {
    c.verdict = Verdict::kFail;
    c.finding += "; provider " + provider +
                 " locks the memory it registers, so endpoints will fail to register";
  } else {
    c.verdict = Verdict::kWarn;
    c.finding += "; fine for " + (provider.empty() ? std::string("shm") : provider) +
                 ", which does not lock memory, but verbs and efa hosts will fail";
  }
  return c;
}

Check check_open_files(const DoctorArgs& a) {
  Check c{"open files"};
  // Every rank may hold a connection and mappings for every other rank.
  const int per_host =
      a.ranks_per_host > 0 ? a.ranks_per_host : static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  const int ranks = per_host * std::max(a.hosts, 1);
  const std::optional<uint64_t> limit = soft_limit(RLIMIT_NOFILE);
  const uint64_t need = files_needed(ranks);
  if (!limit || *limit >= need) {
    c.finding = "limit " + (limit ? std::to_string(*limit) : std::string("unlimited")) +
                ", enough for a job of " + std::to_string(ranks) + " ranks (" +
                std::to_string(need) + ")";
    return c;
  }
  c.verdict = Verdict::kFail;
  c.finding = "limit " + std::to_string(*limit) + ", below the " + std::to_string(need) +
              " a rank of a " + std::to_string(ranks) + "-rank job may hold";
  c.fix = "`ulimit -n 65536` (docker: --ulimit nofile=65536:65536; systemd: LimitNOFILE=65536)";
  return c;
}

Check check_providers(const DoctorArgs& a, const std::vector<ProviderProbe>& probes) {
  Check c{"libfabric provider"};
  if (a.provider == "auto") {
    const std::string chosen = auto_provider(probes);
    if (!chosen.empty()) {
      c.finding = "auto picks " + chosen;
      return c;
    }
  } else {
    for (const ProviderProbe& p : probes) {
      if (p.choice != a.provider) continue;
      if (p.usable) {
        c.finding = p.choice + " opens (" + p.libfabric_name +
                    (p.rma ? ", RMA" : ", messages only") + (p.atomics ? ", atomics)" : ")");
        return c;
      }
      c.finding = p.error;
      c.fix = p.fix;
    }
  }
  c.verdict = a.hosts > 1 ? Verdict::kFail : Verdict::kWarn;
  if (c.finding.empty()) c.finding = "no provider among verbs, efa and tcp opens an endpoint";
  if (!c.fix.empty()) return c;
  c.fix =
      "install libfabric with the provider (Debian: apt-get install libfabric1; `fi_info -t "
      "FI_EP_RDM` "
      "lists what is present); verbs needs /dev/infiniband (docker: --device /dev/infiniband "
      "--cap-add IPC_LOCK), efa the EFA device plugin; ranks on one host need none of this (shm)";
  return c;
}

Check check_registry(const DoctorArgs& a) {
  Check c{"registry address"};
  if (a.registry.empty()) {
    c.finding =
        "none given (--registry HOST:PORT or SLUICE_REGISTRY): `sluice run` starts one on this "
        "host";
    if (a.hosts > 1) {
      c.verdict = Verdict::kWarn;
      c.fix =
          "for a job across hosts, start `sluice registry --bind <address the other hosts reach>` "
          "and pass "
          "that HOST:PORT as --registry";
    }
    return c;
  }
  std::string host;
  uint16_t port = 0;
  split_host_port(a.registry, "--registry", 0, &host, &port);
  if (port == 0) {
    c.verdict = Verdict::kFail;
    c.finding = a.registry + " has no port";
    c.fix = "give HOST:PORT";
    return c;
  }
  if (is_loopback_host(host)) {
    c.finding = host + " is a loopback address";
    if (a.hosts != 1) {
      c.verdict = a.hosts > 1 ? Verdict::kFail : Verdict::kWarn;
      c.fix =
          "ranks on other hosts cannot reach a loopback registry: bind it to an address they reach "
          "(`sluice registry --bind <ip>`, `sluice run --bind <ip>`) and give that address";
    }
  }
  std::string error;
  if (tcp_connects(host, port, 2000, &error)) {
    c.finding += std::string(c.finding.empty() ? "" : "; ") + "a registry answers at " + a.registry;
  } else {
    if (c.verdict == Verdict::kPass) c.verdict = Verdict::kWarn;
    c.finding += std::string(c.finding.empty() ? "" : "; ") + error;
    if (c.fix.empty())
      c.fix =
          "start the registry first (`sluice registry --bind HOST:PORT --world N`), or check "
          "the firewall between this host and it";
  }
  return c;
}

Check check_clock() {
  Check c{"clock"};
  timespec a{}, b{};
  ::clock_gettime(CLOCK_MONOTONIC, &a);
  ::usleep(10000);
  ::clock_gettime(CLOCK_MONOTONIC, &b);
  const double ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  if (ms < 9 || ms > 5000) {
    c.verdict = Verdict::kFail;
    c.finding = "the monotonic clock moved " + std::to_string(ms) + " ms in a 10 ms sleep";
    c.fix =
        "peer timeouts and deadlines use CLOCK_MONOTONIC: check the kernel clocksource "
        "(/sys/devices/system/clocksource/clocksource0/current_clocksource)";
    return c;
  }
  if (now.tv_sec < 1577836800) {  // 2020-01-01
    c.verdict = Verdict::kWarn;
    c.finding = "the wall clock says before 2020";
    c.fix =
        "set the time (NTP: chrony or systemd-timesyncd); logs and benchmark records carry "
        "wall-clock times";
    return c;
  }
  timex tx{};
  if (::adjtimex(&tx) == TIME_ERROR) {
    c.verdict = Verdict::kWarn;
    c.finding = "monotonic clock sane; the wall clock is not synchronized (adjtimex: TIME_ERROR)";
    c.fix =
        "run NTP (chrony or systemd-timesyncd) so that logs of different hosts line up; sluice's "
        "timeouts do "
        "not depend on it";
    return c;
  }
  c.finding = "monotonic clock sane, wall clock synchronized";
  return c;
}

int run_doctor(const DoctorArgs& a) {
  std::string node;
  if (!a.registry.empty()) {
    std::string host, error;
    uint16_t port = 0;
    split_host_port(a.registry, "--registry", 0, &host, &port);
    node = local_address_towards(host, port == 0 ? 1 : port, &error);
  }
  const std::vector<ProviderProbe> probes = probe_providers(node);
  std::vector<Check> checks = {
      check_shared_memory(a), check_peer_memory(),        check_memlock(a, probes),
      check_open_files(a),    check_providers(a, probes), check_registry(a),
      check_clock()};
  int failed = 0, warned = 0;
  for (const Check& c : checks) {
    failed += c.verdict == Verdict::kFail;
    warned += c.verdict == Verdict::kWarn;
  }
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Check& c : checks) {
      j.push_back({{"check", c.name},
                   {"verdict", verdict_text(c.verdict)},
                   {"finding", c.finding},
                   {"fix", c.fix}});
    }
    std::printf(
        "%s\n",
        nlohmann::json{{"checks", j}, {"failed", failed}, {"warnings", warned}}.dump().c_str());
  } else {
    for (const Check& c : checks) {
      std::printf("%s  %-32s %s\n", verdict_text(c.verdict), c.name.c_str(), c.finding.c_str());
      if (!c.fix.empty()) std::printf("      fix: %s\n", c.fix.c_str());
    }
    std::printf("%d checks: %d failed, %d warnings\n", static_cast<int>(checks.size()), failed,
                warned);
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace

void add_doctor_command(CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  if (const char* r = std::getenv("SLUICE_REGISTRY")) args->registry = r;
  if (const char* p = std::getenv("SLUICE_OFI_PROVIDER")) args->provider = p;
  CLI::App* sub = app.add_subcommand("doctor",
                                     "Check this host for what breaks jobs in containers and "
                                     "clusters (shared memory, memlock, open "
                                     "files, libfabric, the registry address, the clock) and print "
                                     "the fix for each failure; exit 1 "
                                     "if a check fails");
  sub->add_option("--registry", args->registry,
                  "HOST:PORT of the job's registry (default: SLUICE_REGISTRY)");
  sub->add_option("--hosts", args->hosts,
                  "Hosts the job spans (a loopback registry fails when more than 1)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--ranks-per-host", args->ranks_per_host, "Ranks per host (default: one per CPU)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--shm-mib", args->shm_mib,
                  "Memory the flows of one rank map and register, MiB (default 256)")
      ->check(CLI::Range(1, 1 << 24));
  sub->add_option("--ofi-provider", args->provider,
                  "The provider ranks will use (default: SLUICE_OFI_PROVIDER or auto)")
      ->check(CLI::IsMember({"auto", "tcp", "verbs", "efa", "shm"}));
  sub->add_flag("--json", args->json, "Print one JSON object instead of text");
  sub->callback([args] {
    int status = 0;
    try {
      status = run_doctor(*args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice doctor: %s\n", e.what());
      throw CLI::RuntimeError(2);
    }
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace sluice::tool
