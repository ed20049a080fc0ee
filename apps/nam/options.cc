// The command lines of sluice-nam and sluice-nam-olap (options.h) in CLI11.
#include "options.h"

#include <sluice/job.h>
#include <sluice/job_cli.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <sstream>

namespace sluice::nam {

namespace {

template <class T>
CLI::Option* add_count(CLI::App& app, const std::string& name, T& value, const std::string& help) {
  return app.add_option(name, value, help)->transform(whole_number())->capture_default_str();
}

// A real number; "--selectivity wants a number, not 'half'".
CLI::Option* add_real(CLI::App& app, const std::string& name, double* value,
                      const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [name, value](const std::string& text) {
            char* end = nullptr;
            errno = 0;
            const double x = std::strtod(text.c_str(), &end);
            if (errno != 0 || end == text.c_str() || *end != '\0')
              throw UsageError(name + " wants a number, not '" + text + "'");
            *value = x;
          },
          help)
      ->type_name("X");
}

// The flags both commands share: which ranks are memory servers (the rest
// compute), the same way in both.
void add_roles(CLI::App& app, uint32_t* memory_servers) {
  add_count(app, "--memory-servers", *memory_servers,
            "Memory-server ranks 0 .. M-1; the other ranks compute (the job needs more ranks "
            "than M)")
      ->group("Roles");
}

void need(bool ok, const std::string& why) {
  if (!ok) throw UsageError(why);
}

}  // namespace

