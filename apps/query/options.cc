#include "options.h"

#include <sluice/job.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace sluice::query {

namespace {

// --batch-bytes: one size or a comma list, each 512..16 MiB and a multiple of 64.
std::vector<uint32_t> batch_sizes(const std::string& list) {
  std::vector<uint32_t> sizes;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    errno = 0;
    const unsigned long long b = std::strtoull(item.c_str(), &end, 10);
    if (errno != 0 || item.empty() || *end != '\0' || item[0] == '-' || b < 512 || b > (1u << 24)) {
      throw UsageError("--batch-bytes takes whole numbers from 512 to " + std::to_string(1u << 24) +
                       ", not '" + item + "'");
    }
    if (b % 64 != 0) throw UsageError("--batch-bytes values must be multiples of 64, not " + item);
    sizes.push_back(static_cast<uint32_t>(b));
    if (comma == std::string::npos) return sizes;
    start = comma + 1;
  }
}

ExchangeImpl exchange_named(const std::string& e) {
  if (e == "sluice") return ExchangeImpl::kSluice;
  if (e == "sockets") return ExchangeImpl::kSockets;
  if (e == "none") return ExchangeImpl::kNone;
  throw UsageError("--exchange is sluice, sockets or none, not '" + e + "'");
}

}  // namespace

void add_options(CLI::App& cli, Options& o) {
  cli.require_subcommand(1);
  // The options below belong to sluice-query itself, and may follow the
  // command (`sluice-query tpcc q3 --warehouses 2`): the commands pass what
  // they do not know to it. (Set before the commands are added: they inherit it.)
  cli.fallthrough();
  cli.footer(
      "Run it through the launcher: sluice run -n PROCESSES -- sluice-query synthetic|tpcc QUERY "
      "[options]; tpcc-export runs alone. docs/query.md has the details.");

  cli.add_subcommand("synthetic",
                     "The two-shuffle benchmark: every process generates --rows integers; "
                     "shuffle; n := n*3/2; shuffle again; count and checksum, checked against a "
                     "single-process computation (prints verify: OK)")
      ->callback([&o] { o.command = "synthetic"; });
  CLI::App* tpcc = cli.add_subcommand(
      "tpcc",
      "The paper's TPC-C queries: q1 (four-way join, HAVING, ORDER BY), q2 (promo revenue, "
      "order_line x item), q3 (per-ol_number aggregate) over a generated TPC-C database "
      "partitioned by warehouse (or the CSV files of --input); prints the result rows "
      "(\"row: ...\"), the time and the rows each exchange moved");
  tpcc->add_option("query", o.query, "q1, q2 or q3")
      ->required()
      ->check(CLI::IsMember({"q1", "q2", "q3"}));
  tpcc->callback([&o] { o.command = "tpcc"; });
  cli.add_subcommand("tpcc-export",
                     "Writes the generated tables as CSV files with a header to --dir (one "
                     "process, no launcher; for checking the queries with another engine)")
      ->callback([&o] { o.command = "tpcc-export"; });

  cli.add_option("--rows", o.rows, "synthetic: integers generated per process")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 40))
      ->capture_default_str();
  cli.add_option_function<std::string>(
         "--batch-bytes", [&o](const std::string& list) { o.batch_bytes = batch_sizes(list); },
         "Rows are batched up to B bytes before they move (default 16384); a comma list "
         "(4096,16384,65536) runs synthetic once per value")
      ->type_name("B[,B...]");
  cli.add_option("--ring-segments", o.ring_segments,
                 "sluice exchange: batches in flight per pair of workers (default: the flow's, 16)")
      ->check(CLI::Range(2u, 4096u));
  cli.add_option_function<std::string>(
         "--exchange", [&o](const std::string& e) { o.exchange = exchange_named(e); },
         "sluice (default: sluice flows) or sockets (blocking TCP, one connection per pair of "
         "processes, a sender thread per process); synthetic also takes none: no exchange, "
         "every worker keeps its rows (the compute-only time, to subtract for communication "
         "time)")
      ->type_name("E");
  cli.add_option("--warehouses", o.warehouses, "tpcc, tpcc-export: TPC-C warehouses")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cli.add_flag("--every-amount", o.every_amount,
               "tpcc, tpcc-export: delivered order lines get amounts too (TPC-C's population "
               "gives them 0.00, so q2 and q3 would sum zeros)");
  cli.add_option("--dir", o.dir, "tpcc-export: where the CSV files go")->type_name("DIR");
  cli.add_option("--input", o.input,
                 "tpcc: scan DIR/customer.csv, orders.csv, new_order.csv, order_line.csv and "
                 "item.csv (a header, then the columns tpcc-export writes) instead of "
                 "generating: every worker reads its own byte range of each file")
      ->type_name("DIR");

  // A flag given twice takes its last value (as before the harness; the
  // harness's own flags too).
  for (CLI::Option* opt : cli.get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  // What no single flag can check: runs after every option and command.
  cli.callback([&o] {
    if (o.command == "tpcc-export" && o.dir.empty()) throw UsageError("tpcc-export needs --dir");
    if (o.command == "tpcc" && o.exchange == ExchangeImpl::kNone) {
      throw UsageError(
          "--exchange none is for synthetic only (the TPC-C plans need their exchanges)");
    }
  });
}

}  // namespace sluice::query
