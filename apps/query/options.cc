#include "options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sluice::query {

namespace {

[[noreturn]] void usage(const std::string& why, int code = 2) {
  if (code != 0) {
    std::fprintf(stderr, "sluice-query: %s (--help lists the options)\n", why.c_str());
    std::exit(code);
  }
  std::printf(
      "usage: sluice run -n PROCESSES -- sluice-query synthetic|tpcc QUERY [options]\n"
      "       sluice-query tpcc-export --warehouses W --dir DIR\n"
      "  a parallel query engine on sluice flows (docs/query.md)\n"
      "commands:\n"
      "  synthetic          the two-shuffle benchmark: every process generates --rows integers;\n"
      "                     shuffle; n := n*3/2; shuffle again; count and checksum, checked\n"
      "                     against a single-process computation (prints verify: OK)\n"
      "  tpcc q1|q2|q3      the paper's TPC-C queries: 1 (four-way join, HAVING, ORDER BY),\n"
      "                     2 (promo revenue, order_line x item), 3 (per-ol_number aggregate)\n"
      "                     over a generated TPC-C database partitioned by warehouse (or\n"
      "                     the CSV files of --input); prints the result rows (\"row: ...\"),\n"
      "                     the time and the rows each exchange moved\n"
      "  tpcc-export        writes the generated tables as CSV files with a header to --dir\n"
      "                     (one process; for checking the queries with another engine)\n"
      "options:\n"
      "  --threads T        worker threads per process (default 1)\n"
      "  --rows N           integers generated per process (default 1000000)\n"
      "  --batch-bytes B    rows are batched up to B bytes before they move (default 16384);\n"
      "                     a comma list (4096,16384,65536) runs once per value\n"
      "  --ring-segments N  sluice exchange: batches in flight per pair of workers (default 16)\n"
      "  --exchange E       sluice (default: sluice flows) or sockets (blocking TCP, one\n"
      "                     connection per pair of processes, a sender thread per process);\n"
      "                     synthetic also takes none: no exchange, every worker keeps its\n"
      "                     rows (the compute-only time, to subtract for communication time)\n"
      "  --warehouses W     tpcc: TPC-C warehouses (default 1)\n"
      "  --seed N           tpcc: generator seed (default 1)\n"
      "  --every-amount     tpcc, tpcc-export: delivered order lines get amounts too (TPC-C's\n"
      "                     population gives them 0.00, so q2 and q3 would sum zeros)\n"
      "  --dir DIR          tpcc-export: where the CSV files go\n"
      "  --input DIR        tpcc: scan DIR/customer.csv, orders.csv, new_order.csv,\n"
      "                     order_line.csv and item.csv (a header, then the columns\n"
      "                     tpcc-export writes) instead of generating: every worker reads\n"
      "                     its own byte range of each file\n"
      "  --json             one JSON line per run\n"
      "  --help             this text\n");
#ifdef SLUICE_QUERY_TEST_HOOKS
  std::printf(
      "test build only:\n"
      "  --test-kill-rank R --test-kill-after N  rank R kills itself (SIGKILL) after a worker\n"
      "                     of it has sent N rows\n");
#endif
  std::exit(0);
}

uint64_t number(const std::string& flag, const char* v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || n < lo || n > hi) {
    usage(flag + " takes a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
          ", not '" + v + "'");
  }
  return n;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage("", 0);
    } else if (a == "--threads") {
      o.threads = static_cast<uint32_t>(number(a, value(), 1, 256));
    } else if (a == "--rows") {
      o.rows = number(a, value(), 0, uint64_t{1} << 40);
    } else if (a == "--batch-bytes") {
      o.batch_bytes.clear();
      std::string list = value();
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = list.find(',', start);
        const std::string item =
            list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const uint64_t b = number(a, item.c_str(), 512, 1u << 24);
        if (b % 64 != 0) usage("--batch-bytes values must be multiples of 64, not " + item);
        o.batch_bytes.push_back(static_cast<uint32_t>(b));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (a == "--ring-segments") {
      o.ring_segments = static_cast<uint32_t>(number(a, value(), 2, 4096));
    } else if (a == "--exchange") {
      const std::string e = value();
      if (e == "sluice") {
        o.exchange = ExchangeImpl::kSluice;
      } else if (e == "sockets") {
        o.exchange = ExchangeImpl::kSockets;
      } else if (e == "none") {
        o.exchange = ExchangeImpl::kNone;
      } else {
        usage("--exchange is sluice, sockets or none, not '" + e + "'");
      }
    } else if (a == "--warehouses") {
      o.warehouses = static_cast<uint32_t>(number(a, value(), 1, 100000));
    } else if (a == "--every-amount") {
      o.every_amount = true;
    } else if (a == "--seed") {
      o.seed = number(a, value(), 0, UINT64_MAX);
    } else if (a == "--dir") {
      o.dir = value();
    } else if (a == "--input") {
      o.input = value();
    } else if (a == "--json") {
      o.json = true;
#ifdef SLUICE_QUERY_TEST_HOOKS
    } else if (a == "--test-kill-rank") {
      o.test_kill_rank = static_cast<int64_t>(number(a, value(), 0, 65535));
    } else if (a == "--test-kill-after") {
      o.test_kill_after = number(a, value(), 0, uint64_t{1} << 40);
#endif
    } else if (!a.empty() && a[0] != '-' && o.command.empty()) {
      o.command = a;
    } else if (!a.empty() && a[0] != '-' && o.command == "tpcc" && o.query.empty()) {
      o.query = a;
    } else {
      usage("unknown option '" + a + "'");
    }
  }
  if (o.command.empty()) usage("no command given (synthetic, tpcc or tpcc-export)");
  if (o.command != "synthetic" && o.command != "tpcc" && o.command != "tpcc-export") {
    usage("unknown command '" + o.command + "' (synthetic, tpcc or tpcc-export)");
  }
  if (o.command == "tpcc" && o.query != "q1" && o.query != "q2" && o.query != "q3") {
    usage(o.query.empty() ? "tpcc needs a query (q1, q2 or q3)"
                          : "unknown query '" + o.query + "' (q1, q2 or q3)");
  }
  if (o.command == "tpcc-export" && o.dir.empty()) usage("tpcc-export needs --dir");
  if (o.command == "tpcc" && o.exchange == ExchangeImpl::kNone) {
    usage("--exchange none is for synthetic only (the TPC-C plans need their exchanges)");
  }
  return o;
}

}  // namespace sluice::query
