// apps/nam/workload.h: the workloads sluice-nam runs on the RSI client, the
// memory servers' initial load, and the end-of-run invariant check.
//
//   checkout     TPC-W-like: read 3 products, insert 1 order and its 3 order
//                lines, lower the 3 products' stock; --browse-percent of the
//                transactions are read-only browsing (read --browse-reads
//                products). Invariants: per product, stock + ordered
//                quantity = the initial stock; every order has exactly its 3
//                lines and no line is orphaned; no slot is left locked; as
//                many orders as clients committed checkouts.
//   list-append  Elle's list-append on --keys lists: 1-4 operations per
//                transaction, each a read of a list or an append of a value
//                unique to (client, transaction); --long-read-percent of them
//                read every list, slowly. Histories for `adya`.
//   write-skew   read two of --keys lists, think, append to one of them:
//                snapshot isolation lets two such transactions both commit
//                (G2), serializability would not.
//
// Thread safety: run_client is called by one thread per client.
#pragma once

#include <sluice/sluice.h>

#include <cstdint>
#include <string>
#include <vector>

#include "layout.h"
#include "rsi.h"

namespace sluice::nam {

struct WorkloadOptions {
  std::string workload = "checkout";
  uint64_t products = 1000000;
  uint32_t record_bytes = 1024;  // product payload
  uint64_t hot_products = 0;     // > 0: checkouts pick among the first this many
  uint32_t browse_percent = 0;
  uint32_t browse_reads = 5;
  uint64_t keys = 8;            // list-append / write-skew lists
  uint32_t list_capacity = 64;  // values per list
  uint64_t txns = 1000;         // committed transactions per client (0: --seconds)
  double seconds = 0;
  uint64_t max_orders = 0;  // 0: clients * txns (or 200000 with --seconds)
  uint32_t think_us = 0;    // between the reads and the commit
  // list-append: this share of transactions reads every list, sleeping
  // long_read_think_us between reads (a long reader for the overflow area).
  uint32_t long_read_percent = 0;
  uint32_t long_read_think_us = 0;
  // Transactions known to only read (browsing, long readers, list-append
  // transactions of reads only) start with begin_read_only() (RSI: they hold
  // no one back); false: with begin(), as before there was one.
  bool read_only_begin = true;
  uint64_t seed = 1;
  int64_t initial_stock = 1000000;
  // If set and true: the client stops at its next transaction's start (a
  // transaction being retried is given up), as at the end of the run
  // (sluice-nam: a rank asked to leave the job, sluice::stop_requested).
  bool (*stop)() = nullptr;
};

enum Table : uint32_t { kProducts = 0, kOrders = 1, kLines = 2, kLists = 3 };

Layout make_layout(const WorkloadOptions& w, uint32_t memory_servers, uint32_t clients,
                   uint32_t versions, uint64_t max_timestamps);
// Fills memory server `server`'s region of `table` with the initial data.
void load_table(const Layout& layout, const WorkloadOptions& w, uint32_t table, uint32_t server,
                std::byte* data);
// Memory server `server`'s regions of the database, exposed: each table's,
// loaded with the initial data; with `rsi` also, on server 0, the metadata
// (the client slots `free` marks parked: spares.h) and, if the layout has an
// overflow area, each table's. The tables' regions come first, in table order.
std::vector<MemoryRegion> expose_database(Cluster& cluster, const Layout& layout,
                                          const WorkloadOptions& w, uint32_t server, bool rsi,
                                          const std::vector<uint8_t>& free);

// The width of one interval of ClientResult::timeline.
constexpr uint32_t kTimelineMs = 100;

struct ClientResult {
  uint64_t commits = 0, read_only = 0, checkouts = 0, conflicts = 0, too_old = 0, out_of_stock = 0;
  double seconds = 0;
  double start_unix = 0;             // when the client began (CLOCK_REALTIME seconds)
  std::vector<uint32_t> timeline;    // commits per kTimelineMs interval since then
  std::vector<uint32_t> latency_us;  // per committed transaction, first attempt to commit
  TxnStats rsi;
  std::string history;  // JSON lines (list-append and write-skew)
};

// Runs the closed loop of one client; throws what the client throws.
ClientResult run_client(Transactions& db, const WorkloadOptions& w, uint32_t client,
                        uint32_t clients, bool record_history);

struct CheckResult {
  bool ok = true;
  std::string problems;  // one per line
  uint64_t orders = 0, lines = 0, locked = 0, products = 0, junk = 0;
};
// Scans every table of every memory server with plain one-sided reads (after
// all clients finished and recovery ran) and checks the invariants of the
// workload. checkouts[j] is how many checkouts client j reported committing,
// -1 if it died (then any number is fine, but its orders must still be
// consecutive: order keys j * share + 0, 1, 2, ... with no hole). With
// `rsi`, a version whose timestamp the vector does not say committed (one a
// stalled client installed after its commit was rolled back) is no
// version: it is counted in `junk`, as an RSI reader skips it.
CheckResult check_invariants(Cluster& cluster, const Layout& layout, const WorkloadOptions& w,
                             const std::vector<int64_t>& checkouts, bool rsi = false);

// How many order keys each client owns (client j: j * share .. (j+1) * share - 1).
uint64_t orders_per_client(const WorkloadOptions& w, uint32_t clients);

}  // namespace sluice::nam
