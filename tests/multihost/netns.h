// Separate IP "hosts" on one machine for the multihost tests: K Linux network
// namespaces, each with its own address in 198.18.0.0/15 (RFC 2544, reserved
// for benchmarking, so the tests never collide with a real network), joined
// either by a bridge in the root namespace or, where bridges are missing or
// filtered, by a full mesh of veth pairs.
//
//   bridge:  root ns:  smh<pid>-<n>b (bridge, no address)
//                        |-- smh<pid>-<n>v0 ==veth== eth0 198.18.X.1/24  [sluice-mh-<pid>-<n>-0]
//                        |-- smh<pid>-<n>v1 ==veth== eth0 198.18.X.2/24  [sluice-mh-<pid>-<n>-1]
//                        `-- ...
//   mesh:    in ns i, one veth "to<j>" per other ns j, carrying ip(i)/32 and a
//            /32 route to ip(j); nothing in the root namespace.
//
// Every command goes through the `ip` program (iproute2), forked with an argv
// and a time limit. The constructor checks that every host can open a TCP
// connection to every other before it returns, so a test that gets a
// TestHosts has a working network.
//
// Thread safety: a TestHosts is used by one thread; spawn()ed children may be
// waited on from any thread.
// Ownership: the object owns its namespaces and links and deletes them in its
// destructor (also when the test failed). Leftovers of a process that died
// without running a destructor carry its pid in their names; the next
// TestHosts (or remove_stale()) deletes them once that pid is gone.
// REQUIRES: root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2; check with
// can_create() first and skip the test if it says no.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "multihost/child_process.h"
#include "support/test_support.h"

namespace sluice::testing {

enum class Topology {
  kAuto,    // a bridge; a mesh if the bridge cannot be made or does not pass traffic
  kBridge,  // a bridge in the root namespace, one veth per host
  kMesh,    // one veth pair per pair of hosts, no root-namespace links
};

const char* to_string(Topology t);

class TestHosts {
 public:
  // Whether this process can make namespaces and veth links at all. If not,
  // `why` says what is missing ("not running as root", "no `ip` program",
  // or what `ip` printed when a probe namespace could not be created).
  static bool can_create(std::string* why);

  // Deletes namespaces and root-namespace links left by earlier TestHosts
  // whose process no longer exists. Returns how many it deleted.
  static int remove_stale();

  // Creates `count` hosts (1..9) joined by `topology`. Removes stale
  // leftovers first. Throws std::runtime_error saying which step failed,
  // after deleting whatever it had made.
  explicit TestHosts(int count, Topology topology = Topology::kAuto);
  ~TestHosts();
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;

  int size() const { return static_cast<int>(names_.size()); }
  // Namespace name of host i, e.g. "sluice-mh-4242-0-1".
  const std::string& name(int i) const { return names_.at(i); }
  // IPv4 address of host i, e.g. "198.18.1.2".
  std::string ip(int i) const;
  // The topology actually built (never kAuto).
  Topology topology() const { return topology_; }
  // Links this object made in the root namespace (empty for a mesh).
  const std::vector<std::string>& root_links() const { return root_links_; }

  // argv prefixed so that it runs inside host i (`ip netns exec NAME ...`).
  std::vector<std::string> in_host(int i, const std::vector<std::string>& argv) const;
  // Starts argv (argv[0] a path) in host i with environment `env` (see
  // proc::environment_with); returns at once.
  std::unique_ptr<ChildProcess> spawn(int i, const std::vector<std::string>& argv,
                                      const std::vector<std::string>& env) const;
  // Cuts host i off the others (a network partition): every link of its
  // namespace but lo goes down, so nothing it sends arrives and no reset
  // tells anyone (TCP connections across the cut time out).
  void isolate(int i) const;
  // Runs argv in host i to completion or `limit`, capturing its output.
  ProcessResult run(int i, const std::vector<std::string>& argv,
                    std::chrono::milliseconds limit = std::chrono::seconds(60)) const;

 private:
  void build_bridge();
  void build_mesh();
  void check_connectivity() const;  // throws naming the pair that cannot connect
  void remove_all();                // deletes everything carrying this object's tag

  std::string tag_;          // "<pid>-<n>": unique among live TestHosts
  std::string link_prefix_;  // "smh<pid>-<n>" (link names are limited to 15 bytes)
  int subnet_ = 1;           // third octet of the addresses
  Topology topology_ = Topology::kBridge;
  std::vector<std::string> names_;
  std::vector<std::string> root_links_;
};

// Absolute path of the `ip` program, or "" if there is none.
const std::string& ip_program();

// Names listed by `ip netns list`, and links listed by `ip link show` in the
// root namespace (without the "@peer" suffix).
std::vector<std::string> list_netns();
std::vector<std::string> list_root_links();

}  // namespace sluice::testing
