#include "options.h"

#include <sluice/job.h>
#include <sluice/job_cli.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace sluice::stream {

const char* to_string(Strategy s) { return s == Strategy::kSlash ? "slash" : "uppar"; }

namespace {

// A finite number above 0 (CLI11's PositiveNumber lets "inf" through). The
// validators' descriptions are empty: --help shows the type name alone.
const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v) || !(v > 0))
        return "needs a positive number, not '" + text + "'";
      return {};
    },
    "");

// A whole number from 1 (after whole_number(), sluice/job_cli.h).
const CLI::Validator kFromOne(
    [](std::string& text) -> std::string {
      return text == "0" ? "needs a whole number from 1, not '" + text + "'" : "";
    },
    "");

// A finite number at least 0.
const CLI::Validator kNonNegative(
    [](std::string& text) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v) || v < 0)
        return "needs a number >= 0, not '" + text + "'";
      return {};
    },
    "");

// The defaults that depend on the query, and the checks that involve more
// than one flag. `given(name)`: whether the flag was on the command line.
template <class Given>
void finish(Options& o, Given given) {
  const std::string& q = o.query;
  if (!given("--keys")) {
    o.gen.keys = q == "ysb"                  ? 100
                 : q == "ro"                 ? 100'000'000
                 : q == "nb8" || q == "nb11" ? 1'000
                                             : 10'000;
  }
  if ((given("--window-ms") || o.slide_ms != 0) && is_session_query(q)) {
    throw UsageError("--window-ms and --slide-ms do not apply to " + q +
                     " (session windows: --session-gap-ms)");
  }
  if (!given("--window-ms")) {
    o.window_ms = q == "ysb"   ? 1000
                  : q == "cm"  ? 2000
                  : q == "nb7" ? 60'000
                  : q == "nb8" ? 10'000
                               : 0;
  }
  if (!given("--lag")) o.lag = o.gen.disorder;
  if (o.slide_ms != 0 &&
      (o.window_ms == 0 || o.slide_ms > o.window_ms || o.window_ms % o.slide_ms != 0)) {
    throw UsageError("--slide-ms must divide --window-ms (and a global window cannot slide)");
  }
  if ((o.restore || o.restore_from != 0 || o.stop_with_savepoint || given("--checkpoint-every") ||
       given("--full-checkpoint-every") || o.recover_within_s > 0 || o.elastic) &&
      o.checkpoint_dir.empty()) {
    throw UsageError(
        "--restore, --restore-from, --stop-with-savepoint, --checkpoint-every, "
        "--full-checkpoint-every, --recover-within and --elastic need --checkpoint-dir");
  }
  // A rescale restores the last savepoint on another number of workers:
  // only partitions can be dealt out again (Kafka's, or the generator's
  // with --partitions; files and sockets are one per worker), and only
  // Kafka's output is not a file per worker.
  const bool generated = o.kafka_input.empty() && o.input.empty() && o.input_socket.empty();
  if (o.partitions != 0 && !generated) {
    throw UsageError(
        "--partitions deals out generated input; --input, --input-socket and --kafka-input "
        "have partitions of their own (a file or a socket per worker, the topic's)");
  }
  if (o.elastic && !generated && o.kafka_input.empty()) {
    throw UsageError(
        "--elastic rescales the job's input as ranks join and leave: it reads --kafka-input "
        "or generated input (files and sockets are one per worker)");
  }
  if (o.elastic && (!o.csv_out.empty() || !o.late_output.empty())) {
    throw UsageError(
        "--elastic: --csv-out and --late-output are files per worker; an elastic job writes "
        "--kafka-output (or only prints its rows)");
  }
  if (o.upsert && is_session_query(q))
    throw UsageError("--upsert: session windows (" + q + ") emit once, at their end");
  if (!o.checkpoint_dir.empty() && !o.kafka_output.empty() && !o.csv_out.empty())
    throw UsageError(
        "--checkpoint-dir commits one output with its checkpoints: --kafka-output or --csv-out");
  if ((!o.kafka_input.empty() || !o.kafka_output.empty()) && o.kafka.empty())
    throw UsageError("--kafka-input and --kafka-output need the broker: --kafka HOST:PORT");
  if ((o.kafka_event_time != "field" || o.kafka_idle_ms != 0) && o.kafka_input.empty())
    throw UsageError("--kafka-event-time and --kafka-idle-ms are about --kafka-input: give it");
  if (o.kafka_follow && o.kafka_input.empty())
    throw UsageError("--kafka-follow follows the topic of --kafka-input: give it");
  if (o.kafka_follow && o.verify) {
    throw UsageError(
        "--verify reads the input again after the run, and a followed topic (--kafka-follow) "
        "may have grown past where the job stopped: check the output instead (--kafka-output "
        "or --csv-out against a bounded run of the same records)");
  }
  if (!o.kafka_input.empty() && !o.input.empty())
    throw UsageError("--input and --kafka-input are two inputs: give one");
  if (o.kafka_transactional_id.empty())
    o.kafka_transactional_id = "sluice-stream-" + o.kafka_output;
  if ((given("--input-format") || given("--no-header")) && o.input.empty())
    throw UsageError(
        "--input-format and --no-header describe --input files, and no --input is given");
  if (o.no_header && o.input_format == "binary")
    throw UsageError("--no-header applies to CSV input, not --input-format binary");
  if (!o.input_socket.empty() && (!o.input.empty() || !o.kafka_input.empty()))
    throw UsageError(
        "--input-socket is an input of its own: give it without --input or "
        "--kafka-input");
  if (!o.input_socket.empty() && o.verify) {
    throw UsageError(
        "--verify reads the input again after the run, and a socket (--input-socket) cannot be "
        "read again: check the output instead");
  }
  if (o.input_idle_ms != 0 && !o.follow && o.input_socket.empty())
    throw UsageError("--input-idle-ms is about --follow or --input-socket: give one");
  if (o.follow && o.input.empty())
    throw UsageError("--follow follows the CSV files of --input: give it");
  if (o.follow && o.input_format == "binary")
    throw UsageError("--follow reads CSV files, not --input-format binary");
  if (o.follow && o.verify) {
    throw UsageError(
        "--verify reads the input again after the run, and followed files (--follow) may have "
        "grown past where the job stopped: check the output instead (--csv-out against a "
        "bounded run of the same files)");
  }
  o.gen.validate();         // throws std::invalid_argument naming the field
  window_of(o).validate();  // the same
}

}  // namespace