void add_options(CLI::App& app, Options* options) {
  Options& o = *options;
  WorkloadOptions& w = o.workload;
  app.footer(
      "Ranks 0 .. M-1 are memory servers (they expose their tables as one-sided regions and run "
      "no transaction code); the other ranks run --clients closed-loop transaction clients each "
      "(snapshot isolation with RSI: one-sided reads, one compare-and-swap per written record, "
      "versions installed with one-sided writes). The first surviving compute rank checks the "
      "workload's invariants at the end and prints throughput, latency and abort rate.");
  add_roles(app, &o.memory_servers);
  add_count(app, "--clients", o.clients, "Client threads per compute rank, 1 .. 64")
      ->group("Roles");
  app.add_option("--protocol", o.protocol,
                 "rsi: one-sided RSI; 2pc: the baseline, snapshot isolation with a message-based "
                 "two-phase commit on shuffle flows (the memory servers become resource "
                 "managers); both: RSI, then 2PC on a fresh copy of the data, in one job, and the "
                 "throughput ratio")
      ->capture_default_str()
      ->group("Roles");
  add_count(app, "--versions", o.versions, "Versions kept per record, >= 2")->group("Roles");
  add_count(app, "--overflow-entries", o.overflow_entries,
            "RSI: an overflow area of E old versions per table and memory server, where a "
            "writer moves the version it overwrites if another client's snapshot still sees it "
            "(0: none)")
      ->group("Roles");
  add_count(app, "--max-timestamps", o.max_timestamps,
            "Size of the timestamp vector (on rank 0; every commit, abort and given-up "
            "timestamp uses one)")
      ->group("Roles");
  add_count(app, "--spare-clients", o.spare_clients,
            "S spare client slots, which a compute rank started again (sluice run "
            "--restarts) takes to run its clients in place of those it lost (up to --clients of "
            "them); 0: none (a restarted rank then leaves at once unless a free slot is left, "
            "as an elastic job's vacancies' are to a process that joins it)")
      ->group("Roles");
  add_count(app, "--recovery-timeout-ms", o.recovery_timeout_ms,
            "A client silent this long with a pending timestamp or a lock is presumed dead and "
            "recovered")
      ->group("Roles");
  app.add_flag("--no-recovery", o.no_recovery,
               "Fail the run, naming the client, where a client that died would be recovered "
               "(RSI: a timestamp or lock of its held past --recovery-timeout-ms; 2PC: its "
               "rank's requests ended abnormally): fail-stop, as without sluice-nam's recovery")
      ->group("Roles");
  const char* workload = "Workload";
  app.add_option("--workload", w.workload,
                 "checkout: TPC-W-like, read 3 products, insert an order and 3 order lines, "
                 "lower 3 stocks; list-append: Elle's list-append on --keys lists; write-skew: "
                 "read 2 lists, append to one")
      ->capture_default_str()
      ->group(workload);
  add_count(app, "--products", w.products, "Products (memory: N x V x (record bytes + 16))")
      ->group(workload);
  add_count(app, "--record-bytes", w.record_bytes, "Product record size, at least 16")
      ->group(workload);
  add_count(app, "--hot-products", w.hot_products,
            "Checkouts pick among the first H products only (contention)")
      ->group(workload);
  add_count(app, "--browse-percent", w.browse_percent, "Share of read-only browsing transactions")
      ->group(workload);
  add_count(app, "--browse-reads", w.browse_reads, "Products a browsing transaction reads")
      ->group(workload);
  add_count(app, "--keys", w.keys, "Lists of list-append / write-skew")->group(workload);
  add_count(app, "--list-capacity", w.list_capacity, "Values per list (a full list is only read)")
      ->group(workload);
  add_count(app, "--txns", w.txns, "Committed transactions per client (0: use --seconds)")
      ->group(workload);
  add_real(app, "--seconds", &w.seconds, "Run this long instead (with --txns 0)")->group(workload);
  add_count(app, "--max-orders", w.max_orders,
            "Orders table size (default clients x txns, or 200000 with --seconds)")
      ->group(workload);
  add_count(app, "--think-us", w.think_us, "Sleep between a transaction's reads and its commit")
      ->group(workload);
  add_count(app, "--long-read-percent", w.long_read_percent,
            "list-append: share of long read-only transactions that read every list, sleeping "
            "--long-read-think-us between reads")
      ->group(workload);
  add_count(app, "--long-read-think-us", w.long_read_think_us, "See --long-read-percent")
      ->group(workload);
  app.add_flag_callback(
         "--no-read-only-begin", [&w] { w.read_only_begin = false; },
         "Start read-only transactions with begin(), not begin_read_only() (RSI: they then hold "
         "their next timestamp pending, and so hold back the writers)")
      ->group(workload);
  app.add_option("--history", o.history,
                 "Each client writes its transactions as Elle JSON lines to "
                 "PREFIX.<client>.jsonl (list-append, write-skew)")
      ->type_name("PREFIX")
      ->group("Output");
  app.add_flag("--timeline", o.timeline,
               "Also print the reporting clients' commits per 100 ms of the run, as a line "
               "'timeline: {\"start_unix\":S,\"interval_ms\":100,\"commits\":[...]}' "
               "(bench/nam/client_loss.py reads it)")
      ->group("Output");

  app.callback([options] {
    const Options& o = *options;
    const WorkloadOptions& w = o.workload;
    need(o.protocol == "rsi" || o.protocol == "2pc" || o.protocol == "both",
         "--protocol wants rsi, 2pc or both, not '" + o.protocol + "'");
    need(o.protocol != "both" || o.history.empty(), "--history needs one protocol (rsi or 2pc)");
    need(w.workload == "checkout" || w.workload == "list-append" || w.workload == "write-skew",
         "--workload wants checkout, list-append or write-skew, not '" + w.workload + "'");
    need(o.memory_servers >= 1, "--memory-servers must be at least 1");
    need(o.clients >= 1 && o.clients <= 64, "--clients must be 1 .. 64");
    need(o.versions >= 2,
         "--versions must be at least 2 (a reader must never see the version being replaced)");
    need(w.record_bytes >= 16, "--record-bytes must be at least 16 (stock and price)");
    need(w.workload != "checkout" || w.products >= 3,
         "--products must be at least 3 (a checkout buys 3)");
    need(w.workload == "checkout" || w.keys >= 2, "--keys must be at least 2");
    need(w.txns != 0 || w.seconds > 0, "--txns 0 needs --seconds");
    need(w.browse_percent <= 100, "--browse-percent must be at most 100");
    need(w.long_read_percent <= 100, "--long-read-percent must be at most 100");
    need(w.long_read_percent == 0 || w.workload == "list-append",
         "--long-read-percent is for --workload list-append");
    need(o.overflow_entries <= (1u << 24), "--overflow-entries must be at most 16777216");
    need(w.browse_reads <= 64, "--browse-reads must be at most 64");
    need(o.max_timestamps >= 64, "--max-timestamps must be at least 64");
    need(o.spare_clients == 0 || o.protocol != "both",
         "--spare-clients needs one protocol, rsi or 2pc (with both, a new process takes no "
         "slot)");
    need(o.spare_clients <= 1024, "--spare-clients must be at most 1024");
  });
}

