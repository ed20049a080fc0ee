// The command line of sluice-kv (options.h) in CLI11.
#include "options.h"

#include <sluice/job.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace kv {

namespace {

// --max-value-bytes at most: a flow's segment holds one such value and a
// message (flow_job.cc), and segments are at most 64 MiB.
constexpr uint64_t kMaxValueBytes = uint64_t{32} << 20;

// A size in bytes as Redis's settings write it: a number, with kb, mb or
// gb (powers of 1024; k, m, g too), any case.
bool parse_bytes(std::string text, uint64_t* out) {
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
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v > UINT64_MAX / unit) return false;
  *out = v * unit;
  return true;
}

// A size flag (parse_bytes); `positive`: 0 is refused.
CLI::Option* add_bytes(CLI::App& app, const std::string& name, bool positive,
                       std::function<void(uint64_t)> set, const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [name, positive, set = std::move(set)](const std::string& text) {
            uint64_t bytes = 0;
            if (!parse_bytes(text, &bytes))
              throw CLI::ValidationError(name,
                                         "takes a size in bytes (e.g. 1048576, 512kb, "
                                         "64mb), not '" +
                                             text + "'");
            if (positive && bytes == 0) throw CLI::ValidationError(name, "must be above 0");
            set(bytes);
          },
          help)
      ->type_name("BYTES");
}

CLI::Validator odd_replicas() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const unsigned long n = std::strtoul(text.c_str(), nullptr, 10);
        return n >= 1 && n <= 15 && n % 2 == 1 ? "" : "replicas are odd, 1 .. 15, not " + text;
      },
      "ODD 1..15");
}

// A path option's value must not be empty (`what`: its type name).
CLI::Validator not_empty(const std::string& what) {
  return CLI::Validator(
      [](std::string& v) { return v.empty() ? std::string("is empty") : std::string(); }, what);
}

Protocol protocol_named(const std::string& name) {
  return name == "nopaxos" ? Protocol::kNoPaxos : Protocol::kMultiPaxos;
}

// The options `run` and `simulate` share, with their meanings.
void add_protocol(CLI::App& app, Protocol* protocol, uint32_t* replicas) {
  app.add_option_function<std::string>(
         "--protocol", [protocol](const std::string& p) { *protocol = protocol_named(p); },
         "multipaxos (default) or nopaxos")
      ->check(CLI::IsMember({"multipaxos", "nopaxos"}));
  app.add_option("--replicas", *replicas, "2f+1 replicas")
      ->check(odd_replicas())
      ->capture_default_str();
}

void add_workload(CLI::App& app, std::string* workload, bool* zipf, uint32_t* value_bytes) {
  app.add_option("--workload", *workload,
                 "mixed (put 40%, get 35%, cas 20%, delete 5%), or YCSB's a (50% get, 50% put), "
                 "b (95/5) or c (gets only)")
      ->check(CLI::IsMember({"mixed", "a", "b", "c"}))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--distribution", [zipf](const std::string& d) { *zipf = d == "zipf"; },
         "Keys uniform (default) or zipf (YCSB's scrambled Zipfian, 0.99)")
      ->check(CLI::IsMember({"uniform", "zipf"}));
  app.add_option("--value-bytes", *value_bytes, "YCSB workloads' value size")
      ->check(CLI::Range(0u, 1024u * 1024u))
      ->capture_default_str();
}

