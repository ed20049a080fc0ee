#include "options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sluice::join {

namespace {

const char* program_name(Program p) {
  switch (p) {
    case Program::kJoin:
      return "sluice-join";
    case Program::kSingle:
      return "sluice-join-single";
    case Program::kMpi:
      return "sluice-join-mpi";
  }
  return "sluice-join";
}

[[noreturn]] void usage(Program p, const std::string& why, int code = 2) {
  if (code != 0) {
    std::fprintf(stderr, "%s: %s (--help lists the options)\n", program_name(p), why.c_str());
    std::exit(code);
  }
  FILE* f = stdout;
  switch (p) {
    case Program::kJoin:
      std::fprintf(
          f,
          "usage: sluice run -n RANKS -- sluice-join [options]\n"
          "  joins R and S on a 64-bit key across RANKS processes x --threads worker threads\n"
          "  --algorithm A      radix (default), replicate, or auto (picks by relation sizes)\n"
          "  --threads T        worker threads per rank (default 1)\n"
          "  --verify           rank 0 checks the result against a single-process reference join\n"
          "  --json             print one JSON line with the result and timings\n"
          "  --segment-bytes B  flow segment payload (default: the flow default, 8192)\n"
          "  --ring-segments N  segments per (source, target) ring (default: the flow default, "
          "16)\n"
          "  --save-r P, --save-s P  write this rank's fragments to files P ({rank} is "
          "replaced)\n");
      break;
    case Program::kSingle:
      std::fprintf(f,
                   "usage: sluice-join-single [options]\n"
                   "  the COST baseline: one thread joins all of R and S in memory\n"
                   "  --method M         hash (one table), radix (cache-sized partitions) or both "
                   "(default)\n"
                   "  --repeat N         run each method N times (median, min, max; default 1)\n"
                   "  --ranks P          only to read per-rank files: how many fragments there are "
                   "(default 1)\n"
                   "  --verify, --json   as for sluice-join\n");
      break;
    case Program::kMpi:
      std::fprintf(
          f,
          "usage: mpirun -np P sluice-join-mpi [options]\n"
          "  the MPI baseline: histogram pass, MPI_Alltoallv of both relations, local radix join\n"
          "  --verify, --json   as for sluice-join\n");
      break;
  }
  std::fprintf(
      f,
      "data (the same flags for every program, so all see the same tuples):\n"
      "  --r N, --s N       tuples in R and S (default 4000000 each)\n"
      "  --width W          bytes per tuple: 16 = 64-bit key + 64-bit payload (default), 8 = key "
      "only\n"
      "  --dist D           key distribution of S (and of R with --r-keys dist): uniform "
      "(default),\n"
      "                     zipf, or equal (every key the same)\n"
      "  --theta X          Zipf exponent (default 1.0)\n"
      "  --r-keys K         unique (default: row i of R has key index i mod domain) or dist\n"
      "  --domain D         key domain size (default |R|)\n"
      "  --selectivity F    share of S tuples whose key comes from the domain (default 1.0)\n"
      "  --seed N           generator seed (default 1)\n"
      "  --r-file P --s-file P  load instead of generating (binary, or text if the name ends "
      ".csv;\n"
      "                     {rank} in P names one file per rank)\n");
  std::exit(code);
}

uint64_t number(Program p, const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage(p, flag + " needs a whole number, not '" + text + "'");
  }
  return v;
}

double real(Program p, const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0')
    usage(p, flag + " needs a number, not '" + text + "'");
  return v;
}

}  // namespace

