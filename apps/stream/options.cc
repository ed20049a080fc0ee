#include "options.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sluice::stream {

const char* to_string(Strategy s) { return s == Strategy::kSlash ? "slash" : "uppar"; }

namespace {

[[noreturn]] void usage(const std::string& why, int code = 2) {
  if (code != 0) {
    std::fprintf(stderr, "sluice-stream: %s (--help lists the options)\n", why.c_str());
    std::exit(code);
  }
  std::printf(
      "usage: sluice run -n RANKS -- sluice-stream [options]\n"
      "  runs a windowed streaming query on generated data across RANKS processes x "
      "--workers\n"
      "  threads; every worker ingests its own partition of the input.\n"
      "query and strategy:\n"
      "  --query Q           ysb (default): count views per campaign per tumbling window (78 B "
      "records);\n"
      "                      ro: count per key (16 B records, one global window unless "
      "--window-ms);\n"
      "                      cm: mean CPU per job per 2 s tumbling window (64 B records);\n"
      "                      nb7: NEXMark Q7 (Slash's NB7): the bids (32 B) at the highest "
      "price of\n"
      "                      each 60 s tumbling window, all of them on a tie;\n"
      "                      nb8: persons (206 B) joined with auctions (269 B) on person.id =\n"
      "                      auction.seller in 10 s tumbling windows (the paper: 12 h);\n"
      "                      nb11: bids joined with persons on bid.bidder = person.id in "
      "session\n"
      "                      windows of the bidder (--session-gap-ms);\n"
      "                      q11: the standard NEXMark Q11: bids per bidder per session\n"
      "  --strategy S        slash (default): eager thread-local partial state, deltas merged at "
      "the\n"
      "                      partition leaders at every epoch; uppar: every record shuffled by key "
      "to\n"
      "                      the worker that owns it (the re-partitioning baseline)\n"
      "  --workers T         worker threads per rank (default 1)\n"
      "  --epoch-mib M       slash/uppar: end an epoch (ship deltas / send watermarks) every M MiB "
      "of\n"
      "                      input per worker, and early when a window can trigger (default 64;\n"
      "                      fractions allowed)\n"
      "data (deterministic; the same flags give the same input):\n"
      "  --records N         records in all, over every worker (default 10000000)\n"
      "  --keys K            key cardinality: campaigns (ysb, default 100), keys (ro, default "
      "100000000),\n"
      "                      jobs (cm, default 10000), auctions (nb7, default 10000), bidders "
      "(q11,\n"
      "                      default 10000); nb8, nb11: auctions and bids refer to one of the K "
      "most\n"
      "                      recent persons of a random worker (default 1000)\n"
      "  --max-price P       nb7, nb11, q11: bid prices in [1, P] cents (default 100000000; small "
      "P\n"
      "                      makes ties at the maximum)\n"
      "  --zipf THETA        Zipf exponent of the keys (default 0: uniform)\n"
      "  --disorder MS       event times are displaced back by up to MS ms (default 0: in order)\n"
      "  --rate R            records per ms of event time per worker (default 1000)\n"
      "  --seed N            generator seed (default 1)\n"
      "  --live-generation   generate records while ingesting them (default: each worker generates "
      "its\n"
      "                      partition into memory before the timed run, and streams it from "
      "there)\n"
      "windows and watermarks:\n"
      "  --window-ms W       window size (default: ysb 1000, cm 2000, nb7 60000, nb8 10000, ro 0 "
      "= one\n"
      "                      global window)\n"
      "  --session-gap-ms G  nb11, q11: a bidder's session ends after G ms without an event "
      "(default\n"
      "                      10000)\n"
      "  --slide-ms S        slide of a sliding window (default: tumbling); must divide W\n"
      "  --lag MS            watermark = largest event time seen - MS (default: --disorder)\n"
      "  --allowed-lateness MS  windows wait MS past their end before they trigger (default 0);\n"
      "                      records behind a triggered watermark are counted as late per window\n"
      "                      (sessions: records more than MS behind the watermark, per gap-sized\n"
      "                      span of time)\n"
      "output:\n"
      "  --verify            rank 0 compares rows, checksum and late counts with a "
      "single-threaded\n"
      "                      reference on the same input; prints 'verify: OK' or exits 1\n"
      "  --json              print one JSON line with the results\n"
      "  --print-rows        print every output row to stdout\n"
      "  --csv-out FILE      write the rows as CSV, one file per worker: FILE with {worker} "
      "replaced\n"
      "                      by the worker's index (or FILE.<worker>)\n"
      "  --input-csv-dir DIR rank 0 writes the generated input as CSV, DIR/input-<worker>.csv\n"
      "  --input-binary-dir DIR  the same as binary records, DIR/input-<worker>.bin\n"
      "  --input PATTERN     read the input from files instead of generating it: with {worker}\n"
      "                      in PATTERN, worker g reads that file with g in its place; without,\n"
      "                      every worker reads its share of the one file (binary: a range of\n"
      "                      records; CSV: the lines that begin in its byte range)\n"
      "  --input-format F    binary (records of the query's type back to back) or csv (a header,\n"
      "                      then the columns --input-csv-dir writes; not nb8, nb11); default: "
      "csv\n"
      "                      if PATTERN ends in .csv, else binary\n"
      "  --segment-bytes B   flow segment payload (default: the flow default)\n"
#ifdef SLUICE_STREAM_TEST_HOOKS
      "test build only:\n"
      "  --test-kill-rank R --test-kill-after N  rank R kills itself (SIGKILL) after N records\n"
#endif
  );
  std::exit(0);
}

uint64_t whole(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    usage(flag + " needs a whole number, not '" + text + "'");
  }
  return v;
}