// SLUICE_TEST_KV_HOOKS=1: the test switches below are offered.
bool test_hooks_enabled() {
  const char* v = std::getenv("SLUICE_TEST_KV_HOOKS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void add_run(CLI::App& app, RunCommand* c) {
  FlowJobOptions& o = c->job;
  GatewayOptions& g = o.gateway;
  app.footer(
      "Ranks 0 .. replicas-1 are replicas, every further rank a closed-loop client (or a RESP "
      "gateway); protocol messages travel over sluice flows. At the end the lowest live rank "
      "checks that all replicas applied the same log with the same digest, that every operation "
      "completed exactly once, and that the log linearizes the history. A replica killed and "
      "started again (sluice run --keep-going --restarts K) recovers its state from the others; "
      "a lost replica's ranks go on without it while a majority is left (docs/kv.md). "
      "--transport, --setup-timeout-ms and --peer-timeout-ms: see sluice-kv --help.");
  add_protocol(app, &o.protocol, &o.replicas);
  app.add_option("--ops", o.ops_per_client, "Operations per client")->capture_default_str();
  app.add_option("--clients-per-rank", o.clients_per_rank,
                 "Closed-loop clients on each client rank")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--keys", o.keys, "Distinct keys")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Workload seed")->capture_default_str();
  app.add_option("--retry-ms", o.retry_ms, "Client retry timeout")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--election-timeout-ms", o.election_timeout_ms,
                 "Follower wait without a leader before phase 1 or a view change (plus a random "
                 "share of up to as much again)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--trace-retries", o.trace_retries, "Clients print every retry to stderr");
  add_workload(app, &o.workload, &o.zipf, &o.value_bytes);
  app.add_option_function<uint16_t>(
      "--resp-port",
      [&o](uint16_t port) {
        o.resp = true;
        o.gateway.port = port;
      },
      "Client ranks serve the Redis protocol (redis-cli, redis-benchmark) on TCP port P + client "
      "index instead of running a workload (0: ports the kernel picks; each is printed)");
  app.add_option("--resp-bind", g.bind,
                 "The address to listen on (0.0.0.0 or :: is every interface, with a warning)")
      ->capture_default_str();
  auto* pass_file = app.add_option_function<std::string>(
      "--requirepass-file",
      [&g](const std::string& path) {
        std::ifstream in(path);
        std::string line;
        if (!in || !std::getline(in, line) || line.empty() || line == "\r")
          throw sluice::UsageError("--requirepass-file " + path +
                                   ": cannot read it, or its first line is empty; write the "
                                   "password there");
        if (line.back() == '\r') line.pop_back();
        g.requirepass = line;
      },
      "Clients must AUTH with the first line of FILE");
  app.add_option("--requirepass", g.requirepass,
                 "The same, on the command line (visible to every user)")
      ->check(CLI::Validator(
          [](std::string& p) { return p.empty() ? std::string("--requirepass is empty") : ""; },
          "PASS"))
      ->excludes(pass_file);
  app.add_option_function<std::string>(
         "--protected-mode", [&g](const std::string& v) { g.protected_mode = v == "yes"; },
         "Without a password, serve loopback clients only (default yes)")
      ->check(CLI::IsMember({"yes", "no"}));
  app.add_option_function<std::string>(
         "--enable-shutdown",
         [&g](const std::string& v) {
           g.shutdown = v == "no"      ? ShutdownFrom::kNobody
                        : v == "local" ? ShutdownFrom::kLocal
                                       : ShutdownFrom::kAnyone;
         },
         "Who may end the job with SHUTDOWN: nobody (no, the default), loopback clients "
         "(local), anyone authenticated (yes)")
      ->check(CLI::IsMember({"no", "local", "yes"}));
  app.add_option("--maxclients", g.maxclients, "Connections per gateway")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-blocked-clients", g.max_blocked,
                 "Connections one gateway parks on a blocking command (BLPOP ...); one more "
                 "gets an error")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_bytes(
      app, "--maxmemory", false, [&o](uint64_t b) { o.maxmemory = b; },
      "The store's data at most; writes past it get -OOM (default 0: no limit). BYTES may "
      "end in kb, mb or gb");
  add_bytes(
      app, "--maxmemory-clients", false, [&g](uint64_t b) { g.maxmemory_clients = b; },
      "All connections' buffers at most; past it the client with the most is closed "
      "(default 64mb; 0: none)");
  auto* query_limit = add_bytes(
      app, "--client-query-buffer-limit", true, [&g](uint64_t b) { g.query_buffer_limit = b; },
      "An unfinished request at most (default 1mb, and at least the largest argument "
      "and 64kb)");
  add_bytes(
      app, "--client-output-buffer-limit", true, [&g](uint64_t b) { g.output_buffer_limit = b; },
      "A client's unsent replies at most; past it it is closed (default 32mb)");
  auto* bulk = add_bytes(
      app, "--proto-max-bulk-len", true, [&g](uint64_t b) { g.max_bulk = b; },
      "One argument at most, refused from its header (default: what "
      "--max-value-bytes allows)");
  add_bytes(
      app, "--max-value-bytes", true,
      [&o](uint64_t b) {
        if (b > kMaxValueBytes)
          throw CLI::ValidationError("--max-value-bytes", "is at most 33554432 (32mb)");
        o.max_entry_bytes = b + 1024;
      },
      "Values up to this size, with keys up to 1 KiB (default 64kb). Every flow segment holds "
      "one such command, so it costs memory: 512kb takes about 200 MB more per rank over shm");
  app.add_option("--window", o.window,
                 "Operations each client keeps in flight, 1 .. 256 (default: 1 for workloads, "
                 "closed-loop; 256 behind --resp-port)")
      ->check(CLI::Range(uint32_t{1}, static_cast<uint32_t>(kClientWindow)));
  app.add_option("--batch", o.batch,
                 "Commands per request message at most (NOPaxos: per ordered record); 0: as many "
                 "as 8 KiB (NOPaxos) or 32 KiB (Multi-Paxos) of commands hold")
      ->check(CLI::Range(uint32_t{0}, static_cast<uint32_t>(kClientWindow)))
      ->capture_default_str();
  app.add_option("--history", o.history,
                 "Every completed operation as JSON lines (for kv-porcupine): a workload's lowest "
                 "live rank writes them at the end; behind --resp-port each gateway writes its "
                 "own as they complete, to FILE (one gateway rank) or FILE.<rank>");
  app.add_option("--snapshot-every", o.snapshot_every,
                 "A snapshot of the store every N applied slots (NOPaxos: once final); 0: keep "
                 "the whole log")
      ->capture_default_str();
  auto* data_dir =
      app.add_option("--data-dir", o.data_dir,
                     "Each replica keeps its write-ahead log and snapshot in DIR/rank-N and a job "
                     "started again with the same DIR starts from them (either protocol, behind "
                     "--resp-port; docs/kv.md, Durability)")
          ->type_name("DIR")
          ->check(not_empty("DIR"));
  app.add_option_function<std::string>(
         "--fsync",
         [&o](const std::string& v) {
           o.fsync = v == "always" ? FsyncMode::kAlways
                     : v == "no"   ? FsyncMode::kNo
                                   : FsyncMode::kEverySec;
         },
         "With --data-dir, as Redis's appendfsync: always (on disk before a replica "
         "answers), everysec (the default: synced once a second), no (the kernel decides)")
      ->check(CLI::IsMember({"always", "everysec", "no"}))
      ->needs(data_dir);
  // The test switches exist only with SLUICE_TEST_KV_HOOKS=1 in the
  // environment (the tests set it): they are not in --help, and a run
  // without it refuses them as unknown options.
  if (test_hooks_enabled()) {
    auto* stall = app.add_option("--test-stall-leader-ms", c->stall_ms,
                                 "Test switch: rank 0, the first leader, stalls its worker thread "
                                 "for MS once it applied --test-stall-after entries");
    auto* sigstop = app.add_option_function<uint64_t>(
        "--test-sigstop-leader-ms",
        [c](uint64_t ms) {
          c->stall_ms = ms;
          c->sigstop = true;
        },
        "Test switch: the same, but the whole process stops (SIGSTOP) and a forked child continues "
        "it after MS");
    sigstop->excludes(stall);
    app.add_option("--test-mark-applied", c->mark_applied,
                   "Test switch: the leader prints once that it has applied N entries (a fault "
                   "test's launcher times its kill from that line)");
    auto* after = app.add_option("--test-stall-after", c->stall_after,
                                 "Test switch: entries the leader applies before it stops");
    stall->needs(after);
    sigstop->needs(after);
    app.add_option(
           "--test-drop", o.test_drop,
           "Test switch: every rank loses this fraction of the protocol messages it receives")
        ->check(CLI::Validator(
            [](std::string& p) {
              const double v = std::strtod(p.c_str(), nullptr);
              return v >= 0 && v < 1 ? std::string() : "is a fraction, 0 <= P < 1";
            },
            "0<=P<1"));
    app.add_option("--test-drop-seed", o.test_drop_seed, "Test switch: seeds the losses");
    app.add_flag("--test-await-rejoin", o.test_await_rejoin,
                 "Test switch: a finished client says so only once a rank was restarted and every "
                 "rank is back in its epoch (at most 60 s)");
    app.add_flag("--test-wal-hold-unsynced", o.test_hold_unsynced,
                 "Test switch: a replica's log keeps what it did not sync in its own memory, so "
                 "that a SIGKILL loses it as a power cut would")
        ->needs(data_dir);
    app.add_option("--test-wal-sync-delay-us", o.test_sync_delay_us,
                   "Test switch: every fdatasync of a replica's log takes this many microseconds "
                   "longer (a slower disk, for benchmarks)")
        ->needs(data_dir);
  }
  // The limits left unsaid follow from the others; then they must fit.
  app.callback([c, query_limit, bulk] {
    FlowJobOptions& o = c->job;
    GatewayOptions& g = o.gateway;
    if (!o.data_dir.empty() && !o.resp)
      throw sluice::UsageError(
          "--data-dir without --resp-port: only a RESP job keeps its data across runs (a "
          "workload's end-of-run checks cover one run); add --resp-port");
    // Unless given, an argument may be as long as the largest command, and a
    // request hold one such argument and its key.
    if (bulk->count() == 0) g.max_bulk = o.max_entry_bytes;
    if (query_limit->count() == 0)
      g.query_buffer_limit = std::max<size_t>(g.query_buffer_limit, g.max_bulk + 64 * 1024);
    if (!o.resp && uint64_t{o.value_bytes} + 64 > o.max_entry_bytes)
      throw sluice::UsageError("--value-bytes " + std::to_string(o.value_bytes) +
                               " is over what --max-value-bytes lets the job carry (" +
                               std::to_string(o.max_entry_bytes - 1024) +
                               " with its key); raise --max-value-bytes");
    if (g.max_bulk > g.query_buffer_limit)
      throw sluice::UsageError("--proto-max-bulk-len " + std::to_string(g.max_bulk) +
                               " is over --client-query-buffer-limit " +
                               std::to_string(g.query_buffer_limit) +
                               ": no request could carry such an argument");
  });
}

