// What `sluice info` reports and `sluice doctor` judges: facts about this
// host as sluice would meet them when a rank starts here. Each probe does
// what the library does (a memfd of the size flows map, another process's
// memfd opened through /proc, an ofi endpoint opened with sluice's own
// hints), so a fact here is what a rank would find, not a guess from
// configuration files.
//
// Thread safety: call from one thread; the probes fork children.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice::tool {

// One network interface address (getifaddrs).
struct InterfaceAddress {
  std::string name;     // "eth0"
  std::string address;  // "10.0.0.2" or "fe80::1"
  bool up = false;
  bool loopback = false;
};
std::vector<InterfaceAddress> interface_addresses();

// The local address this host uses to reach host:port (the route the kernel
// picks, found with a connected UDP socket, no packet sent): the address a
// rank binds its ofi endpoints to. Empty and `error` set if there is none.
std::string local_address_towards(const std::string& host, uint16_t port, std::string* error);

// Whether `host` (a name or an address) resolves to a loopback address.
bool is_loopback_host(const std::string& host);

// Whether a TCP connection to host:port opens within `timeout_ms`.
bool tcp_connects(const std::string& host, uint16_t port, int timeout_ms, std::string* error);

// An ofi endpoint opened the way a rank opens one for memory regions (RMA
// and atomics where offered), with one provider pinned.
struct ProviderProbe {
  std::string choice;  // sluice's name: "verbs", "efa", "tcp", "shm"
  bool usable = false;
  std::string error;  // why not, when !usable
  std::string fix;    // what to do about it, where it is specific to this cause
  std::string libfabric_name;
  std::string fabric;
  std::string domain;
  bool rma = false;
  bool atomics = false;
  bool names_sources = false;  // FI_SOURCE: completions name the sender
  bool needs_data_receives = false;
  uint64_t cq_data_size = 0;
  bool wait_fd = false;  // the completion queue has a wait fd to poll(2)
  std::string msg_order;
  std::string mr_mode;
  bool pins_memory = false;  // registration locks pages (counts against memlock)
};
// One probe per provider sluice knows, in its preference order (verbs, efa,
// tcp) and then shm. `node` is the address to bind to (empty: any).
std::vector<ProviderProbe> probe_providers(const std::string& node);
// The provider `auto` picks among `probes` (the first usable of verbs, efa,
// tcp), or empty.
std::string auto_provider(const std::vector<ProviderProbe>& probes);

// A soft resource limit (getrlimit); nullopt for RLIM_INFINITY.
std::optional<uint64_t> soft_limit(int resource);

// Creates a memfd of `bytes` and allocates all of it (fallocate), in a child
// process so that a memory-cgroup kill cannot take the caller with it.
// Returns true on success, else false with the reason.
bool memfd_holds(uint64_t bytes, std::string* error);

// Opens another process's memfd through /proc/<pid>/fd/<n>, read-write, as a
// rank maps a peer's rings on the same host. False with the reason if the
// kernel refuses (another user, a PID namespace, /proc mounted hidepid).
bool peer_memfd_opens(std::string* error);

// The memory limit of this process's cgroup (v2 memory.max, else v1
// memory.limit_in_bytes), or nullopt when unlimited or unknown.
std::optional<uint64_t> cgroup_memory_limit();
// What that cgroup uses now (v2 memory.current, v1 memory.usage_in_bytes).
std::optional<uint64_t> cgroup_memory_usage();

// Size and free bytes of the filesystem at `path` (statvfs); false if none.
bool filesystem_space(const std::string& path, uint64_t* size, uint64_t* available);

// "MemAvailable" of /proc/meminfo in bytes, or 0.
uint64_t memory_available();

// libfabric's runtime version, "1.17.0".
std::string libfabric_version();

// "12.3 MiB", "1.0 GiB", "512 B".
std::string human_bytes(uint64_t bytes);

}  // namespace sluice::tool