double real(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v)) {
    usage(flag + " needs a number, not '" + text + "'");
  }
  return v;
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  bool keys = false, window = false, lag = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("", 0);
    if (a == "--verify") {
      o.verify = true;
      continue;
    }
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (a == "--live-generation") {
      o.live = true;
      continue;
    }
    if (a == "--print-rows") {
      o.print_rows = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) usage("unexpected argument '" + a + "'");
    if (i + 1 >= argc) usage(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--query") {
      o.query = v;
      if (o.query != "ysb" && o.query != "ro" && o.query != "cm" && o.query != "nb7" &&
          o.query != "nb8" && o.query != "nb11" && o.query != "q11") {
        usage("--query must be ysb, ro, cm, nb7, nb8, nb11 or q11, not '" + o.query + "'");
      }
    } else if (a == "--strategy") {
      const std::string s = v;
      if (s == "slash") {
        o.strategy = Strategy::kSlash;
      } else if (s == "uppar") {
        o.strategy = Strategy::kUppar;
      } else {
        usage("--strategy must be slash or uppar, not '" + s + "'");
      }
    } else if (a == "--workers") {
      o.threads = static_cast<uint32_t>(whole(a, v));
      if (o.threads == 0 || o.threads > 256) usage("--workers must be in 1..256");
    } else if (a == "--records") {
      o.gen.records = whole(a, v);
    } else if (a == "--keys") {
      o.gen.keys = whole(a, v);
      keys = true;
      if (o.gen.keys == 0) usage("--keys must be at least 1");
    } else if (a == "--zipf") {
      o.gen.zipf = real(a, v);
      if (o.gen.zipf < 0) usage("--zipf must be >= 0");
    } else if (a == "--disorder") {
      o.gen.disorder = static_cast<int64_t>(whole(a, v));
    } else if (a == "--rate") {
      o.gen.rate = whole(a, v);
      if (o.gen.rate == 0) usage("--rate must be at least 1");
    } else if (a == "--seed") {
      o.gen.seed = whole(a, v);
    } else if (a == "--window-ms") {
      o.window_ms = static_cast<int64_t>(whole(a, v));
      window = true;
    } else if (a == "--session-gap-ms") {
      o.session_gap_ms = static_cast<int64_t>(whole(a, v));
      if (o.session_gap_ms == 0) usage("--session-gap-ms must be at least 1");
    } else if (a == "--max-price") {
      o.gen.max_price = whole(a, v);
      if (o.gen.max_price == 0) usage("--max-price must be at least 1");
    } else if (a == "--slide-ms") {
      o.slide_ms = static_cast<int64_t>(whole(a, v));
    } else if (a == "--epoch-mib") {
      o.epoch_mib = real(a, v);
      if (!(o.epoch_mib > 0)) usage("--epoch-mib must be positive");
    } else if (a == "--lag") {
      o.lag = static_cast<int64_t>(whole(a, v));
      lag = true;
    } else if (a == "--allowed-lateness") {
      o.lateness = static_cast<int64_t>(whole(a, v));
    } else if (a == "--segment-bytes") {
      o.segment_bytes = static_cast<uint32_t>(whole(a, v));
    } else if (a == "--csv-out") {
      o.csv_out = v;
    } else if (a == "--input-csv-dir") {
      o.input_csv_dir = v;
    } else if (a == "--input-binary-dir") {
      o.input_binary_dir = v;
    } else if (a == "--input") {
      o.input = v;
    } else if (a == "--input-format") {
      const std::string f = v;
      if (f != "binary" && f != "csv") usage("--input-format is binary or csv, not '" + f + "'");
      o.input_format = f;
#ifdef SLUICE_STREAM_TEST_HOOKS
    } else if (a == "--test-kill-rank") {
      o.test_kill_rank = static_cast<int64_t>(whole(a, v));
    } else if (a == "--test-kill-after") {
      o.test_kill_after = whole(a, v);
#endif
    } else {
      usage("unknown option " + a);
    }
  }
  const std::string& q = o.query;
  if (!keys) {
    o.gen.keys = q == "ysb"                  ? 100
                 : q == "ro"                 ? 100'000'000
                 : q == "nb8" || q == "nb11" ? 1'000
                                             : 10'000;
  }
  if ((window || o.slide_ms != 0) && is_session_query(q)) {
    usage("--window-ms and --slide-ms do not apply to " + q +
          " (session windows: --session-gap-ms)");
  }
  if (!window) {
    o.window_ms = q == "ysb"   ? 1000
                  : q == "cm"  ? 2000
                  : q == "nb7" ? 60'000
                  : q == "nb8" ? 10'000
                               : 0;
  }
  if (!lag) o.lag = o.gen.disorder;
  if (o.slide_ms != 0 &&
      (o.window_ms == 0 || o.slide_ms > o.window_ms || o.window_ms % o.slide_ms != 0)) {
    usage("--slide-ms must divide --window-ms (and a global window cannot slide)");
  }
  return o;
}

}  // namespace sluice::stream
