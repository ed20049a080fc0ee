// sluice-stream's checkpoints (--checkpoint-dir) and restoring one
// (--restore): a run fed at a live pace (--throttle) takes a checkpoint
// every 200 ms; the launcher kills rank 1 from outside (unannounced) soon
// after the third completes; the job fails; run again with --restore it
// resumes from the last complete checkpoint (named in its report, with the
// records it had ingested) and its rows, checksum, late counts and
// --csv-out files equal an undisturbed run's: no row lost, none twice.
// Restoring into a job with other options is refused, naming both.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

namespace fs = std::filesystem;
using sluice::testing::describe;
using sluice::testing::json_field;
using sluice::testing::json_number;
using sluice::testing::ProcessResult;
using sluice::testing::run_process;

class CheckpointTest : public ::testing::TestWithParam<std::vector<std::string>> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stream_ckpt_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static ProcessResult stream(std::vector<std::string> args,
                              const std::vector<std::string>& launcher = {}) {
    return run_process(sluice::testing::job_argv(2, 120, "sluice-stream", args, launcher), {},
                       std::chrono::seconds(150));
  }
  static std::string result(const ProcessResult& r) {
    return json_field(r.output, "records") + " records, " + json_field(r.output, "rows") +
           " rows, checksum " + json_field(r.output, "checksum") + ", late " +
           json_field(r.output, "late");
  }
  // The lines of the 4 workers' --csv-out (or --late-output) files, sorted.
  std::vector<std::string> rows(
      const std::string& stem,
      const std::string& header = "window_start,window_end,key,value") const {
    std::vector<std::string> out;
    for (int w = 0; w < 4; ++w) {
      std::ifstream in(path(stem + "-" + std::to_string(w) + ".csv"));
      std::string line;
      std::getline(in, line);
      EXPECT_EQ(line, header);
      while (std::getline(in, line)) out.push_back(line);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<std::string> late_records(const std::string& stem) const {
    return rows(stem, "window_start,window_end,key,event_time");
  }
  // The ids of the checkpoints left in state/ (ckpt-<id>), sorted.
  std::vector<uint64_t> kept() const {
    std::vector<uint64_t> ids;
    for (const auto& e : fs::directory_iterator(path("state")))
      ids.push_back(std::stoull(e.path().filename().string().substr(5)));
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  // Checks that `ids` are the newest complete checkpoint and those it
  // builds on: a run of ids from a whole one (every 10th, and the first
  // after a restore), so at most 10.
  static void expect_one_chain(const std::vector<uint64_t>& ids) {
    ASSERT_FALSE(ids.empty());
    EXPECT_LE(ids.size(), 10u) << ::testing::PrintToString(ids);
    EXPECT_EQ(ids.back() - ids.front() + 1, ids.size()) << ::testing::PrintToString(ids);
  }

  // The options of every run of a case: a live pace, then the query's.
  static std::vector<std::string> common(const std::vector<std::string>& query) {
    std::vector<std::string> base = {"--workers",  "2",      "--records", "1000000",
                                     "--throttle", "100000", "--json"};
    base.insert(base.end(), query.begin(), query.end());
    return base;
  }
  // The run without checkpoints or faults, its rows in ref-<worker>.csv.
  ProcessResult run_undisturbed(const std::vector<std::string>& base) const {
    std::vector<std::string> ref = base;
    ref.insert(ref.end(), {"--csv-out", path("ref-{worker}.csv"), "--late-output",
                           path("ref-late-{worker}.csv")});
    return stream(ref);
  }

  // The output of `args` run on 2 ranks and sent SIGTERM once its second
  // checkpoint completed (with --stop-with-savepoint: it stops at a
  // savepoint); the launcher's exit status in *status. Fails the test if
  // no second checkpoint comes or the job does not stop.
  static std::string stop_at_savepoint(const std::vector<std::string>& args, int* status) {
    sluice::testing::BackgroundJob job(sluice::testing::job_argv(2, 120, "sluice-stream", args));
    const bool checkpointed = job.read_until(
        [](const std::string& out) {
          return out.find("checkpoint 2 complete") != std::string::npos;
        },
        std::chrono::seconds(60));
    EXPECT_TRUE(checkpointed) << job.output();
    EXPECT_TRUE(job.stop()) << job.output();
    *status = job.exit_status();
    return job.output();
  }

  fs::path dir_;
};

TEST_P(CheckpointTest, AKilledRunRestoredFromItsLastCheckpointEqualsAnUndisturbedRun) {
  const std::vector<std::string> base = common(GetParam());
  const ProcessResult undisturbed = run_undisturbed(base);
  ASSERT_EQ(undisturbed.exit_code, 0) << describe(undisturbed);
  ASSERT_NE(json_field(undisturbed.output, "rows"), "0");

  std::vector<std::string> ck = base;
  ck.insert(ck.end(),
            {"--csv-out", path("out-{worker}.csv"), "--late-output", path("out-late-{worker}.csv"),
             "--checkpoint-dir", path("state"), "--checkpoint-every", "200"});
  const ProcessResult killed =
      stream(ck, {"--faults-after", "checkpoint 3 complete", "--kill", "1@0.05"});
  ASSERT_NE(killed.exit_code, 0) << "the run ended before the kill: " << describe(killed);
  EXPECT_NE(killed.output.find("rank 1 was killed by signal 9"), std::string::npos)
      << killed.output;

  ck.insert(ck.end(), {"--restore", "--verify"});
  const ProcessResult restored = stream(ck);
  ASSERT_EQ(restored.exit_code, 0) << describe(restored);
  EXPECT_GE(json_number(restored.output, "restored_from"), 3u) << restored.output;
  const uint64_t resumed = json_number(restored.output, "resumed_at");
  EXPECT_GT(resumed, 0u) << restored.output;
  EXPECT_LT(resumed, 1000000u) << restored.output;
  EXPECT_EQ(result(restored), result(undisturbed)) << restored.output;
  EXPECT_EQ(json_field(restored.output, "verify"), "OK") << restored.output;
  EXPECT_EQ(rows("out"), rows("ref"));
  if (GetParam()[1] == "nb7") {
    EXPECT_FALSE(late_records("ref-late").empty());  // (ysb's records are never late)
  }
  EXPECT_EQ(late_records("out-late"), late_records("ref-late"));
  // Only the newest complete checkpoint and those it builds on are kept.
  expect_one_chain(kept());
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());

  // The same checkpoints restored into a job with other options: refused.
  std::vector<std::string> other = ck;
  other[3] = "999999";  // --records
  const ProcessResult refused = stream(other);
  EXPECT_NE(refused.exit_code, 0) << describe(refused);
  EXPECT_NE(refused.output.find("was taken by another job"), std::string::npos) << refused.output;
}

// In place: with --recover-within the survivors wait for the killed rank's
// replacement (a restarted process for ysb, a spare for nb7), and every
// rank restores the last complete checkpoint in the running job, which
// then ends as an undisturbed run does.
TEST_P(CheckpointTest, AKilledRankIsReplacedAndTheRunningJobRecoversFromItsLastCheckpoint) {
  const std::vector<std::string> base = common(GetParam());
  const ProcessResult undisturbed = run_undisturbed(base);
  ASSERT_EQ(undisturbed.exit_code, 0) << describe(undisturbed);

  std::vector<std::string> ck = base;
  ck.insert(ck.end(), {"--csv-out", path("out-{worker}.csv"), "--late-output",
                       path("out-late-{worker}.csv"), "--checkpoint-dir", path("state"),
                       "--checkpoint-every", "200", "--recover-within", "30", "--verify"});
  const std::string replacement = GetParam()[1] == "ysb" ? "--restarts" : "--spares";
  const ProcessResult r =
      stream(ck, {replacement, "1", "--faults-after", "checkpoint 3 complete", "--kill", "1@0.05"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.output.find("rank 1 was killed by signal 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("recovers from rank 1 was lost"), std::string::npos) << r.output;
  EXPECT_GE(json_number(r.output, "recoveries"), 1u) << r.output;
  EXPECT_GE(json_number(r.output, "restored_from"), 3u) << r.output;
  EXPECT_EQ(result(r), result(undisturbed)) << r.output;
  EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
  EXPECT_EQ(rows("out"), rows("ref"));
  if (GetParam()[1] == "nb7") {
    EXPECT_FALSE(late_records("ref-late").empty());  // (ysb's records are never late)
  }
  EXPECT_EQ(late_records("out-late"), late_records("ref-late"));
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// YSB (aggregation cells) with slash's deltas; NB7 (arg_max: lists of
// records) with uppar's re-partitioning, and late records.
INSTANTIATE_TEST_SUITE_P(
    Queries, CheckpointTest,
    ::testing::Values(
        std::vector<std::string>{"--query", "ysb", "--disorder", "200", "--lag", "50"},
        std::vector<std::string>{"--query", "nb7", "--strategy", "uppar", "--window-ms", "300",
                                 "--max-price", "50", "--disorder", "100", "--lag", "20", "--rate",
                                 "20"},
        // Session windows (gap 300 ms), slash: its sessions
        // are in the snapshots of their leaders.
        std::vector<std::string>{"--query", "q11", "--keys", "2000", "--session-gap-ms", "300",
                                 "--disorder", "100", "--lag", "20", "--rate", "20"}),
    [](const auto& info) { return info.param[1]; });

// Deterministic deaths at the steps of a checkpoint's commit (kill points
// armed by the launcher in rank 1's first process only; each of its two
// workers passes each point once per checkpoint, so the 5th pass is during
// checkpoint 3): dead with its snapshot of 3 written but before telling
// the others, checkpoint 3 never completes and 2 is restored; dead right
// after its done marker of 3, 3 is restored. Either way the output equals
// an undisturbed run's.
struct KillAt {
  std::string point;
  uint64_t restored;
};

class CheckpointKillPointTest : public CheckpointTest {};

TEST_F(CheckpointKillPointTest, ADeathAtEachStepOfACheckpointRestoresTheLastCompleteOne) {
  const std::vector<std::string> base =
      common({"--query", "ysb", "--disorder", "200", "--lag", "50"});
  const ProcessResult undisturbed = run_undisturbed(base);
  ASSERT_EQ(undisturbed.exit_code, 0) << describe(undisturbed);
  for (const KillAt& k :
       {KillAt{"stream-checkpoint-written", 2}, KillAt{"stream-checkpoint-complete", 3}}) {
    SCOPED_TRACE(k.point);
    fs::remove_all(path("state"));
    std::vector<std::string> ck = base;
    ck.insert(ck.end(), {"--csv-out", path("out-{worker}.csv"), "--checkpoint-dir", path("state"),
                         "--checkpoint-every", "200", "--recover-within", "30", "--verify"});
    const ProcessResult r = stream(ck, {"--restarts", "1", "--kill-at", "1:" + k.point + ":5"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(json_number(r.output, "recoveries"), 1u) << r.output;
    EXPECT_EQ(json_number(r.output, "restored_from"), k.restored) << r.output;
    EXPECT_EQ(result(r), result(undisturbed)) << r.output;
    EXPECT_EQ(json_field(r.output, "verify"), "OK") << r.output;
    EXPECT_EQ(rows("out"), rows("ref"));
  }
}

// A savepoint (--stop-with-savepoint): SIGTERM at sluice run (as Ctrl-C)
// after the second checkpoint stops the job at a checkpoint every worker
// takes at once, its windows not fired; a run from it (--restore) ends as
// an undisturbed run does; the savepoint outlives that run's newer
// checkpoints, and a second run from it (--restore-from ID) gives the same
// rows again.
class SavepointTest : public CheckpointTest {};

TEST_F(SavepointTest, AJobStoppedAtASavepointGoesOnFromItAsOftenAsAsked) {
  const std::vector<std::string> base =
      common({"--query", "ysb", "--disorder", "200", "--lag", "50"});
  const ProcessResult undisturbed = run_undisturbed(base);
  ASSERT_EQ(undisturbed.exit_code, 0) << describe(undisturbed);

  std::vector<std::string> ck = base;
  ck.insert(ck.end(), {"--csv-out", path("out-{worker}.csv"), "--checkpoint-dir", path("state"),
                       "--checkpoint-every", "200", "--verify"});
  std::vector<std::string> stopping = ck;
  stopping.push_back("--stop-with-savepoint");
  int status = 0;
  const std::string stopped = stop_at_savepoint(stopping, &status);
  // The launcher says a forwarded signal ended the job (128 + SIGTERM); the
  // ranks themselves exit 0.
  EXPECT_EQ(status, 128 + SIGTERM) << stopped;
  EXPECT_EQ(stopped.find("exited with status"), std::string::npos) << stopped;
  const uint64_t savepoint = json_number(stopped, "savepoint");
  ASSERT_GE(savepoint, 3u) << stopped;
  EXPECT_LT(json_number(stopped, "records"), 1000000u) << stopped;
  EXPECT_EQ(json_field(stopped, "verify"), "skipped") << stopped;
  const std::string marker = path("state/ckpt-" + std::to_string(savepoint) + "/savepoint");
  EXPECT_TRUE(fs::exists(marker)) << stopped;

  std::vector<std::string> again = ck;
  again.push_back("--restore");
  const ProcessResult restored = stream(again);
  ASSERT_EQ(restored.exit_code, 0) << describe(restored);
  EXPECT_EQ(json_number(restored.output, "restored_from"), savepoint) << restored.output;
  EXPECT_EQ(result(restored), result(undisturbed)) << restored.output;
  EXPECT_EQ(json_field(restored.output, "verify"), "OK") << restored.output;
  EXPECT_EQ(rows("out"), rows("ref"));
  // Its own checkpoints are numbered after the savepoint, which stays
  // (whole) beside the newest and those it builds on.
  EXPECT_TRUE(fs::exists(marker));
  std::vector<uint64_t> ids = kept();
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), savepoint) << ::testing::PrintToString(ids);
  ids.erase(ids.begin());
  EXPECT_GT(ids.front(), savepoint);
  expect_one_chain(ids);

  again.back() = "--restore-from";
  again.push_back(std::to_string(savepoint));
  const ProcessResult twice = stream(again);
  ASSERT_EQ(twice.exit_code, 0) << describe(twice);
  EXPECT_EQ(json_number(twice.output, "restored_from"), savepoint) << twice.output;
  EXPECT_EQ(result(twice), result(undisturbed)) << twice.output;
  EXPECT_EQ(rows("out"), rows("ref"));

  // Files are split by worker: restored on another number, refused.
  const ProcessResult other = run_process(sluice::testing::job_argv(1, 120, "sluice-stream", again),
                                          {}, std::chrono::seconds(150));
  EXPECT_NE(other.exit_code, 0) << describe(other);
  EXPECT_NE(other.output.find("was taken by 4 workers and this job has 2: only a job reading "
                              "Kafka (--kafka-input) or generated input dealt out by --partitions "
                              "can be restored on another number of workers"),
            std::string::npos)
      << other.output;

  again.back() = "999";
  const ProcessResult missing = stream(again);
  EXPECT_NE(missing.exit_code, 0) << describe(missing);
  EXPECT_NE(missing.output.find("checkpoint 999 in " + path("state") +
                                " is not complete on any rank (or does not exist)"),
            std::string::npos)
      << missing.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Generated input dealt out by --partitions rescales as a Kafka topic's
// partitions do, with no broker: an elastic job of 2 ranks of at most 3,
// one worker each, on 4 partitions, grown by a joiner after its third
// checkpoint and shrunk again when rank 1 is asked to leave 0.3 s after the
// grown run's first checkpoint. Each partition is what worker p of 4
// generates, so its records, rows, checksum and late counts must be those
// of an undisturbed run of 2 ranks x 2 workers on the same options: each
// row once, whichever worker had its key and partition when.
class ElasticGeneratedTest : public CheckpointTest {};

TEST_F(ElasticGeneratedTest, AJobOnPartitionedGeneratedInputGrowsAndShrinksWithoutABroker) {
  // (20 records per ms of event time a partition: 2.5 s of it, 25 windows.)
  const std::vector<std::string> query = {"--records",   "200000", "--rate", "20",
                                          "--disorder",  "40",     "--lag",  "50",
                                          "--window-ms", "100",    "--json"};
  std::vector<std::string> ref = {"--workers", "2"};
  ref.insert(ref.end(), query.begin(), query.end());
  const ProcessResult undisturbed = stream(ref);
  ASSERT_EQ(undisturbed.exit_code, 0) << describe(undisturbed);
  ASSERT_EQ(json_number(undisturbed.output, "late_total"), 0u) << undisturbed.output;

  std::vector<std::string> elastic = {
      "--workers",        "1",           "--partitions",       "4",   "--throttle", "20000",
      "--checkpoint-dir", path("state"), "--checkpoint-every", "100", "--elastic"};
  elastic.insert(elastic.end(), query.begin(), query.end());
  const ProcessResult r =
      stream(elastic, {"--max-ranks", "3", "--faults-after", "checkpoint 3 complete", "--join", "0",
                       "--leave", "1@0.3 after workers in view 1"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.output.find("goes on in view 1 with ranks 0,1,2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 leaves the job at savepoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("with ranks 0,2 from"), std::string::npos) << r.output;
  EXPECT_EQ(json_number(r.output, "rescaled_from"), 3u) << r.output;
  EXPECT_EQ(json_number(r.output, "ranks"), 2u) << r.output;
  EXPECT_EQ(result(r), result(undisturbed)) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

// Partitions are the input of as many workers whatever the job's size: 3
// partitions of q11's bids (sessions) read by 2 workers, one of them
// reading two with a watermark each, give the rows of 3 workers, and
// --verify (the reference of 3 workers) says OK. Fewer partitions than
// workers are refused.
TEST_F(ElasticGeneratedTest, PartitionsGiveTheRowsOfAsManyWorkers) {
  const std::vector<std::string> query = {"--query", "q11", "--records", "100000", "--json"};
  std::vector<std::string> three = {"--workers", "3"};
  three.insert(three.end(), query.begin(), query.end());
  const ProcessResult workers = run_process(
      sluice::testing::job_argv(1, 60, "sluice-stream", three), {}, std::chrono::seconds(90));
  ASSERT_EQ(workers.exit_code, 0) << describe(workers);
  std::vector<std::string> dealt = {"--workers", "1", "--partitions", "3", "--verify"};
  dealt.insert(dealt.end(), query.begin(), query.end());
  const ProcessResult partitions = stream(dealt);
  ASSERT_EQ(partitions.exit_code, 0) << describe(partitions);
  EXPECT_EQ(result(partitions), result(workers)) << partitions.output;
  EXPECT_EQ(json_field(partitions.output, "verify"), "OK") << partitions.output;

  // Fewer partitions than workers: a worker would have none, refused.
  const ProcessResult few = stream({"--workers", "2", "--partitions", "3", "--records", "1000"});
  EXPECT_NE(few.exit_code, 0) << describe(few);
  EXPECT_NE(few.output.find("--partitions 3 is fewer than the job's 4 workers"), std::string::npos)
      << few.output;
}

// Key groups (--key-groups, fixed for the job): a checkpoint files each
// worker's state by key group, and a restore on another number of workers
// reads from each snapshot only the groups each worker owns now. A
// savepoint of 2 workers restored on 2, 3 and 1 gives an undisturbed run's
// rows each time, and the three restores read the same number of state
// entries (each entry by exactly one worker: a restore that read every
// snapshot whole on every worker would read 3 times as many on 3 workers),
// on 3 workers less than all of them on any one. Another --key-groups is
// another job; fewer key groups than workers are refused.
class KeyGroupsTest : public CheckpointTest {};

TEST_F(KeyGroupsTest, ARescaledRestoreReadsEachStateEntryOnceByTheWorkerThatOwnsItsGroup) {
  const std::vector<std::string> query = {
      "--records",   "400000", "--rate",       "20", "--disorder", "40", "--lag", "50",
      "--window-ms", "100",    "--partitions", "4",  "--workers",  "1",  "--json"};
  const ProcessResult undisturbed = stream(query);
  ASSERT_EQ(undisturbed.exit_code, 0) << describe(undisturbed);

  std::vector<std::string> ck = query;
  ck.insert(ck.end(), {"--checkpoint-dir", path("state"), "--checkpoint-every", "200"});
  std::vector<std::string> stopping = ck;
  stopping.insert(stopping.end(), {"--throttle", "50000", "--stop-with-savepoint"});
  int status = 0;
  const std::string stopped = stop_at_savepoint(stopping, &status);
  const uint64_t savepoint = json_number(stopped, "savepoint");
  ASSERT_GE(savepoint, 2u) << stopped;
  ASSERT_LT(json_number(stopped, "records"), 400000u) << stopped;

  std::vector<std::string> from = ck;
  from.insert(from.end(), {"--restore-from", std::to_string(savepoint)});
  uint64_t entries = 0;
  for (const int ranks : {2, 3, 1}) {
    const ProcessResult r =
        run_process(sluice::testing::job_argv(ranks, 120, "sluice-stream", from), {},
                    std::chrono::seconds(150));
    ASSERT_EQ(r.exit_code, 0) << ranks << " ranks: " << describe(r);
    EXPECT_EQ(json_number(r.output, "restored_from"), savepoint) << r.output;
    EXPECT_EQ(json_number(r.output, "rescaled_from"), ranks == 2 ? 0u : 2u) << r.output;
    EXPECT_EQ(result(r), result(undisturbed)) << ranks << " ranks: " << r.output;
    const uint64_t read = json_number(r.output, "restored_state");
    const uint64_t most = json_number(r.output, "restored_state_max");
    if (ranks == 2) {
      entries = read;
      EXPECT_GT(entries, 0u) << r.output;
    }
    EXPECT_EQ(read, entries) << ranks << " ranks: " << r.output;
    if (ranks == 3) {
      EXPECT_LT(most, entries) << r.output;
    } else if (ranks == 1) {
      EXPECT_EQ(most, entries) << r.output;
    }
  }

  // Other key groups: another job's checkpoint.
  std::vector<std::string> other = from;
  other.insert(other.end(), {"--key-groups", "64"});
  const ProcessResult refused = stream(other);
  EXPECT_NE(refused.exit_code, 0) << describe(refused);
  EXPECT_NE(refused.output.find("was taken by another job"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("key groups 128"), std::string::npos) << refused.output;

  const ProcessResult few = stream({"--workers", "2", "--key-groups", "3", "--records", "1000"});
  EXPECT_NE(few.exit_code, 0) << describe(few);
  EXPECT_NE(few.output.find("--key-groups 3 is fewer than the job's 4 workers"), std::string::npos)
      << few.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST(CheckpointUsageTest, RestoreWithoutACheckpointDirIsRefused) {
  const std::string bin = sluice::testing::bin("sluice-stream");
  const ProcessResult r = run_process({bin, "--restore"}, {}, std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.output.find("--restore, --restore-from, --stop-with-savepoint, --checkpoint-every, "
                          "--full-checkpoint-every, --recover-within and --elastic need "
                          "--checkpoint-dir"),
            std::string::npos)
      << r.output;
}

// --elastic deals the input and the key state out again at each change:
// only partitions can be (Kafka's, or generated input's), and only Kafka's
// output (or none) is not a file per worker; --partitions is generated
// input's.
TEST(CheckpointUsageTest, AnElasticJobNeedsPartitionedInputAndNoFilesPerWorker) {
  const std::string bin = sluice::testing::bin("sluice-stream");
  const ProcessResult input = run_process(
      {bin, "--elastic", "--checkpoint-dir", "/tmp/unused", "--input", "in-{worker}.csv"}, {},
      std::chrono::seconds(20));
  EXPECT_EQ(input.exit_code, 2) << describe(input);
  EXPECT_NE(input.output.find("--elastic rescales the job's input as ranks join and leave: it "
                              "reads --kafka-input or generated input (files and sockets are one "
                              "per worker)"),
            std::string::npos)
      << input.output;
  const ProcessResult partitions = run_process(
      {bin, "--partitions", "4", "--input", "in-{worker}.csv"}, {}, std::chrono::seconds(20));
  EXPECT_EQ(partitions.exit_code, 2) << describe(partitions);
  EXPECT_NE(partitions.output.find("--partitions deals out generated input"), std::string::npos)
      << partitions.output;
  const ProcessResult files =
      run_process({bin, "--elastic", "--checkpoint-dir", "/tmp/unused", "--kafka", "127.0.0.1:1",
                   "--kafka-input", "t", "--csv-out", "/tmp/unused-{worker}.csv"},
                  {}, std::chrono::seconds(20));
  EXPECT_EQ(files.exit_code, 2) << describe(files);
  EXPECT_NE(files.output.find("--elastic: --csv-out and --late-output are files per worker"),
            std::string::npos)
      << files.output;
}

}  // namespace