Options parse_options(int argc, char** argv, Program p) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage(p, "", 0);
    if (a == "--verify") {
      o.verify = true;
      continue;
    }
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (i + 1 >= argc) usage(p, a + " needs a value");
    const char* v = argv[++i];
    if (a == "--r")
      o.data.r_tuples = number(p, a, v);
    else if (a == "--s")
      o.data.s_tuples = number(p, a, v);
    else if (a == "--width")
      o.data.width = static_cast<uint32_t>(number(p, a, v));
    else if (a == "--dist") {
      const std::string d = v;
      if (d == "uniform")
        o.data.dist = KeyDist::kUniform;
      else if (d == "zipf")
        o.data.dist = KeyDist::kZipf;
      else if (d == "equal")
        o.data.dist = KeyDist::kEqual;
      else
        usage(p, "--dist must be uniform, zipf or equal, not '" + d + "'");
    } else if (a == "--theta")
      o.data.theta = real(p, a, v);
    else if (a == "--r-keys") {
      const std::string k = v;
      if (k == "unique")
        o.data.r_keys = RKeys::kUnique;
      else if (k == "dist")
        o.data.r_keys = RKeys::kDist;
      else
        usage(p, "--r-keys must be unique or dist, not '" + k + "'");
    } else if (a == "--domain")
      o.data.domain = number(p, a, v);
    else if (a == "--selectivity")
      o.data.selectivity = real(p, a, v);
    else if (a == "--seed")
      o.data.seed = number(p, a, v);
    else if (a == "--r-file")
      o.data.r_file = v;
    else if (a == "--s-file")
      o.data.s_file = v;
    else if (a == "--algorithm" && p == Program::kJoin) {
      const std::string m = v;
      if (m == "radix")
        o.algorithm = Algorithm::kRadix;
      else if (m == "replicate")
        o.algorithm = Algorithm::kReplicate;
      else if (m == "auto")
        o.algorithm = Algorithm::kAuto;
      else
        usage(p, "--algorithm must be radix, replicate or auto, not '" + m + "'");
    } else if (a == "--threads" && p == Program::kJoin)
      o.threads = static_cast<uint32_t>(number(p, a, v));
    else if (a == "--segment-bytes" && p == Program::kJoin)
      o.segment_bytes = static_cast<uint32_t>(number(p, a, v));
    else if (a == "--ring-segments" && p == Program::kJoin)
      o.ring_segments = static_cast<uint32_t>(number(p, a, v));
    else if (a == "--save-r" && p == Program::kJoin)
      o.save_r = v;
    else if (a == "--save-s" && p == Program::kJoin)
      o.save_s = v;
    else if (a == "--repeat" && p == Program::kSingle)
      o.repeat = static_cast<uint32_t>(number(p, a, v));
    else if (a == "--method" && p == Program::kSingle) {
      o.method = v;
      if (o.method != "hash" && o.method != "radix" && o.method != "both") {
        usage(p, "--method must be hash, radix or both");
      }
    } else if (a == "--ranks" && p == Program::kSingle)
      o.file_ranks = static_cast<uint32_t>(number(p, a, v));
#ifdef SLUICE_JOIN_TEST_HOOKS
    else if (a == "--test-kill-rank" && p == Program::kJoin)
      o.test_kill_rank = static_cast<int64_t>(number(p, a, v));
    else if (a == "--test-kill-after" && p == Program::kJoin)
      o.test_kill_after = number(p, a, v);
#endif
    else
      usage(p, "unknown option " + a);
  }
  if (o.data.width != 8 && o.data.width != 16) usage(p, "--width must be 8 or 16");
  if (o.threads == 0 || o.threads > 64) usage(p, "--threads must be in [1, 64]");
  if (!(o.data.selectivity >= 0.0 && o.data.selectivity <= 1.0))
    usage(p, "--selectivity must be in [0, 1]");
  if (!(o.data.theta >= 0.0 && o.data.theta <= 20.0)) usage(p, "--theta must be in [0, 20]");
  if (o.data.r_file.empty() != o.data.s_file.empty()) usage(p, "--r-file and --s-file go together");
  if (o.repeat == 0) usage(p, "--repeat must be at least 1");
  if (o.file_ranks == 0) usage(p, "--ranks must be at least 1");
  return o;
}

}  // namespace sluice::join