namespace olap {

void add_olap_options(CLI::App& app, OlapOptions* options) {
  OlapOptions& o = *options;
  o.join.input.r_rows = 1000000;
  o.join.input.s_rows = 0;  // = r unless given
  o.agg.input.rows = 1000000;
  o.agg.input.groups = 1000;
  app.footer(
      "join: R join S on a 64-bit key. Algorithms: rrj (RDMA radix join: partitions written "
      "into the memory servers with one-sided writes, joined in cache-sized blocks), ghj (grace "
      "hash join over shuffle flows), ghj-bloom (the same after a Bloom-filter semi-join "
      "reduction whose filters go over a replicate flow), flow-radix (the flow radix join of "
      "apps/join, run by the compute ranks).\n"
      "agg: SELECT key, COUNT(*), SUM(value) GROUP BY key. Algorithms: rdma (cache-sized "
      "pre-aggregation spilling into overflow partitions on the memory servers, then parallel "
      "post-aggregation), hierarchical (local aggregation, then a shuffle flow to each group's "
      "owner, post-aggregation).\n"
      "Ranks 0 .. M-1 are memory servers (they hold the input and the partitions in one-sided "
      "regions and run no operator code); the other ranks run --threads compute threads each. "
      "Every algorithm named runs in the same job on the same data, and rank 0 checks each "
      "result against a single-process reference (match count and checksum; groups, rows and "
      "checksum).");
  app.add_option("kind", o.kind, "join or agg")
      ->required()
      ->check(CLI::Validator(
          [](std::string& k) {
            return k == "join" || k == "agg" ? std::string()
                                             : "must be join or agg, not '" + k + "'";
          },
          "join|agg"));
  add_roles(app, &o.memory_servers);
  app.get_option("--threads")
      ->description("Compute threads per compute rank, 1 .. 64")
      ->check(CLI::Range(1, 64))
      ->group("Roles");
  auto algorithms_text = std::make_shared<std::string>();
  app.add_option("--algorithms", *algorithms_text,
                 "Which to run, in this order, e.g. rrj,ghj (default: all of the kind)")
      ->type_name("A,B")
      ->group("Roles");
  const char* join = "Join input";
  add_count(app, "--r", o.join.input.r_rows, "Rows of R (16-byte tuples)")->group(join);
  auto* s =
      add_count(app, "--s", o.join.input.s_rows, "Rows of S (default: as many as R)")->group(join);
  add_real(app, "--selectivity", &o.join.input.selectivity,
           "Share of each relation with a join partner: 0 .. 1 (default 1; the paper's runs use "
           "0.25, 0.5, 0.75 and 1)")
      ->group(join);
  add_count(app, "--bloom-bits", o.join.bloom_bits_per_key, "Bloom filter bits per key")
      ->group(join);
  const char* agg = "Aggregation input";
  add_count(app, "--rows", o.agg.input.rows, "Rows (16-byte {key, value})")->group(agg);
  add_count(app, "--groups", o.agg.input.groups, "Distinct group keys (the paper: 1 .. 64M)")
      ->group(agg);
  add_count(app, "--table-entries", o.agg.table_entries,
            "Groups in a thread's pre-aggregation table")
      ->group(agg);
  const char* both = "Both";
  app.add_option_function<uint32_t>(
         "--partitions", [&o](uint32_t p) { o.join.partitions = o.agg.partitions = p; },
         "Partitions on the memory servers (default: from the input size)")
      ->transform(whole_number())
      ->group(both);
  app.add_option_function<uint32_t>(
         "--buffer-bytes", [&o](uint32_t b) { o.join.chunk_bytes = o.agg.chunk_bytes = b; },
         "Software-managed buffer = chunk in the store (default 2048)")
      ->transform(whole_number())
      ->group(both);
  add_real(app, "--space-factor", &o.join.space_factor,
           "Partition space on the memory servers, relative to the input (default 1.25; running "
           "out is an error naming this flag)")
      ->group(both);
  app.add_option_function<std::string>(
         "--shipping",
         [&o](const std::string& how) {
           if (how != "background" && how != "inline")
             throw UsageError("--shipping wants background or inline, not '" + how + "'");
           o.join.background = o.agg.background = how == "background";
         },
         "background (default): a shipper thread per compute thread writes full buffers into "
         "the memory servers while partitioning goes on; inline: the partitioning thread writes "
         "them itself")
      ->group(both);
  app.add_option("--dump", o.dump,
                 "Memory servers write what they hold as CSV into DIR (for DuckDB)")
      ->type_name("DIR")
      ->group("Output");

  app.callback([options, s, algorithms_text] {
    OlapOptions& o = *options;
    if (s->count() == 0) o.join.input.s_rows = o.join.input.r_rows;
    o.agg.space_factor = o.join.space_factor;
    const std::vector<std::string> all =
        o.kind == "join" ? std::vector<std::string>{"rrj", "ghj", "ghj-bloom", "flow-radix"}
                         : std::vector<std::string>{"rdma", "hierarchical"};
    o.algorithms.clear();
    std::stringstream in(*algorithms_text);
    for (std::string item; std::getline(in, item, ',');) o.algorithms.push_back(item);
    if (algorithms_text->empty()) o.algorithms = all;
    need(!o.algorithms.empty(), "--algorithms names none");
    std::string list;
    for (const std::string& k : all) list += (list.empty() ? "" : ", ") + k;
    for (size_t i = 0; i < o.algorithms.size(); ++i) {
      const std::string& name = o.algorithms[i];
      need(std::find(all.begin(), all.end(), name) != all.end(),
           "--algorithms: '" + name + "' is not one of " + list + " (for " + o.kind + ")");
      need(std::find(o.algorithms.begin(), o.algorithms.begin() + i, name) ==
               o.algorithms.begin() + i,
           "--algorithms names '" + name + "' twice");
    }
    need(o.memory_servers >= 1, "--memory-servers must be at least 1");
    need(o.join.input.selectivity >= 0 && o.join.input.selectivity <= 1,
         "--selectivity must be within 0 .. 1");
    need(o.join.bloom_bits_per_key >= 1 && o.join.bloom_bits_per_key <= 64,
         "--bloom-bits must be 1 .. 64");
    need(o.agg.input.groups >= 1, "--groups must be at least 1");
    need(o.agg.table_entries >= 16, "--table-entries must be at least 16");
    need(o.join.partitions <= 65536, "--partitions must be at most 65536");
    need(
        o.join.chunk_bytes >= 64 && o.join.chunk_bytes % 8 == 0 && o.join.chunk_bytes <= (1u << 20),
        "--buffer-bytes must be a multiple of 8 within 64 .. 1048576");
    need(o.join.space_factor >= 1.0 && o.join.space_factor <= 16,
         "--space-factor must be within 1 .. 16");
  });
}

}  // namespace olap

}  // namespace sluice::nam
