#include "olap_options.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "flag_values.h"

namespace sluice::nam::olap {

namespace {

[[noreturn]] void usage(const std::string& why, int code = 2) {
  if (code != 0) {
    std::fprintf(stderr, "sluice-nam-olap: %s (--help lists the options)\n", why.c_str());
    std::exit(code);
  }
  std::printf(
      "usage: sluice run -n RANKS -- sluice-nam-olap join|agg [options]\n"
      "  analytics on network-attached memory: ranks 0 .. M-1 are memory servers (they hold\n"
      "  the input and the partitions in one-sided regions and run no operator code); the other\n"
      "  ranks run --threads compute threads each. Every algorithm named runs in the same job on\n"
      "  the same data, and the first compute rank checks each result against a single-process\n"
      "  reference (match count and checksum; groups, rows and checksum).\n"
      "  join   R join S on a 64-bit key. Algorithms: rrj (RDMA radix join: partitions written\n"
      "         into the memory servers with one-sided writes, joined in cache-sized blocks),\n"
      "         ghj (grace hash join over shuffle flows), ghj-bloom (the same after a\n"
      "         Bloom-filter semi-join reduction whose filters go over a replicate flow),\n"
      "         flow-radix (the flow radix join of apps/join, run by the compute ranks)\n"
      "  agg    SELECT key, COUNT(*), SUM(value) GROUP BY key. Algorithms: rdma (cache-sized\n"
      "         pre-aggregation spilling into overflow partitions on the memory servers, then\n"
      "         parallel post-aggregation), hierarchical (local aggregation, then a shuffle flow\n"
      "         to each group's owner, post-aggregation)\n"
      "roles:\n"
      "  --memory-servers M   memory-server ranks (default 1); RANKS must exceed M\n"
      "  --threads T          compute threads per compute rank (default 1)\n"
      "  --algorithms A,B     which to run, in this order (default: all of the kind)\n"
      "join input:\n"
      "  --r N, --s N         rows of R and S (default 1000000 each; 16-byte tuples)\n"
      "  --selectivity X      share of each relation with a join partner: 0 .. 1 (default 1;\n"
      "                       the paper's runs use 0.25, 0.5, 0.75 and 1)\n"
      "  --bloom-bits B       Bloom filter bits per key (default 10)\n"
      "aggregation input:\n"
      "  --rows N             rows (default 1000000; 16-byte {key, value})\n"
      "  --groups K           distinct group keys (default 1000; the paper: 1 .. 64M)\n"
      "  --table-entries E    groups in a thread's pre-aggregation table (default 16384)\n"
      "both:\n"
      "  --partitions P       partitions on the memory servers (default: from the input size)\n"
      "  --buffer-bytes B     software-managed buffer = chunk in the store (default 2048)\n"
      "  --space-factor F     partition space on the memory servers, relative to the input\n"
      "                       (default 1.25; running out is an error naming this flag)\n"
      "  --shipping S         background (default): a shipper thread per compute thread writes\n"
      "                       full buffers into the memory servers while partitioning goes on;\n"
      "                       inline: the partitioning thread writes them itself\n"
      "  --seed N             generator seed (default 1)\n"
      "  --dump DIR           memory servers write what they hold as CSV into DIR (for DuckDB)\n"
      "  --json               also print one JSON line with the results\n");
#ifdef SLUICE_NAM_TEST_HOOKS
  std::printf(
      "test hooks (this build only):\n"
      "  --test-kill-memory-server R   memory server R kills itself (SIGKILL) once a quarter of\n"
      "                       the first one-sided algorithm's chunks are in its store\n"
      "  --test-kill-compute-rank R    compute rank R kills itself once an eighth of the first\n"
      "                       (one-sided) algorithm's chunks are on memory server 0; when the\n"
      "                       first is flow-radix or hierarchical, once one of its threads\n"
      "                       pushed a quarter of its share into the flows\n");
#endif
  std::exit(0);
}

uint64_t number(const std::string& flag, const char* v) {
  const std::optional<uint64_t> x = unsigned_value(v);
  if (!x) usage(flag + " wants a non-negative integer, not '" + v + "'");
  return *x;
}

double real(const std::string& flag, const char* v) {
  const std::optional<double> x = real_value(v);
  if (!x) usage(flag + " wants a number, not '" + v + "'");
  return *x;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

OlapOptions parse_olap_options(int argc, char** argv) {
  OlapOptions o;
  o.join.input.r_rows = 1000000;
  o.join.input.s_rows = 0;  // = r unless given
  o.agg.input.rows = 1000000;
  o.agg.input.groups = 1000;
  if (argc < 2) usage("say join or agg first");
  o.kind = argv[1];
  if (o.kind == "--help" || o.kind == "-h") usage("", 0);
  if (o.kind != "join" && o.kind != "agg")
    usage("the first argument must be join or agg, not '" + o.kind + "'");
  bool s_given = false;
  std::string algorithms;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("", 0);
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (i + 1 >= argc) usage("unknown option or missing value: " + a);
    const char* v = argv[++i];
    if (a == "--memory-servers")
      o.memory_servers = static_cast<uint32_t>(number(a, v));
    else if (a == "--threads")
      o.threads = static_cast<uint32_t>(number(a, v));
    else if (a == "--algorithms")
      algorithms = v;
    else if (a == "--r")
      o.join.input.r_rows = number(a, v);
    else if (a == "--s") {
      o.join.input.s_rows = number(a, v);
      s_given = true;
    } else if (a == "--selectivity")
      o.join.input.selectivity = real(a, v);
    else if (a == "--bloom-bits")
      o.join.bloom_bits_per_key = static_cast<uint32_t>(number(a, v));
    else if (a == "--rows")
      o.agg.input.rows = number(a, v);
    else if (a == "--groups")
      o.agg.input.groups = number(a, v);
    else if (a == "--table-entries")
      o.agg.table_entries = static_cast<uint32_t>(number(a, v));
    else if (a == "--partitions")
      o.join.partitions = o.agg.partitions = static_cast<uint32_t>(number(a, v));
    else if (a == "--buffer-bytes")
      o.join.chunk_bytes = o.agg.chunk_bytes = static_cast<uint32_t>(number(a, v));
    else if (a == "--space-factor")
      o.join.space_factor = o.agg.space_factor = real(a, v);
    else if (a == "--shipping") {
      const std::string how = v;
      if (how != "background" && how != "inline")
        usage("--shipping wants background or inline, not '" + how + "'");
      o.join.background = o.agg.background = how == "background";
    } else if (a == "--seed")
      o.join.input.seed = o.agg.input.seed = number(a, v);
    else if (a == "--dump")
      o.dump = v;
#ifdef SLUICE_NAM_TEST_HOOKS
    else if (a == "--test-kill-memory-server")
      o.test_kill_memory_server = static_cast<int64_t>(number(a, v));
    else if (a == "--test-kill-compute-rank")
      o.test_kill_compute_rank = static_cast<int64_t>(number(a, v));
#endif
    else
      usage("unknown option: " + a);
  }
  if (!s_given) o.join.input.s_rows = o.join.input.r_rows;
  const std::vector<std::string> all =
      o.kind == "join" ? std::vector<std::string>{"rrj", "ghj", "ghj-bloom", "flow-radix"}
                       : std::vector<std::string>{"rdma", "hierarchical"};
  o.algorithms = algorithms.empty() ? all : split(algorithms);
  if (o.algorithms.empty()) usage("--algorithms names none");
  for (const std::string& name : o.algorithms) {
    bool known = false;
    for (const std::string& k : all) known = known || k == name;
    std::string list;
    for (const std::string& k : all) list += (list.empty() ? "" : ", ") + k;
    if (!known)
      usage("--algorithms: '" + name + "' is not one of " + list + " (for " + o.kind + ")");
  }
  for (size_t i = 0; i < o.algorithms.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (o.algorithms[i] == o.algorithms[j])
        usage("--algorithms names '" + o.algorithms[i] + "' twice");
    }
  }
  if (o.memory_servers == 0) usage("--memory-servers must be at least 1");
  if (o.threads == 0 || o.threads > 64) usage("--threads must be 1 .. 64");
  if (!(o.join.input.selectivity >= 0 && o.join.input.selectivity <= 1))
    usage("--selectivity must be within 0 .. 1");
  if (o.join.bloom_bits_per_key == 0 || o.join.bloom_bits_per_key > 64)
    usage("--bloom-bits must be 1 .. 64");
  if (o.agg.input.groups == 0) usage("--groups must be at least 1");
  if (o.agg.table_entries < 16) usage("--table-entries must be at least 16");
  if (o.join.partitions > 65536) usage("--partitions must be at most 65536");
  if (o.join.chunk_bytes < 64 || o.join.chunk_bytes % 8 != 0 || o.join.chunk_bytes > (1u << 20))
    usage("--buffer-bytes must be a multiple of 8 within 64 .. 1048576");
  if (!(o.join.space_factor >= 1.0 && o.join.space_factor <= 16))
    usage("--space-factor must be within 1 .. 16");
  return o;
}

}  // namespace sluice::nam::olap