void add_options(CLI::App& cli, JobFlags& flags, Options& o) {
  cli.footer(
      "Run it through the launcher: sluice run -n RANKS -- sluice-stream [options]. Every worker "
      "(RANKS x --workers) ingests its own partition of the input; docs/stream.md has the "
      "details.");

  // Query and strategy.
  cli.add_option_function<std::string>(
         "--query",
         [&o](const std::string& q) {
           if (q != "ysb" && q != "ro" && q != "cm" && q != "nb7" && q != "nb8" && q != "nb11" &&
               q != "q11") {
             throw UsageError("--query must be ysb, ro, cm, nb7, nb8, nb11 or q11, not '" + q +
                              "'");
           }
           o.query = q;
         },
         "ysb (default): count views per campaign per tumbling window (78 B records); ro: count "
         "per key (16 B records, one global window unless --window-ms); cm: mean CPU per job per "
         "2 s tumbling window (64 B records); nb7: NEXMark Q7 (Slash's NB7): the bids (32 B) at "
         "the highest price of each 60 s tumbling window, all of them on a tie; nb8: persons "
         "(206 B) joined with auctions (269 B) on person.id = auction.seller in 10 s tumbling "
         "windows (the paper: 12 h); nb11: bids joined with persons on bid.bidder = person.id in "
         "session windows of the bidder (--session-gap-ms); q11: the standard NEXMark Q11: bids "
         "per bidder per session")
      ->type_name("Q");
  cli.add_option_function<std::string>(
         "--strategy",
         [&o](const std::string& s) {
           if (s == "slash") {
             o.strategy = Strategy::kSlash;
           } else if (s == "uppar") {
             o.strategy = Strategy::kUppar;
           } else {
             throw UsageError("--strategy must be slash or uppar, not '" + s + "'");
           }
         },
         "slash (default): eager thread-local partial state, deltas merged at the partition "
         "leaders at every epoch; uppar: every record shuffled by key to the worker that owns it "
         "(the re-partitioning baseline)")
      ->type_name("S");
  // The harness's worker count under the name users know.
  cli.add_option("--workers", flags.threads, "Worker threads per rank")
      ->check(CLI::Range(1u, 256u))
      ->type_name("T")
      ->capture_default_str();
  cli.add_option("--epoch-mib", o.epoch_mib,
                 "slash/uppar: end an epoch (ship deltas / send watermarks) every M MiB of input "
                 "per worker, and early when a window can trigger (fractions allowed)")
      ->check(kPositive)
      ->type_name("M")
      ->capture_default_str();

  // Data (deterministic: the same flags give the same input; --seed is the harness's).
  cli.add_option("--records", o.gen.records, "Records in all, over every worker")
      ->transform(whole_number())
      ->type_name("N")
      ->capture_default_str();
  cli.add_option("--keys", o.gen.keys,
                 "Key cardinality: campaigns (ysb, default 100), keys (ro, default 100000000), "
                 "jobs (cm, default 10000), auctions (nb7, default 10000), bidders (q11, default "
                 "10000); nb8, nb11: auctions and bids refer to one of the K most recent persons "
                 "of a random worker (default 1000)")
      ->transform(whole_number())
      ->check(kFromOne)
      ->type_name("K");
  cli.add_option("--max-price", o.gen.max_price,
                 "nb7, nb11, q11: bid prices in [1, P] cents (small P makes ties at the maximum)")
      ->transform(whole_number())
      ->check(kFromOne)
      ->type_name("P")
      ->capture_default_str();
  cli.add_option("--zipf", o.gen.zipf, "Zipf exponent of the keys (default 0: uniform)")
      ->check(kNonNegative)
      ->type_name("THETA");
  cli.add_option("--disorder", o.gen.disorder,
                 "Event times are displaced back by up to MS ms (default 0: in order)")
      ->transform(whole_number())
      ->type_name("MS");
  cli.add_option("--rate", o.gen.rate, "Records per ms of event time per worker")
      ->transform(whole_number())
      ->check(kFromOne)
      ->type_name("R")
      ->capture_default_str();
  cli.add_flag("--live-generation", o.live,
               "Generate records while ingesting them (default: each worker generates its "
               "partition into memory before the timed run, and streams it from there)");

  // Windows and watermarks.
  cli.add_option("--window-ms", o.window_ms,
                 "Window size (default: ysb 1000, cm 2000, nb7 60000, nb8 10000, ro 0 = one "
                 "global window)")
      ->transform(whole_number())
      ->type_name("W");
  cli.add_option("--session-gap-ms", o.session_gap_ms,
                 "nb11, q11: a bidder's session ends after G ms without an event")
      ->transform(whole_number())
      ->check(kFromOne)
      ->type_name("G")
      ->capture_default_str();
  cli.add_option("--slide-ms", o.slide_ms,
                 "Slide of a sliding window (default: tumbling); must divide W")
      ->transform(whole_number())
      ->type_name("S");
  cli.add_option("--lag", o.lag, "Watermark = largest event time seen - MS (default: --disorder)")
      ->transform(whole_number())
      ->type_name("MS");
  cli.add_option("--allowed-lateness", o.lateness,
                 "Windows wait MS past their end before they trigger (default 0); records behind "
                 "a triggered watermark are counted as late per window (sessions: records more "
                 "than MS behind the watermark, per gap-sized span of time)")
      ->transform(whole_number())
      ->type_name("MS");
  cli.add_flag("--upsert", o.upsert,
               "Fixed windows: emit a window's rows as soon as the watermark passes its end, and "
               "a key's row again each time a late record within --allowed-lateness changes it "
               "(the last row of a window and key is its result); the report counts the final "
               "rows, and in \"updates\" all the rows emitted");

  // Output and input files. (--verify and --json are the harness's: --verify
  // compares rows, checksum and late counts with a single-threaded reference
  // on the same input on rank 0, printing 'verify: OK' or exiting 1.)
  cli.add_flag("--print-rows", o.print_rows, "Print every output row to stdout");
  cli.add_option("--csv-out", o.csv_out,
                 "Write the rows as CSV, one file per worker: FILE with {worker} replaced by the "
                 "worker's index (or FILE.<worker>)")
      ->type_name("FILE");
  cli.add_option("--late-output", o.late_output,
                 "Write every late record (one the watermark had passed, which no window "
                 "counts) as CSV, one file per worker as --csv-out names them: "
                 "window_start,window_end,key,event_time, a line per window it was late for "
                 "(sessions: per gap-sized span of time); with --checkpoint-dir the files "
                 "commit with the checkpoints")
      ->type_name("FILE");
  cli.add_option("--input-csv-dir", o.input_csv_dir,
                 "Rank 0 writes the generated input as CSV, DIR/input-<worker>.csv (DIR made "
                 "if missing)")
      ->type_name("DIR");
  cli.add_option("--input-binary-dir", o.input_binary_dir,
                 "The same as binary records, DIR/input-<worker>.bin")
      ->type_name("DIR");
  cli.add_option("--input", o.input,
                 "Read the input from files instead of generating it: with {worker} in PATTERN, "
                 "worker g reads that file with g in its place; without, every worker reads its "
                 "share of the one file (binary: a range of records; CSV: the lines that begin in "
                 "its byte range)")
      ->type_name("PATTERN");
  cli.add_option_function<std::string>(
         "--input-format",
         [&o](const std::string& f) {
           if (f != "binary" && f != "csv")
             throw UsageError("--input-format is binary or csv, not '" + f + "'");
           o.input_format = f;
         },
         "binary (records of the query's type back to back) or csv (a header naming the query's "
         "columns, then a record per line; docs/stream.md lists them; not nb8, nb11); default: "
         "csv if PATTERN ends in .csv, else binary")
      ->type_name("F");
  cli.add_flag("--no-header", o.no_header,
               "CSV input files have no header line: each line holds the query's columns in the "
               "order docs/stream.md lists");
  cli.add_flag("--follow", o.follow,
               "Follow the --input CSV files as they grow (as tail -f): each worker reads its "
               "file ({worker} in PATTERN; a plain path for a job of one worker), waits for "
               "lines appended while the job runs, and at the first SIGINT or SIGTERM reads to "
               "the file's end and ends its input; the job then finishes as at the end of its "
               "input. Checkpoints carry each worker's byte offset. Each worker says when it "
               "has caught up with its file");
  cli.add_option("--input-socket", o.input_socket,
                 "Read the input from TCP servers instead of generating it: worker g connects to "
                 "the g-th address (one per worker, comma-separated) and reads a record per "
                 "line, its query's CSV columns in order (as --no-header), until the server "
                 "closes the connection or the first SIGINT/SIGTERM. A socket cannot replay: a "
                 "job restored from a checkpoint does not read again what came after it")
      ->type_name("HOST:PORT,...");
  cli.add_option("--input-idle-ms", o.input_idle_ms,
                 "With --follow or --input-socket: a worker that has read everything its file "
                 "or socket holds and got no record for MS ms counts as idle, so that its "
                 "watermark does not hold the others' windows back (as --kafka-idle-ms for a "
                 "partition); default 0: never idle")
      ->check(CLI::Range(0u, 86400000u))
      ->type_name("MS");
  cli.add_option("--throttle", o.throttle,
                 "Feed each worker at most N records per second, as a live stream does (default: "
                 "as fast as it can; for runs long enough to checkpoint, stop or kill)")
      ->type_name("N");
  cli.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "Take checkpoints (window state, input positions, the --csv-out files' length) "
                 "into DIR: aligned barriers on the engine's epochs, DIR/ckpt-N/; --csv-out then "
                 "holds only rows of completed checkpoints until the run ends")
      ->type_name("DIR");
  cli.add_option("--checkpoint-every", o.checkpoint_every_ms,
                 "A checkpoint every MS milliseconds (default 1000)")
      ->check(CLI::Range(int64_t{1}, int64_t{86'400'000}))
      ->type_name("MS");
  cli.add_option("--full-checkpoint-every", o.full_checkpoint_every,
                 "Every Nth checkpoint is whole; the ones between hold only the window state "
                 "changed since the one before, and a restore reads them over the whole one "
                 "(default 10; 1: every checkpoint whole). Savepoints are always whole; "
                 "session windows' checkpoints are always whole")
      ->check(CLI::Range(1u, 1'000'000u))
      ->type_name("N");
  cli.add_option("--recover-within", o.recover_within_s,
                 "With --checkpoint-dir: when a rank is lost, wait up to S seconds for its "
                 "replacement (sluice run --restarts or --spares), then every rank restores the "
                 "last complete checkpoint and the job goes on (default 0: a lost rank fails the "
                 "job)")
      ->check(CLI::Range(0.0, 3600.0))
      ->type_name("S");
  cli.add_flag("--elastic", o.elastic,
               "With --checkpoint-dir, on --kafka-input or generated input (--partitions): the "
               "job rescales while it runs. A "
               "process that joins it (sluice run --max-ranks M --join S, or SLUICE_JOIN=1) "
               "makes every rank stop at a savepoint and go on from it with the joiner's "
               "workers too; a rank sent SIGTERM (sluice run --leave RANK@S) leaves at a "
               "savepoint and the others go on without it (SIGTERM to every rank, Ctrl-C at "
               "sluice run, stops the job at a savepoint); a lost rank's place waits "
               "--recover-within S for a replacement, then the others go on without it from "
               "the last complete checkpoint. Key state and partitions move with each change");
  cli.add_option("--partitions", o.partitions,
                 "Generated input: deal it out as P partitions (partition p is what worker p of "
                 "P would generate), worker g of W reading those p with p % W == g, each with a "
                 "watermark of its own, so that a checkpoint restores on another number of "
                 "workers (as with --kafka-input); the rows are those of P workers. At least "
                 "SLUICE_WORLD_SIZE x --workers (one per worker of the job at its largest), "
                 "which is the default with --elastic; without it, one per worker")
      ->check(CLI::Range(1u, 1u << 20))
      ->type_name("P");
  cli.add_option("--key-groups", o.key_groups,
                 "The keys' state is kept in G key groups, each owned by one worker (a "
                 "contiguous range of groups per worker), as Flink's max parallelism: fixed "
                 "for the job's life (its checkpoints name it), at least its number of workers "
                 "at its largest; a checkpoint restored on another number of workers moves "
                 "whole groups, each worker reading only its own (default 128)")
      ->check(CLI::Range(1u, KeyGroupRanges::kMax))
      ->type_name("G");
  cli.add_flag("--restore", o.restore,
               "Start from the latest complete checkpoint in --checkpoint-dir (a fresh start if "
               "there is none): the state is loaded, each worker's input resumes where the "
               "checkpoint left it, and --csv-out is cut back to the checkpoint's rows. One "
               "taken by another number of workers is rescaled (Kafka input, or generated input "
               "with --partitions: each worker takes the state of the keys and the partitions it "
               "has now)");
  cli.add_option("--restore-from", o.restore_from,
                 "Start from checkpoint or savepoint ID in --checkpoint-dir (DIR/ckpt-ID), as "
                 "--restore does; an error if no rank holds it complete")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 62))
      ->type_name("ID");
  cli.add_flag("--stop-with-savepoint", o.stop_with_savepoint,
               "The first SIGINT or SIGTERM (Ctrl-C at sluice run) stops the job at a savepoint: "
               "a checkpoint every worker takes at once and after which all stop, windows not "
               "yet fired kept in it, --csv-out or --kafka-output committed up to it; it is "
               "never deleted by later checkpoints (DIR/ckpt-ID/savepoint). Start again from it "
               "with --restore or --restore-from ID. A second signal ends the job at once");
  cli.add_option("--kafka", o.kafka, "The Kafka broker(s) of --kafka-input and --kafka-output")
      ->type_name("HOST:PORT");
  cli.add_option(
         "--kafka-input", o.kafka_input,
         "Read the input from this Kafka topic instead of generating it: a record per "
         "message, its query's CSV columns in order (as --no-header); worker g of W reads "
         "the partitions p with p % W == g, read_committed, from the beginning to their end")
      ->type_name("TOPIC");
  cli.add_flag("--kafka-follow", o.kafka_follow,
               "Follow --kafka-input instead of reading it to its end: records producers add "
               "while the job runs are read too, until the first SIGINT or SIGTERM (Ctrl-C, or "
               "sluice run forwarding it), which ends the input where each reader got to; the "
               "job then finishes as at the end of its input (every window fires, the output "
               "commits) and a second signal ends it at once. Each reader says when it has "
               "caught up with the topic");
  cli.add_option("--kafka-event-time", o.kafka_event_time,
                 "Where a record's event time comes from: field (the query's time column, in "
                 "the message's value) or timestamp (the message's timestamp, CreateTime or "
                 "LogAppendTime; the value then holds the other columns, in order)")
      ->check(CLI::IsMember({"field", "timestamp"}));
  cli.add_option("--kafka-idle-ms", o.kafka_idle_ms,
                 "A partition of --kafka-input whose end the reader has reached and from which no "
                 "record came for this long is idle: "
                 "it stops holding the watermark back until records come again, and a worker "
                 "whose partitions are all idle stops holding the others' windows back (a worker "
                 "with no partition holds none back, with or without this option). Watermarks are "
                 "kept per partition either way. "
                 "0: never idle")
      ->check(CLI::Range(0, 3'600'000))
      ->type_name("MS");
  cli.add_option("--kafka-output", o.kafka_output,
                 "Write the rows to this Kafka topic, window_start,window_end,key,value, in one "
                 "transaction per worker committed when the query succeeded on every rank")
      ->type_name("TOPIC");
  cli.add_option(
         "--kafka-transactional-id", o.kafka_transactional_id,
         "The prefix of the output's transactional ids, ID-<worker> (default: "
         "sluice-stream-TOPIC); a run with the same ID aborts what an earlier one left open")
      ->type_name("ID");
  cli.add_option("--segment-bytes", o.segment_bytes,
                 "Flow segment payload (default: the flow default)")
      ->transform(whole_number())
      ->type_name("B");

  // A flag given twice takes its last value (as before the harness; the
  // harness's own flags too).
  for (CLI::Option* opt : cli.get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  // After every option: the harness's flags into `o`, the query's defaults.
  cli.callback([&cli, &flags, &o] {
    o.threads = flags.threads;
    o.verify = flags.verify;
    o.json = flags.json;
    o.gen.seed = flags.seed;
    finish(o, [&cli](const char* name) { return cli.get_option(name)->count() > 0; });
  });
}

}  // namespace sluice::stream
