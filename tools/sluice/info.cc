// `sluice info`: what a rank started on this host would find: the host's
// identity (ranks with equal identities talk over shared memory), memory and
// limits, the network interfaces and the one that reaches the registry, and
// every libfabric provider as sluice opens it (UCX's ucx_info, for sluice).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/env.h"
#include "control/registry_observer.h"
#include "host_commands.h"
#include "host_facts.h"
#include "sluice/version.h"
#include "tool_util.h"
#include "transport/shm/region.h"

namespace sluice::tool {
namespace {

struct InfoArgs {
  std::string registry;
  bool json = false;
};

std::string limit_text(std::optional<uint64_t> v, bool bytes) {
  if (!v) return "unlimited";
  return bytes ? human_bytes(*v) : std::to_string(*v);
}

nlohmann::json limit_json(std::optional<uint64_t> v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

void run_info(const InfoArgs& args) {
  nlohmann::json j;
  j["version"] = kVersion;
  j["control_protocol"] = kProtocolVersion;
  j["test_hooks"] = test_hooks_enabled();
  j["host"] = {{"name", detail::host_name()},
               {"identity", detail::host_identity()},
               {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)}};
  uint64_t shm_size = 0, shm_free = 0;
  const bool has_dev_shm = filesystem_space("/dev/shm", &shm_size, &shm_free);
  j["memory"] = {
      {"available", memory_available()},
      {"cgroup_limit", limit_json(cgroup_memory_limit())},
      {"dev_shm_size", has_dev_shm ? nlohmann::json(shm_size) : nlohmann::json(nullptr)}};
  j["limits"] = {{"memlock", limit_json(soft_limit(RLIMIT_MEMLOCK))},
                 {"open_files", limit_json(soft_limit(RLIMIT_NOFILE))}};
  nlohmann::json ifs = nlohmann::json::array();
  for (const InterfaceAddress& a : interface_addresses()) {
    ifs.push_back(
        {{"name", a.name}, {"address", a.address}, {"up", a.up}, {"loopback", a.loopback}});
  }
  j["interfaces"] = ifs;

  // The address ofi endpoints bind to: the one the registry is reached from.
  std::string node;
  std::string route_error;
  if (!args.registry.empty()) {
    std::string host;
    uint16_t port = 0;
    split_host_port(args.registry, "--registry", 0, &host, &port);
    node = local_address_towards(host, port == 0 ? 1 : port, &route_error);
    j["registry"] = {{"address", args.registry}, {"local_address", node}, {"error", route_error}};
  } else {
    j["registry"] = nullptr;
  }
  const std::vector<ProviderProbe> probes = probe_providers(node);
  nlohmann::json provs = nlohmann::json::array();
  for (const ProviderProbe& p : probes) {
    nlohmann::json e = {{"choice", p.choice}, {"usable", p.usable}};
    if (!p.usable) {
      e["error"] = p.error;
    } else {
      e.update({{"libfabric_name", p.libfabric_name},
                {"fabric", p.fabric},
                {"domain", p.domain},
                {"rma", p.rma},
                {"atomics", p.atomics},
                {"names_sources", p.names_sources},
                {"needs_data_receives", p.needs_data_receives},
                {"cq_data_size", p.cq_data_size},
                {"wait_fd", p.wait_fd},
                {"msg_order", p.msg_order},
                {"mr_mode", p.mr_mode},
                {"pins_memory", p.pins_memory}});
    }
    provs.push_back(e);
  }
  j["libfabric"] = {
      {"version", libfabric_version()}, {"providers", provs}, {"auto", auto_provider(probes)}};

  // The path a rank started here would take to each member of the job.
  const std::string chosen_provider = auto_provider(probes);
  std::string members_error;
  std::vector<control::ObservedRank> members;
  if (!args.registry.empty()) {
    const auto secret = detail::env::get("SLUICE_SECRET");
    if (!secret) {
      members_error =
          "not asked: SLUICE_SECRET is not set (the registry answers only holders of the job's "
          "secret)";
    } else {
      std::string host;
      uint16_t port = 0;
      split_host_port(args.registry, "--registry", 0, &host, &port);
      try {
        members = control::observe_job(host, port, *secret, "host/", 200,
                                       Clock::now() + std::chrono::seconds(5));
      } catch (const std::exception& e) {
        members_error = e.what();
      }
    }
  }
  const std::string transport = detail::env::get("SLUICE_TRANSPORT").value_or("auto");
  const std::string here = detail::host_identity();
  const auto path_to = [&](const control::ObservedRank& m) -> std::string {
    if (m.value.empty()) return "unknown (it has not published its host identity)";
    const bool same = m.value == here;
    const std::string ofi = chosen_provider.empty() ? std::string("none: ofi is unusable here")
                                                    : "ofi (" + chosen_provider + ")";
    if (transport == "ofi") return ofi;
    if (transport == "shm") return same ? "shm" : "none: SLUICE_TRANSPORT=shm and another host";
    return same ? "shm (same host identity)" : ofi;
  };
  if (!args.registry.empty()) {
    nlohmann::json ms = nlohmann::json::array();
    for (const control::ObservedRank& m : members) {
      ms.push_back({{"rank", m.rank},
                    {"state", m.state},
                    {"host", m.host},
                    {"pid", m.pid},
                    {"identity", m.value},
                    {"path", path_to(m)}});
    }
    j["registry"]["members"] = ms;
    if (!members_error.empty()) j["registry"]["members_error"] = members_error;
  }

  if (args.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("sluice %s (control protocol %u), test hooks %s\n", kVersion,
              static_cast<unsigned>(kProtocolVersion), test_hooks_enabled() ? "on" : "off");
  std::printf("host %s, %ld CPUs\n", detail::host_name().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("  identity %s\n", detail::host_identity().c_str());
  std::printf(
      "  (ranks with the same identity share memory: transport auto picks shm between them, ofi "
      "otherwise)\n");
  std::printf("memory: %s available, cgroup limit %s\n", human_bytes(memory_available()).c_str(),
              limit_text(cgroup_memory_limit(), true).c_str());
  std::printf(
      "  flows map their rings from memfd (counted against the cgroup limit), not /dev/shm%s%s\n",
      has_dev_shm ? ", whose size is " : "", has_dev_shm ? human_bytes(shm_size).c_str() : "");
  std::printf("limits: memlock %s (verbs and efa lock the memory they register), open files %s\n",
              limit_text(soft_limit(RLIMIT_MEMLOCK), true).c_str(),
              limit_text(soft_limit(RLIMIT_NOFILE), false).c_str());
  std::printf("interfaces:\n");
  for (const InterfaceAddress& a : interface_addresses()) {
    std::printf("  %-10s %-40s %s%s\n", a.name.c_str(), a.address.c_str(), a.up ? "up" : "down",
                a.loopback ? ", loopback" : "");
  }
  if (args.registry.empty()) {
    std::printf(
        "registry: none given (--registry HOST:PORT or SLUICE_REGISTRY); ofi endpoints below bind "
        "to any address\n");
  } else if (node.empty()) {
    std::printf("registry %s: %s\n", args.registry.c_str(), route_error.c_str());
  } else {
    std::printf("registry %s: reached from %s, the address ofi endpoints bind to\n",
                args.registry.c_str(), node.c_str());
  }
  const std::string& chosen = chosen_provider;
  std::printf("libfabric %s; providers as a rank opens them (auto picks %s):\n",
              libfabric_version().c_str(),
              chosen.empty() ? "none: ofi is unusable here" : chosen.c_str());
  for (const ProviderProbe& p : probes) {
    if (!p.usable) {
      std::printf("  %-6s not usable: %s\n", p.choice.c_str(), p.error.c_str());
      continue;
    }
    std::printf("  %-6s %s, fabric %s, domain %s\n", p.choice.c_str(), p.libfabric_name.c_str(),
                p.fabric.c_str(), p.domain.c_str());
    std::printf(
        "         RMA %s, atomics %s, completions name the sender %s, CQ data %llu B, data "
        "receives %s,\n",
        p.rma ? "yes" : "no (segments go as messages)",
        p.atomics ? "yes" : "no (regions emulate them)", p.names_sources ? "yes" : "no",
        static_cast<unsigned long long>(p.cq_data_size),
        p.needs_data_receives ? "needed" : "not needed");
    std::printf("         CQ wait fd %s, message order %s, MR mode %s\n",
                p.wait_fd ? "yes" : "no (parks in slices)", p.msg_order.c_str(), p.mr_mode.c_str());
  }
  if (args.registry.empty()) return;
  if (!members_error.empty()) {
    std::printf("members of the job at %s: %s\n", args.registry.c_str(), members_error.c_str());
    return;
  }
  std::printf(
      "members of the job at %s (SLUICE_TRANSPORT=%s): the path a rank started here "
      "takes to each\n",
      args.registry.c_str(), transport.c_str());
  if (members.empty()) std::printf("  none has joined yet\n");
  for (const control::ObservedRank& m : members) {
    std::printf("  rank %-4u %-5s %s (pid %u): %s\n", m.rank, m.state.c_str(), m.host.c_str(),
                m.pid, path_to(m).c_str());
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  if (const char* r = std::getenv("SLUICE_REGISTRY")) args->registry = r;
  CLI::App* sub = app.add_subcommand(
      "info",
      "What a rank started here would find: host identity, memory and limits, interfaces, and "
      "every "
      "libfabric provider as sluice opens it (RMA, atomics, ordering, CQ data, MR mode)");
  sub->add_option("--registry", args->registry,
                  "HOST:PORT of a registry: show the local address that reaches it, which ofi "
                  "endpoints bind to, and (with the job's SLUICE_SECRET) the path, shm or ofi "
                  "and its provider, a rank started here would take to each of the job's ranks "
                  "(default: SLUICE_REGISTRY)");
  sub->add_flag("--json", args->json, "Print one JSON object instead of text");
  sub->callback([args] {
    try {
      run_info(*args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice info: %s\n", e.what());
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace sluice::tool
