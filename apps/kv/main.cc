// sluice-kv: the replicated key-value store. `sluice-kv run` is one rank of
// a `sluice run` job (Multi-Paxos replicas and clients over sluice flows,
// flow_job.h); `sluice-kv simulate` runs either protocol on the
// deterministic simulated network, the way the tests do (docs/kv.md).
#include <signal.h>
#include <sluice/errors.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "cluster_sim.h"
#include "flow_job.h"
#include "history.h"

namespace {

const char* kUsage =
    "usage: sluice run -n N -- sluice-kv run [options]\n"
    "       sluice-kv simulate [options]\n"
    "\n"
    "run: one rank of a job. Ranks 0 .. replicas-1 are replicas, every further rank\n"
    "a closed-loop client; protocol messages travel over sluice flows (Multi-Paxos:\n"
    "a replicate flow for phase 2; NOPaxos: an ordered replicate flow from the\n"
    "clients as the ordered multicast; both: a shuffle flow for the rest). Rank 0\n"
    "sequences the ordered flow. At the end rank 0\n"
    "checks that all replicas applied the same log with the same digest, that every\n"
    "operation completed exactly once, and that the log linearizes the history,\n"
    "and prints the throughput and each operation type's latency percentiles.\n"
    "A replica killed and started again (sluice run --keep-going --restarts K) recovers\n"
    "its state from the others while they serve; a lost replica's ranks go on without\n"
    "it while a majority is left (docs/kv.md).\n"
    "  --protocol multipaxos|nopaxos   (default multipaxos)\n"
    "  --replicas N        2f+1 replicas (default 3)\n"
    "  --ops N             operations per client (default 1000)\n"
    "  --clients-per-rank K  closed-loop clients on each client rank (default 1)\n"
    "  --keys N            distinct keys (default 100)\n"
    "  --seed S            workload seed (default 1)\n"
    "  --retry-ms MS       client retry timeout (default 2000)\n"
    "  --election-timeout-ms MS  follower wait before phase 1 or a view change (default 2000)\n"
    "  --trace-retries     clients print every retry to stderr\n"
    "  --workload W        mixed (put 40%, get 35%, cas 20%, delete 5%; the default), or\n"
    "                      YCSB's a (50% get, 50% put), b (95/5) or c (gets only)\n"
    "  --distribution D    keys uniform (default) or zipf (YCSB's scrambled Zipfian, 0.99)\n"
    "  --value-bytes N     YCSB workloads' value size (default 64)\n"
    "  --resp-port P       client ranks serve the Redis protocol (redis-cli,\n"
    "                      redis-benchmark) on TCP port P + client index instead of\n"
    "                      running a workload (0: ports the kernel picks; each is\n"
    "                      printed); docs/kv.md. With it, as Redis's settings:\n"
    "  --resp-bind ADDR    the address to listen on (default 127.0.0.1; 0.0.0.0 or ::\n"
    "                      is every interface, with a warning)\n"
    "  --requirepass-file F  clients must AUTH with the first line of F\n"
    "  --requirepass PASS  the same, on the command line (visible to every user)\n"
    "  --protected-mode yes|no  without a password, serve loopback clients only\n"
    "                      (default yes)\n"
    "  --enable-shutdown no|local|yes  who may end the job with SHUTDOWN: nobody\n"
    "                      (default), loopback clients, anyone (authenticated)\n"
    "  --maxclients N      connections per gateway (default 10000)\n"
    "  --maxmemory BYTES   the store's data at most; writes past it get -OOM\n"
    "                      (default 0: no limit). BYTES may end in kb, mb or gb\n"
    "  --maxmemory-clients BYTES  all connections' buffers at most; past it the\n"
    "                      client with the most is closed (default 64mb; 0: none)\n"
    "  --client-query-buffer-limit BYTES  an unfinished request at most (1mb)\n"
    "  --client-output-buffer-limit BYTES  a client's unsent replies at most;\n"
    "                      past it it is closed (default 32mb)\n"
    "  --proto-max-bulk-len BYTES  one argument at most, refused from its header\n"
    "                      (default: what --max-value-bytes allows)\n"
    "  --max-value-bytes BYTES  values up to this size, with keys up to 1 KiB (a\n"
    "                      command's key and values take at most BYTES + 1 KiB in\n"
    "                      all; default 64kb). Every flow segment holds one such\n"
    "                      command, so it costs memory: 512kb takes about 200 MB\n"
    "                      more per rank over shm\n"
    "  --window N          operations each client keeps in flight, 1 .. 256 (default: 1\n"
    "                      for workloads, closed-loop; 256 behind --resp-port, so that a\n"
    "                      connection's pipelined commands are replicated together; a\n"
    "                      client's commands still take effect in order)\n"
    "  --batch N           commands per request message at most (NOPaxos: per ordered\n"
    "                      record, which takes one sequence number and log slot and is\n"
    "                      shared by a rank's clients); default 0: as many as 8 KiB\n"
    "                      (NOPaxos) or 32 KiB (Multi-Paxos) of commands hold\n"
    "  --history FILE      every completed operation, as JSON lines (check it with\n"
    "                      kv-porcupine, scripts/install-porcupine.sh): a workload's\n"
    "                      rank 0 writes them at the end; behind --resp-port each\n"
    "                      gateway writes its own as they complete, to FILE (one\n"
    "                      gateway rank) or FILE.<rank>. Nothing is kept otherwise\n"
    "  --snapshot-every N  a snapshot of the store every N applied slots (NOPaxos: once\n"
    "                      they are final); the log keeps the slots since the one before\n"
    "                      (default 8192; 0: keep the whole log)\n"
    "\n"
    "simulate: runs a replicated key-value store (2f+1 replicas, closed-loop clients) on a\n"
    "seeded simulated network with message loss, then checks that every replica\n"
    "applied the same log with the same store digest and that the log is a\n"
    "linearization of the clients' history. Exit status 0 when all checks pass.\n"
    "\n"
    "options:\n"
    "  --protocol multipaxos|nopaxos   (default multipaxos)\n"
    "  --replicas N        2f+1 replicas (default 3)\n"
    "  --clients N         closed-loop clients (default 4)\n"
    "  --ops N             operations per client (default 200)\n"
    "  --keys N            distinct keys (default 8)\n"
    "  --drop P            probability that a message is lost (default 0.01)\n"
    "  --seed S            seed of the network and the workload (default 1)\n"
    "  --crash-leader-at MS  crash the leader at simulated time MS (default: never)\n"
    "  --restart-follower-at MS  restart a follower without its state at simulated time\n"
    "                      MS: it recovers from the others (default: never)\n"
    "  --snapshot-every N  as for run\n"
    "  --workload W, --distribution D, --value-bytes N   as for run\n"
    "  --history FILE      write every completed operation to FILE (JSON lines, for kv-porcupine)\n"
    "  --help              this text\n"
    "\n"
    "\n"
    "Over flows, jobs run without faults so far (a lost rank ends the job with an\n"
    "error); see docs/kv.md.\n";

bool parse_u64(const char* s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return false;
  *out = v;
  return true;
}

// A size in bytes as Redis's settings write it: a number, with kb, mb or
// gb (powers of 1024; k, m, g too), any case.
bool parse_bytes(const char* s, uint64_t* out) {
  std::string text = s;
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  uint64_t unit = 1;
  for (const auto& [suffix, size] : {std::pair<const char*, uint64_t>{"kb", 1ull << 10},
                                     {"mb", 1ull << 20},
                                     {"gb", 1ull << 30},
                                     {"k", 1ull << 10},
                                     {"m", 1ull << 20},
                                     {"g", 1ull << 30},
                                     {"b", 1}}) {
    const size_t n = std::strlen(suffix);
    if (text.size() > n && text.compare(text.size() - n, n, suffix) == 0) {
      text.resize(text.size() - n);
      unit = size;
      break;
    }
  }
  uint64_t v = 0;
  if (!parse_u64(text.c_str(), &v) || v > UINT64_MAX / unit) return false;
  *out = v * unit;
  return true;
}

bool known_workload(const std::string& w) {
  return w == "mixed" || w == "a" || w == "b" || w == "c";
}

// --max-value-bytes at most: a flow's segment holds one such value and a
// message (flow_job.cc), and segments are at most 64 MiB.
constexpr uint64_t kMaxValueBytes = uint64_t{32} << 20;

int run_main(int argc, char** argv) {
  kv::FlowJobOptions o;
  bool bulk_given = false, query_limit_given = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
#ifdef SLUICE_KV_TEST_HOOKS
    if ((a == "--test-stall-leader-ms" || a == "--test-sigstop-leader-ms") && i + 2 < argc) {
      // Test builds only: rank 0, the first leader, once it has applied
      // --test-stall-after entries, stops for MS (past the election timeout).
      //   --test-stall-leader-ms: its worker thread sleeps; its control
      //     thread keeps the rank alive, as a long pause would.
      //   --test-sigstop-leader-ms: the whole process stops (SIGSTOP, every
      //     thread, heartbeats too) and a forked child sends SIGCONT after MS.
      uint64_t ms = 0, after = 0;
      if (!parse_u64(argv[i + 1], &ms) || std::strcmp(argv[i + 2], "--test-stall-after") != 0 ||
          i + 3 >= argc || !parse_u64(argv[i + 3], &after)) {
        std::fprintf(stderr, "sluice-kv run: %s MS --test-stall-after N\n", a.c_str());
        return 2;
      }
      i += 3;
      const bool sigstop = a == "--test-sigstop-leader-ms";
      auto stalled = std::make_shared<bool>(false);
      o.on_progress = [ms, after, stalled, sigstop](uint32_t rank, bool leader, uint64_t applied) {
        if (*stalled || rank != 0 || !leader || applied < after) return;
        *stalled = true;
        std::fprintf(stderr, "test hook: leader rank %u %s for %llu ms after %llu entries\n", rank,
                     sigstop ? "stops (SIGSTOP)" : "stalls", static_cast<unsigned long long>(ms),
                     static_cast<unsigned long long>(applied));
        std::fflush(stderr);
        if (!sigstop) {
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          return;
        }
        const pid_t self = ::getpid();
        const pid_t waker = ::fork();
        if (waker == 0) {  // async-signal-safe calls only: the parent has threads
          const struct timespec pause {
            static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000
          };
          ::nanosleep(&pause, nullptr);
          ::kill(self, SIGCONT);
          ::_exit(0);
        }
        if (waker < 0) {
          std::perror("test hook: fork");
          return;
        }
        ::raise(SIGSTOP);
        ::waitpid(waker, nullptr, 0);
        std::fprintf(stderr, "test hook: leader rank %u continues (SIGCONT)\n", rank);
      };
      continue;
    }
    if (a == "--test-kill-rank" && i + 2 < argc) {
      // Test builds only: replica R kills itself (SIGKILL) once it has
      // applied --test-kill-after N entries; run the job with
      // `sluice run --keep-going` and the others go on without it.
      uint64_t victim = 0, after = 0;
      if (!parse_u64(argv[i + 1], &victim) || std::strcmp(argv[i + 2], "--test-kill-after") != 0 ||
          i + 3 >= argc || !parse_u64(argv[i + 3], &after)) {
        std::fprintf(stderr, "sluice-kv run: --test-kill-rank R --test-kill-after N\n");
        return 2;
      }
      i += 3;
      o.on_progress = [victim, after](uint32_t rank, bool leader, uint64_t applied) {
        if (rank != victim || applied < after) return;
        std::fprintf(stderr, "test hook: rank %u (%s) kills itself after %llu entries\n", rank,
                     leader ? "the leader" : "a follower",
                     static_cast<unsigned long long>(applied));
        std::fflush(stderr);
        ::raise(SIGKILL);
      };
      continue;
    }
    if (a == "--test-drop" && i + 1 < argc) {
      // Test builds only: lose this fraction of the protocol messages received.
      char* end = nullptr;
      o.test_drop = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(o.test_drop >= 0 && o.test_drop < 1)) {
        std::fprintf(stderr, "sluice-kv run: --test-drop is a fraction, 0 <= P < 1\n");
        return 2;
      }
      continue;
    }
    if (a == "--test-await-rejoin") {
      // Test builds only: a client that finished its operations says so only
      // once a rank was restarted and every rank is back in its epoch (at
      // most 60 s), so that a killed and restarted replica rejoins before
      // the job ends.
      o.test_await_rejoin = true;
      continue;
    }
    if (a == "--test-drop-seed" && i + 1 < argc) {
      if (!parse_u64(argv[++i], &o.test_drop_seed)) {
        std::fprintf(stderr, "sluice-kv run: --test-drop-seed needs a number\n");
        return 2;
      }
      continue;
    }
#endif
    if (a == "--trace-retries") {
      o.trace_retries = true;
      continue;
    }
    if (a == "--history" && i + 1 < argc) {
      o.history = argv[++i];
      continue;
    }
    if (a == "--resp-bind" && i + 1 < argc) {
      o.gateway.bind = argv[++i];
      continue;
    }
    if (a == "--requirepass" && i + 1 < argc) {
      o.gateway.requirepass = argv[++i];
      if (o.gateway.requirepass.empty()) {
        std::fprintf(stderr, "sluice-kv run: --requirepass is empty\n");
        return 2;
      }
      continue;
    }
    if (a == "--requirepass-file" && i + 1 < argc) {
      const std::string path = argv[++i];
      std::ifstream in(path);
      std::string line;
      if (!in || !std::getline(in, line) || line.empty()) {
        std::fprintf(stderr,
                     "sluice-kv run: --requirepass-file %s: cannot read it, or its first line is "
                     "empty; write the password there\n",
                     path.c_str());
        return 2;
      }
      if (!line.empty() && line.back() == '\r') line.pop_back();
      o.gateway.requirepass = line;
      continue;
    }
    if ((a == "--protected-mode" || a == "--enable-shutdown") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--protected-mode" && (v == "yes" || v == "no")) {
        o.gateway.protected_mode = v == "yes";
      } else if (a == "--enable-shutdown" && (v == "no" || v == "local" || v == "yes")) {
        o.gateway.shutdown = v == "no"      ? kv::ShutdownFrom::kNobody
                             : v == "local" ? kv::ShutdownFrom::kLocal
                                            : kv::ShutdownFrom::kAnyone;
      } else {
        std::fprintf(stderr, "sluice-kv run: %s is %s, not '%s'\n", a.c_str(),
                     a == "--protected-mode" ? "yes or no" : "no, local or yes", v.c_str());
        return 2;
      }
      continue;
    }
    if ((a == "--maxmemory" || a == "--maxmemory-clients" || a == "--client-query-buffer-limit" ||
         a == "--client-output-buffer-limit" || a == "--proto-max-bulk-len" ||
         a == "--max-value-bytes") &&
        i + 1 < argc) {
      uint64_t bytes = 0;
      if (!parse_bytes(argv[++i], &bytes)) {
        std::fprintf(stderr,
                     "sluice-kv run: %s takes a size in bytes (e.g. 1048576, 512kb, 64mb), not "
                     "'%s'\n",
                     a.c_str(), argv[i]);
        return 2;
      }
      if (a == "--maxmemory") {
        o.maxmemory = bytes;
      } else if (a == "--maxmemory-clients") {
        o.gateway.maxmemory_clients = bytes;
      } else if (bytes == 0) {
        std::fprintf(stderr, "sluice-kv run: %s must be above 0\n", a.c_str());
        return 2;
      } else if (a == "--max-value-bytes") {
        if (bytes > kMaxValueBytes) {
          std::fprintf(stderr, "sluice-kv run: --max-value-bytes is at most %llu (32mb)\n",
                       static_cast<unsigned long long>(kMaxValueBytes));
          return 2;
        }
        o.max_entry_bytes = bytes + 1024;
      } else if (a == "--client-query-buffer-limit") {
        query_limit_given = true;
        o.gateway.query_buffer_limit = bytes;
      } else if (a == "--client-output-buffer-limit") {
        o.gateway.output_buffer_limit = bytes;
      } else {
        bulk_given = true;
        o.gateway.max_bulk = bytes;
      }
      continue;
    }
    if (a == "--workload" && i + 1 < argc) {
      o.workload = argv[++i];
      if (!known_workload(o.workload)) {
        std::fprintf(stderr, "sluice-kv run: --workload is mixed, a, b or c, not '%s'\n",
                     o.workload.c_str());
        return 2;
      }
      continue;
    }
    if (a == "--distribution" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v != "uniform" && v != "zipf") {
        std::fprintf(stderr, "sluice-kv run: --distribution is uniform or zipf, not '%s'\n",
                     v.c_str());
        return 2;
      }
      o.zipf = v == "zipf";
      continue;
    }
    if (a == "--protocol" && i + 1 < argc) {
      std::string v = argv[++i];
      if (v == "multipaxos") {
        o.protocol = kv::Protocol::kMultiPaxos;
      } else if (v == "nopaxos") {
        o.protocol = kv::Protocol::kNoPaxos;
      } else {
        std::fprintf(stderr, "sluice-kv run: --protocol is multipaxos or nopaxos, not '%s'\n",
                     v.c_str());
        return 2;
      }
      continue;
    }
    uint64_t n = 0;
    if (i + 1 >= argc || !parse_u64(argv[i + 1], &n)) {
      std::fprintf(stderr, "sluice-kv run: %s needs a number (try --help)\n", a.c_str());
      return 2;
    }
    ++i;
    if (a == "--replicas" && n % 2 == 1 && n <= 15) {
      o.replicas = static_cast<uint32_t>(n);
    } else if (a == "--ops") {
      o.ops_per_client = static_cast<uint32_t>(n);
    } else if (a == "--keys" && n >= 1) {
      o.keys = static_cast<uint32_t>(n);
    } else if (a == "--seed") {
      o.seed = n;
    } else if (a == "--retry-ms" && n >= 1) {
      o.retry_ms = n;
    } else if (a == "--window" && n >= 1 && n <= kv::kClientWindow) {
      o.window = static_cast<uint32_t>(n);
    } else if (a == "--batch" && n <= kv::kClientWindow) {
      o.batch = static_cast<uint32_t>(n);
    } else if (a == "--clients-per-rank" && n >= 1 && n <= 256) {
      o.clients_per_rank = static_cast<uint32_t>(n);
    } else if (a == "--resp-port" && n <= 65535) {
      o.resp = true;
      o.gateway.port = static_cast<uint16_t>(n);
    } else if (a == "--maxclients" && n >= 1) {
      o.gateway.maxclients = n;
    } else if (a == "--value-bytes" && n <= 1024 * 1024) {
      o.value_bytes = static_cast<uint32_t>(n);
    } else if (a == "--election-timeout-ms" && n >= 1) {
      o.election_timeout_ms = n;
    } else if (a == "--snapshot-every") {
      o.snapshot_every = n;
    } else {
      std::fprintf(stderr, "sluice-kv run: unknown option or bad value: %s %s (try --help)\n",
                   a.c_str(), argv[i]);
      return 2;
    }
  }
  // Unless given, an argument may be as long as the largest command, and a
  // request hold one such argument and its key.
  if (!bulk_given) o.gateway.max_bulk = o.max_entry_bytes;
  if (!query_limit_given)
    o.gateway.query_buffer_limit =
        std::max<size_t>(o.gateway.query_buffer_limit, o.gateway.max_bulk + 64 * 1024);
  if (!o.resp && uint64_t{o.value_bytes} + 64 > o.max_entry_bytes) {
    std::fprintf(stderr,
                 "sluice-kv run: --value-bytes %u is over what --max-value-bytes lets the job "
                 "carry (%llu with its key); raise --max-value-bytes\n",
                 o.value_bytes, static_cast<unsigned long long>(o.max_entry_bytes - 1024));
    return 2;
  }
  if (o.gateway.max_bulk > o.gateway.query_buffer_limit) {
    std::fprintf(stderr,
                 "sluice-kv run: --proto-max-bulk-len %zu is over --client-query-buffer-limit %zu: "
                 "no request could carry such an argument\n",
                 o.gateway.max_bulk, o.gateway.query_buffer_limit);
    return 2;
  }
  if (o.resp && o.gateway.requirepass.empty() && !o.gateway.protected_mode)
    std::fprintf(stderr,
                 "sluice-kv run: warning: --protected-mode no without a password: any client "
                 "that reaches the port can read, write and delete every key\n");
  if (o.resp && (o.gateway.bind == "0.0.0.0" || o.gateway.bind == "::"))
    std::fprintf(stderr, "sluice-kv run: warning: --resp-bind %s listens on every interface%s\n",
                 o.gateway.bind.c_str(),
                 o.gateway.requirepass.empty()
                     ? (o.gateway.protected_mode
                            ? "; without --requirepass, protected mode still refuses every client "
                              "that is not on loopback"
                            : "")
                     : "; clients must AUTH");
  try {
    sluice::Cluster cluster = sluice::Cluster::join();
    return kv::run_flow_job(cluster, o);
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "sluice-kv run: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-kv run: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "run") == 0) return run_main(argc, argv);
  if (std::strcmp(argv[1], "simulate") != 0) {
    std::fprintf(stderr, "sluice-kv: unknown command '%s' (try --help)\n", argv[1]);
    return 2;
  }
  kv::ClusterOptions o;
  o.clients = 4;
  o.ops_per_client = 200;
  o.keys = 8;
  o.sim.drop_rate = 0.01;
  uint64_t crash_at = 0, restart_at = 0;
  std::string history;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "sluice-kv: %s needs a value (try --help)\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    uint64_t n = 0;
    bool ok = true;
    if (a == "--protocol") {
      if (std::strcmp(v, "multipaxos") == 0) {
        o.protocol = kv::Protocol::kMultiPaxos;
      } else if (std::strcmp(v, "nopaxos") == 0) {
        o.protocol = kv::Protocol::kNoPaxos;
      } else {
        ok = false;
      }
    } else if (a == "--history") {
      history = v;
      ok = !history.empty();
    } else if (a == "--workload") {
      o.workload = v;
      ok = known_workload(o.workload);
    } else if (a == "--distribution") {
      o.zipf = std::strcmp(v, "zipf") == 0;
      ok = o.zipf || std::strcmp(v, "uniform") == 0;
    } else if (a == "--drop") {
      char* end = nullptr;
      o.sim.drop_rate = std::strtod(v, &end);
      ok = end != v && *end == '\0' && o.sim.drop_rate >= 0 && o.sim.drop_rate < 1;
    } else if (!parse_u64(v, &n)) {
      ok = false;
    } else if (a == "--replicas") {
      ok = n >= 1 && n % 2 == 1 && n <= 15;
      o.replicas = static_cast<uint32_t>(n);
    } else if (a == "--clients") {
      ok = n >= 1 && n <= 1000;
      o.clients = static_cast<uint32_t>(n);
    } else if (a == "--ops") {
      o.ops_per_client = static_cast<uint32_t>(n);
    } else if (a == "--keys") {
      ok = n >= 1;
      o.keys = static_cast<uint32_t>(n);
    } else if (a == "--value-bytes") {
      ok = n <= 1024 * 1024;
      o.value_bytes = static_cast<uint32_t>(n);
    } else if (a == "--seed") {
      o.seed = n;
      o.sim.seed = n;
    } else if (a == "--crash-leader-at") {
      crash_at = n;
    } else if (a == "--restart-follower-at") {
      restart_at = n;
    } else if (a == "--snapshot-every") {
      o.multipaxos.snapshot_every = n;
      o.nopaxos.snapshot_every = n;
    } else {
      std::fprintf(stderr, "sluice-kv: unknown option '%s' (try --help)\n", a.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "sluice-kv: bad value '%s' for %s (replicas: odd, 1..15; drop: 0 <= P < 1; "
                   "try --help)\n",
                   v, a.c_str());
      return 2;
    }
  }
  kv::SimCluster cluster(o);
  // The two faults in time order.
  auto crash_leader = [&] {
    cluster.net().run(crash_at - cluster.net().now(), [] { return false; });
    int l = cluster.leader();
    if (l >= 0) {
      std::printf("crashing leader replica %d at %llu ms\n", l,
                  static_cast<unsigned long long>(cluster.net().now()));
      cluster.net().crash(static_cast<uint32_t>(l));
    }
  };
  auto restart_follower = [&] {
    cluster.net().run(restart_at - cluster.net().now(), [] { return false; });
    const int l = cluster.leader();
    for (uint32_t k = 1; k <= o.replicas && o.replicas > 1; ++k) {
      const uint32_t r = (static_cast<uint32_t>(l < 0 ? 0 : l) + k) % o.replicas;
      if (static_cast<int>(r) == l || cluster.net().is_down(r)) continue;
      std::printf("restarting follower replica %u without its state at %llu ms\n", r,
                  static_cast<unsigned long long>(cluster.net().now()));
      cluster.restart(r);
      break;
    }
  };
  if (crash_at > 0 && (restart_at == 0 || crash_at <= restart_at)) crash_leader();
  if (restart_at > 0) restart_follower();
  if (crash_at > restart_at && restart_at > 0) crash_leader();
  bool done = cluster.run_until_done(600000);
  cluster.quiesce();
  std::string rep = cluster.check_replicas();
  std::string res = cluster.check_results();
  uint64_t completed = cluster.history().size();
  std::printf("protocol %s, %u replicas, %u clients x %u ops, drop %.3f, seed %llu\n",
              o.protocol == kv::Protocol::kMultiPaxos ? "multipaxos" : "nopaxos", o.replicas,
              o.clients, o.ops_per_client, o.sim.drop_rate,
              static_cast<unsigned long long>(o.seed));
  std::printf("completed %llu ops in %llu simulated ms; messages delivered %llu, lost %llu\n",
              static_cast<unsigned long long>(completed),
              static_cast<unsigned long long>(cluster.net().now()),
              static_cast<unsigned long long>(cluster.net().delivered()),
              static_cast<unsigned long long>(cluster.net().dropped()));
  for (uint32_t r = 0; r < o.replicas; ++r) {
    if (cluster.net().is_down(r)) {
      std::printf("replica %u: crashed\n", r);
      continue;
    }
    std::printf("replica %u: applied %zu entries, %zu keys, digest %016llx\n", r,
                cluster.store(r).applied().size(), cluster.store(r).size(),
                static_cast<unsigned long long>(cluster.store(r).digest()));
  }
  std::printf("replicas agree: %s\n", rep.empty() ? "yes" : rep.c_str());
  std::printf("history linearizable (log as witness): %s\n", res.empty() ? "yes" : res.c_str());
  if (!done) std::printf("FAILED: clients did not finish\n");
  std::string why;
  if (!history.empty() && !kv::write_history(history, cluster.history(), &why)) {
    std::fprintf(stderr, "sluice-kv: %s\n", why.c_str());
    return 1;
  }
  return done && rep.empty() && res.empty() ? 0 : 1;
}