void add_simulate(CLI::App& app, SimulateCommand* c) {
  ClusterOptions& o = c->cluster;
  o.clients = 4;
  o.ops_per_client = 200;
  o.keys = 8;
  o.sim.drop_rate = 0.01;
  app.footer(
      "Runs the store (2f+1 replicas, closed-loop clients) on a seeded simulated network with "
      "message loss, then checks that every replica applied the same log with the same store "
      "digest and that the log is a linearization of the clients' history. Exit status 0 when "
      "all checks pass.");
  add_protocol(app, &o.protocol, &o.replicas);
  app.add_option("--clients", o.clients, "Closed-loop clients")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--ops", o.ops_per_client, "Operations per client")->capture_default_str();
  app.add_option("--keys", o.keys, "Distinct keys")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--drop", o.sim.drop_rate, "Probability that a message is lost, 0 <= P < 1")
      ->check(CLI::Validator(
          [](std::string& p) {
            const double v = std::strtod(p.c_str(), nullptr);
            return v >= 0 && v < 1 ? std::string() : "is a probability, 0 <= P < 1";
          },
          "0<=P<1"))
      ->capture_default_str();
  app.add_option_function<uint64_t>(
      "--seed",
      [&o](uint64_t seed) {
        o.seed = seed;
        o.sim.seed = seed;
      },
      "Seed of the network and the workload (default 1)");
  app.add_option("--crash-leader-at", c->crash_at,
                 "Crash the leader at simulated time MS (default: never)");
  app.add_option("--restart-follower-at", c->restart_at,
                 "Restart a follower without its state at simulated time MS: it recovers from "
                 "the others (default: never)");
  app.add_option_function<uint64_t>(
      "--snapshot-every",
      [&o](uint64_t n) {
        o.multipaxos.snapshot_every = n;
        o.nopaxos.snapshot_every = n;
      },
      "As for run");
  add_workload(app, &o.workload, &o.zipf, &o.value_bytes);
  app.add_option("--history", c->history,
                 "Write every completed operation to FILE (JSON lines, for kv-porcupine)")
      ->check(not_empty("FILE"));
}

}  // namespace

void add_commands(CLI::App& app, Commands* commands) {
  app.require_subcommand(1);
  CLI::App* run =
      app.add_subcommand("run", "One rank of a job: sluice run -n N -- sluice-kv run [options]");
  // The job's flags (--transport, ...) belong to the command; `run` passes them up.
  run->fallthrough();
  add_run(*run, &commands->run);
  CLI::App* simulate = app.add_subcommand(
      "simulate", "Either protocol on the deterministic simulated network, in this process");
  add_simulate(*simulate, &commands->simulate);
  simulate->callback([commands] { commands->simulating = true; });
}

}  // namespace kv
