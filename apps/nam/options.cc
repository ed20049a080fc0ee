#include "options.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "flag_values.h"

namespace sluice::nam {

namespace {

[[noreturn]] void usage(const std::string& why, int code = 2) {
  if (code != 0) {
    std::fprintf(stderr, "sluice-nam: %s (--help lists the options)\n", why.c_str());
    std::exit(code);
  }
  std::printf(
      "usage: sluice run -n RANKS -- sluice-nam [options]\n"
      "  a database on network-attached memory: ranks 0 .. M-1 are memory servers (they expose\n"
      "  their tables as one-sided regions and run no transaction code), the other ranks run\n"
      "  --clients closed-loop transaction clients each (snapshot isolation with RSI: one-sided\n"
      "  reads, one compare-and-swap per written record, versions installed with one-sided "
      "writes).\n"
      "  The first compute rank checks the workload's invariants at the end and prints\n"
      "  throughput, latency and abort rate.\n"
      "roles and protocol:\n"
      "  --memory-servers M   memory-server ranks (default 1); RANKS must exceed M\n"
      "  --clients C          client threads per compute rank (default 1)\n"
      "  --protocol P         rsi (default): one-sided RSI; 2pc: the baseline, snapshot isolation "
      "with\n"
      "                       a message-based two-phase commit on shuffle flows (the memory "
      "servers\n"
      "                       become resource managers); both: RSI, then 2PC on a fresh copy of "
      "the\n"
      "                       data, in one job, and the throughput ratio\n"
      "  --versions V         versions kept per record, >= 2 (default 2)\n"
      "  --overflow-entries E RSI: an overflow area of E old versions per table and memory\n"
      "                       server, where a writer moves the version it overwrites if another\n"
      "                       client's snapshot still sees it, so a long reader finds it there\n"
      "                       instead of aborting too-old (default 0: none)\n"
      "  --max-timestamps N   size of the timestamp vector (default 134217728, 32 MiB on rank 0;\n"
      "                       every commit, abort and given-up timestamp uses one)\n"
      "  --recovery-timeout-ms T  a client silent this long with a pending timestamp or a lock\n"
      "                       is presumed dead and recovered (default 2000)\n"
      "workload:\n"
      "  --workload W         checkout (default): TPC-W-like, read 3 products, insert an order "
      "and\n"
      "                       3 order lines, lower 3 stocks; list-append: Elle's list-append on\n"
      "                       --keys lists; write-skew: read 2 lists, append to one\n"
      "  --products N         products (default 1000000; memory: N x V x (record bytes + 16))\n"
      "  --record-bytes B     product record size (default 1024, at least 16)\n"
      "  --hot-products H     checkouts pick among the first H products only (contention)\n"
      "  --browse-percent P   share of read-only browsing transactions (default 0)\n"
      "  --browse-reads R     products a browsing transaction reads (default 5)\n"
      "  --keys K             lists of list-append / write-skew (default 8)\n"
      "  --list-capacity N    values per list (default 64; a full list is only read)\n"
      "  --txns N             committed transactions per client (default 1000; 0: use --seconds)\n"
      "  --seconds S          run this long instead (with --txns 0)\n"
      "  --max-orders N       orders table size (default clients x txns, or 200000 with "
      "--seconds)\n"
      "  --think-us U         sleep between a transaction's reads and its commit (default 0)\n"
      "  --long-read-percent P  list-append: share of long read-only transactions that read\n"
      "                       every list, sleeping --long-read-think-us U between reads\n"
      "  --no-read-only-begin start read-only transactions with begin(), not\n"
      "                       begin_read_only() (RSI: they then hold their next timestamp\n"
      "                       pending, and so hold back the writers)\n"
      "  --seed N             random seed (default 1)\n"
      "output:\n"
      "  --history PREFIX     each client writes its transactions as Elle JSON lines to\n"
      "                       PREFIX.<client>.jsonl (list-append, write-skew)\n"
      "  --json               also print one JSON line with the results\n");
#ifdef SLUICE_NAM_TEST_HOOKS
  std::printf(
      "test hooks (this build only):\n"
      "  --test-kill-client J --test-kill-at lock|commit-bit|prepared|partial-commit\n"
      "      [--test-kill-on-commit N]  client J's process kills itself (SIGKILL) on its N-th\n"
      "                       commit: RSI after locking / after setting its timestamp bit; 2PC\n"
      "                       after every participant voted yes / after one of two committed\n"
      "  --test-kill-memory-server R --test-kill-after-ms T   memory server R dies T ms in\n");
#endif
  std::exit(0);
}

uint64_t number(const std::string& flag, const char* v) {
  const std::optional<uint64_t> x = unsigned_value(v);
  if (!x) usage(flag + " wants a non-negative integer, not '" + v + "'");
  return *x;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  WorkloadOptions& w = o.workload;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("", 0);
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (a == "--no-read-only-begin") {
      w.read_only_begin = false;
      continue;
    }
    if (i + 1 >= argc) usage("unknown option or missing value: " + a);
    const char* v = argv[++i];
    if (a == "--memory-servers")
      o.memory_servers = static_cast<uint32_t>(number(a, v));
    else if (a == "--clients")
      o.clients = static_cast<uint32_t>(number(a, v));
    else if (a == "--protocol")
      o.protocol = v;
    else if (a == "--versions")
      o.versions = static_cast<uint32_t>(number(a, v));
    else if (a == "--max-timestamps")
      o.max_timestamps = number(a, v);
    else if (a == "--overflow-entries")
      o.overflow_entries = static_cast<uint32_t>(number(a, v));
    else if (a == "--recovery-timeout-ms")
      o.recovery_timeout_ms = static_cast<uint32_t>(number(a, v));
    else if (a == "--workload")
      w.workload = v;
    else if (a == "--products")
      w.products = number(a, v);
    else if (a == "--record-bytes")
      w.record_bytes = static_cast<uint32_t>(number(a, v));
    else if (a == "--hot-products")
      w.hot_products = number(a, v);
    else if (a == "--browse-percent")
      w.browse_percent = static_cast<uint32_t>(number(a, v));
    else if (a == "--browse-reads")
      w.browse_reads = static_cast<uint32_t>(number(a, v));
    else if (a == "--keys")
      w.keys = number(a, v);
    else if (a == "--list-capacity")
      w.list_capacity = static_cast<uint32_t>(number(a, v));
    else if (a == "--txns")
      w.txns = number(a, v);
    else if (a == "--seconds")
      w.seconds = std::atof(v);
    else if (a == "--max-orders")
      w.max_orders = number(a, v);
    else if (a == "--long-read-percent")
      w.long_read_percent = static_cast<uint32_t>(number(a, v));
    else if (a == "--long-read-think-us")
      w.long_read_think_us = static_cast<uint32_t>(number(a, v));
    else if (a == "--think-us")
      w.think_us = static_cast<uint32_t>(number(a, v));
    else if (a == "--seed")
      w.seed = number(a, v);
    else if (a == "--history")
      o.history = v;
#ifdef SLUICE_NAM_TEST_HOOKS
    else if (a == "--test-kill-client")
      o.test_kill_client = static_cast<int64_t>(number(a, v));
    else if (a == "--test-kill-on-commit")
      o.test_kill_on_commit = number(a, v);
    else if (a == "--test-kill-memory-server")
      o.test_kill_memory_server = static_cast<int64_t>(number(a, v));
    else if (a == "--test-kill-after-ms")
      o.test_kill_after_ms = static_cast<uint32_t>(number(a, v));
    else if (a == "--test-kill-at") {
      const std::string at = v;
      if (at == "lock")
        o.test_kill_at = KillPoint::kAfterLock;
      else if (at == "commit-bit")
        o.test_kill_at = KillPoint::kAfterCommitBit;
      else if (at == "prepared")
        o.test_kill_at = KillPoint::kPrepared;
      else if (at == "partial-commit")
        o.test_kill_at = KillPoint::kPartialCommit;
      else
        usage("--test-kill-at wants lock, commit-bit, prepared or partial-commit, not '" + at +
              "'");
    }
#endif
    else
      usage("unknown option: " + a);
  }
  if (o.protocol != "rsi" && o.protocol != "2pc" && o.protocol != "both") {
    usage("--protocol wants rsi, 2pc or both, not '" + o.protocol + "'");
  }
  const bool rsi_kill =
      o.test_kill_at == KillPoint::kAfterLock || o.test_kill_at == KillPoint::kAfterCommitBit;
  const bool two_pc_kill =
      o.test_kill_at == KillPoint::kPrepared || o.test_kill_at == KillPoint::kPartialCommit;
  if ((rsi_kill && o.protocol != "rsi") || (two_pc_kill && o.protocol != "2pc"))
    usage("--test-kill-at lock|commit-bit is for --protocol rsi, prepared|partial-commit for 2pc");
  if (o.protocol == "both" && !o.history.empty())
    usage("--history needs one protocol (rsi or 2pc)");
  if (w.workload != "checkout" && w.workload != "list-append" && w.workload != "write-skew") {
    usage("--workload wants checkout, list-append or write-skew, not '" + w.workload + "'");
  }
  if (o.memory_servers == 0) usage("--memory-servers must be at least 1");
  if (o.clients == 0 || o.clients > 64) usage("--clients must be 1 .. 64");
  if (o.versions < 2)
    usage("--versions must be at least 2 (a reader must never see the version being replaced)");
  if (w.record_bytes < 16) usage("--record-bytes must be at least 16 (stock and price)");
  if (w.workload == "checkout" && w.products < 3)
    usage("--products must be at least 3 (a checkout buys 3)");
  if (w.workload != "checkout" && w.keys < 2) usage("--keys must be at least 2");
  if (w.txns == 0 && w.seconds <= 0) usage("--txns 0 needs --seconds");
  if (w.browse_percent > 100) usage("--browse-percent must be at most 100");
  if (w.long_read_percent > 100) usage("--long-read-percent must be at most 100");
  if (w.long_read_percent > 0 && w.workload != "list-append")
    usage("--long-read-percent is for --workload list-append");
  if (o.overflow_entries > (1u << 24)) usage("--overflow-entries must be at most 16777216");
  if (w.browse_reads > 64) usage("--browse-reads must be at most 64");
  if (o.max_timestamps < 64) usage("--max-timestamps must be at least 64");
  return o;
}

}  // namespace sluice::nam
