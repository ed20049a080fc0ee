// stream/kafka.h: a query's input from a Kafka topic and its rows to one,
// through librdkafka.
//
//   ss::KafkaConfig kafka{"127.0.0.1:9092"};
//   ss::KafkaInput<ss::YsbEvent> in(kafka, "ysb-events", &ss::ysb_csv_schema());
//   auto query = ss::ysb_query_from(in.factory(), window);
//   ss::KafkaSink sink(kafka, "ysb-windows", "job-1", first_worker, threads);
//   ... ss::run(cluster, query, options, sink) ...; sink.commit() (or abort())
//
// Input: a message's value is one record as a CSV line of the record's
// schema, its columns in the schema's order (stream/csv.h; no header). The
// topic's partitions are split among the job's workers (worker g of W
// reads partitions p with p % W == g, from the beginning), read with
// isolation.level=read_committed (records of aborted or open transactions
// are never seen), and a partition ends when the reader has caught up with
// its end: a bounded read of what the topic holds (as Flink's KafkaSource
// with bounded offsets), or, with KafkaConfig::stop, an unbounded one that
// follows the topic until stop() says so. Checkpoints record each
// partition's offset (KafkaSource::position). A message that is not a
// record fails the query, naming the topic, partition, offset, column and
// value.
//
// Event time is the schema's time column, or with
// KafkaConfig::event_time_from_timestamp the message's timestamp (the value
// then holds every other column). Watermarks are kept per partition (see
// KafkaSource), with idle partitions (KafkaConfig::idle_ms).
//
// Output: rows as "window_start,window_end,key,value" messages (the CSV of
// CsvSink, a value of several columns for a record), keyed by the row's
// key, from one transactional producer per worker (transactional.id
// "<id>-<worker>"): everything a worker emits is one transaction, committed
// by commit() after the query succeeded on every rank, aborted otherwise;
// a consumer with read_committed sees a run's rows once or not at all, and
// a run started again with the same id fences and aborts what an earlier
// run left open.
//
// Errors throw std::runtime_error naming the broker, topic and what failed.
// Thread safety: a KafkaReader or KafkaWriter belongs to one thread;
// KafkaSink may be called from every worker at once (each with its own
// producer), commit()/abort() from one thread after the workers ended.
#pragma once

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "stream/checkpoint.h"
#include "stream/csv.h"
#include "stream/sinks.h"
#include "stream/window.h"

namespace sluice::stream {

struct KafkaConfig {
  std::string bootstrap;  // "host:port[,host:port...]"
  // Further librdkafka properties (name, value), applied last.
  std::vector<std::pair<std::string, std::string>> properties;
  int timeout_ms = 30'000;  // metadata, transaction and flush waits
  // Input only. Empty: a bounded read (each partition ends where the topic
  // ended when the reader caught up with it). Set: an unbounded one that
  // follows the topic, reading what producers add while it runs, until
  // stop() returns true (sluice-stream --kafka-follow: the first SIGINT or
  // SIGTERM); the input then ends where the reader got to.
  std::function<bool()> stop;
  // Input only. Event time from each message's timestamp (its CreateTime, or
  // LogAppendTime where the topic says so) instead of the schema's time
  // column: a message's value then holds every other column, in order.
  bool event_time_from_timestamp = false;
  // Input only. A partition whose end the reader has reached and from
  // which no record came for this long (wall time) is idle: it stops holding the worker's watermark
  // back until a record comes again, and a worker whose partitions are all idle (or that has none)
  // stops holding the other workers' windows back (as Flink's withIdleness). 0: a partition is
  // never idle.
  int idle_ms = 0;
};

// The number of partitions of `topic` (throws if the topic does not exist
// or the broker cannot be reached within the timeout).
int32_t kafka_partition_count(const KafkaConfig& config, const std::string& topic);

// Creates `topic` with `partitions` partitions, replication 1 (throws
// naming the broker's reason, for example that it exists).
void kafka_create_topic(const KafkaConfig& config, const std::string& topic, int32_t partitions);

// Reads partitions of a topic from their beginning to their end.
class KafkaReader {
 public:
  KafkaReader(const KafkaConfig& config, const std::string& topic, std::vector<int32_t> partitions);
  ~KafkaReader();
  KafkaReader(KafkaReader&&) noexcept;
  KafkaReader& operator=(KafkaReader&&) noexcept;

  struct Message {
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms;  // the record's timestamp (-1: none)
    std::string_view value;
  };
  // Up to `max` messages, waiting up to `wait_ms` for the first: calls
  // fn(message) for each (the value is valid during the call only).
  // Returns false once every partition has reached its end (a reader that
  // follows the topic, KafkaConfig::stop, never ends: it returns true).
  bool poll(size_t max, int wait_ms, const std::function<void(const Message&)>& fn);
  // Every partition is at the end of what the topic held when the reader
  // last looked (true until the first message once all reported their end).
  bool caught_up() const;
  // The same for one partition.
  bool caught_up(int32_t partition) const;
  const std::string& topic() const;
  // Reads each partition from the offset given (partition -> next offset;
  // partitions not named: from the beginning), as a fresh reader would.
  void seek(const std::vector<std::pair<int32_t, int64_t>>& offsets);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A transactional producer of one topic.
class KafkaWriter {
 public:
  // Connects and initialises transactions under `transactional_id`
  // (fencing and aborting a transaction an earlier producer with the same
  // id left open), then begins one.
  KafkaWriter(const KafkaConfig& config, const std::string& topic,
              const std::string& transactional_id);
  ~KafkaWriter();  // aborts a transaction left open
  KafkaWriter(const KafkaWriter&) = delete;
  KafkaWriter& operator=(const KafkaWriter&) = delete;

  // timestamp_ms: the message's timestamp (CreateTime; 0: the time of the
  // write); partition: -1 lets the key choose.
  void write(std::string_view key, std::string_view value, int64_t timestamp_ms = 0,
             int32_t partition = -1);
  void flush();   // everything written is in the broker's log (in the open transaction)
  void commit();  // commits the open transaction (everything written)
  // Commits the open transaction with `marker` as consumer group `group`'s
  // offset of the topic's partition 0, atomically (the offsets of a
  // transaction commit with it), then begins the next transaction.
  void commit_marked(const std::string& group, int64_t marker);
  // The marker the last committed transaction of `group` left (-1: none).
  static int64_t committed_marker(const KafkaConfig& config, const std::string& topic,
                                  const std::string& group);
  void abort();  // aborts it
  void begin();  // begins a transaction if none is open
  uint64_t written() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A make_source over a topic, for from<Rec>(...) and the queries.
//
// Watermarks per partition: the source numbers its partitions 0..lanes()-1
// and says which one each record of the last batch came from
// (batch_lanes()); the engine keeps each one's largest event time, and a
// worker's watermark is the smallest over its partitions that are not idle
// (idle_lanes(); KafkaConfig::idle_ms), so records of a partition that
// lags behind another are not late for being read after it.
template <class Rec>
class KafkaSource {
 public:
  KafkaSource(const KafkaConfig& config, const std::string& topic, const CsvSchema<Rec>* schema,
              std::vector<int32_t> partitions)
      : reader_(config, topic, partitions),
        layout_(*schema, "", false,
                config.event_time_from_timestamp ? schema->time_column : std::string_view()),
        stop_(config.stop),
        stamped_(config.event_time_from_timestamp),
        idle_ns_(int64_t{config.idle_ms} * 1'000'000),
        partitions_(std::move(partitions)),
        last_ns_(partitions_.size(), steady_ns()) {
    if (stamped_ && schema->time_column.empty()) {
      throw std::invalid_argument(std::string(schema->name) +
                                  " have no event time column to take from the timestamps");
    }
    for (size_t i = 0; i < partitions_.size(); ++i)
      lane_of_[partitions_[i]] = static_cast<uint32_t>(i);
  }

  // Up to out.size() records, waiting at most 10 ms for the first: 0 and
  // !done() mean none has come yet (the engine polls its flow meanwhile).
  // Following the topic, the input ends once stop() says so; each time the
  // reader catches up with the topic it says how many records it has read.
  size_t operator()(std::span<Rec> out) {
    size_t n = 0;
    lanes_.clear();
    if (!done_ && stop_ && stop_()) {
      done_ = true;
      std::printf("sluice-stream: stopping the input from topic %s partitions %s at %" PRIu64
                  " records\n",
                  reader_.topic().c_str(), partition_list().c_str(), read_);
      std::fflush(stdout);
    }
    if (!done_ && stop_ && partitions_.empty()) {
      // Following with no partition (more workers than partitions): not
      // done before the stop, so that it does not end the job's
      // checkpoints (a worker whose input ended says so, engine.h).
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return 0;
    }
    if (!done_) {
      const int64_t now = idle_ns_ > 0 ? steady_ns() : 0;
      done_ = !reader_.poll(out.size(), 10, [&](const KafkaReader::Message& m) {
        std::string_view line = m.value;
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
        Rec r{};
        if (auto bad = layout_.parse(line, &r)) {
          throw std::runtime_error(where(m) + ": " + bad->message());
        }
        if (stamped_ && (m.timestamp_ms < 0 || !layout_.fill(m.timestamp_ms, &r))) {
          throw std::runtime_error(
              where(m) + ": the message has no timestamp to take the event time from" +
              (m.timestamp_ms < 0 ? std::string() : " (" + std::to_string(m.timestamp_ms) + ")"));
        }
        out[n++] = r;
        next_[m.partition] = m.offset + 1;
        const uint32_t lane = lane_of_[m.partition];
        lanes_.push_back(lane);
        if (idle_ns_ > 0) last_ns_[lane] = now;
      });
      read_ += n;
      if (stop_ && reader_.caught_up() && read_ != reported_) {
        reported_ = read_;
        std::printf("sluice-stream: caught up with topic %s partitions %s: %" PRIu64
                    " records read\n",
                    reader_.topic().c_str(), partition_list().c_str(), read_);
        std::fflush(stdout);
      }
    }
    return n;
  }

  // Every partition has reached its end.
  bool done() const { return done_; }

  // The partitions this source reads (the engine's lanes), the lane of each
  // record the last call returned, and which lanes are idle now.
  int lanes() const { return static_cast<int>(partitions_.size()); }
  std::span<const uint32_t> batch_lanes() const { return lanes_; }
  // A partition is idle once the reader has caught up with its end and no
  // record came from it for KafkaConfig::idle_ms: one whose records are
  // not fetched yet is slow, not idle.
  void idle_lanes(std::vector<char>& idle) const {
    idle.assign(partitions_.size(), 0);
    if (idle_ns_ <= 0) return;
    const int64_t now = steady_ns();
    for (size_t i = 0; i < partitions_.size(); ++i) {
      idle[i] = now - last_ns_[i] >= idle_ns_ && reader_.caught_up(partitions_[i]);
    }
  }

  // Where the reader is: "partition:next-offset,..." for the partitions it
  // read from (a checkpoint's input position, engine.h); seek() goes back
  // there. The interleaving of partitions is the broker's, so a count of
  // records could not say this.
  std::string position() const { return detail::format_offsets(next_); }
  void seek(const std::string& position) {
    std::vector<std::pair<int32_t, int64_t>> offsets;
    for (const auto& [p, off] : detail::parse_offsets(position)) offsets.emplace_back(p, off);
    reader_.seek(offsets);
    next_.clear();
    for (const auto& [p, off] : offsets) next_[p] = off;
    done_ = false;
  }

 private:
  static int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::string where(const KafkaReader::Message& m) const {
    return "topic " + reader_.topic() + " partition " + std::to_string(m.partition) + " offset " +
           std::to_string(m.offset);
  }
  std::string partition_list() const {
    std::string s;
    for (int32_t p : partitions_) {
      if (!s.empty()) s += ',';
      s += std::to_string(p);
    }
    return s;
  }

  KafkaReader reader_;
  CsvLayout<Rec> layout_;
  std::function<bool()> stop_;  // following the topic (KafkaConfig::stop)
  bool stamped_;                // event time from the messages' timestamps
  int64_t idle_ns_;             // KafkaConfig::idle_ms (0: never idle)
  std::vector<int32_t> partitions_;
  std::map<int32_t, uint32_t> lane_of_;  // partition -> its index in partitions_
  std::vector<int64_t> last_ns_;         // per lane: when its last record came (steady clock)
  std::vector<uint32_t> lanes_;          // the last batch's lanes, a record each
  bool done_ = false;
  uint64_t read_ = 0;                // records returned
  uint64_t reported_ = UINT64_MAX;   // read_ at the last "caught up" line
  std::map<int32_t, int64_t> next_;  // partition -> offset after the last record returned
};

template <class Rec>
class KafkaInput {
 public:
  // schema: kept by pointer (it must outlive the input).
  KafkaInput(KafkaConfig config, std::string topic, const CsvSchema<Rec>* schema)
      : config_(std::move(config)), topic_(std::move(topic)), schema_(schema) {
    if (schema_ == nullptr) throw std::invalid_argument("Kafka input needs its records' schema");
  }
  // Reads the topic's partition count (throws if it cannot); factory() uses it.
  void connect() { partitions_ = kafka_partition_count(config_, topic_); }
  int32_t partitions() const { return partitions_; }
  auto factory() const {
    return [in = *this](uint32_t g, uint32_t workers) {
      std::vector<int32_t> mine;
      for (int32_t p = 0; p < in.partitions_; ++p) {
        if (static_cast<uint32_t>(p) % workers == g) mine.push_back(p);
      }
      return KafkaSource<Rec>(in.config_, in.topic_, in.schema_, std::move(mine));
    };
  }

 private:
  KafkaConfig config_;
  std::string topic_;
  const CsvSchema<Rec>* schema_;
  int32_t partitions_ = 0;
};

// Rows to a topic, one transactional producer per worker of this rank.
class KafkaSink {
 public:
  // Workers [first, first + count) of this rank; their producers are made
  // (and their transactions begun) here, so that a bad broker fails before
  // the query starts.
  // per_checkpoint: a transaction per checkpoint interval (engine.h calls
  // prepare, committed and restore), as below. by_window: each message's
  // key is "window_start,window_end,key" (upsert output: a compacted topic,
  // or any consumer that keeps the last value per key, holds each window's
  // final row), else the row's key alone.
  KafkaSink(const KafkaConfig& config, const std::string& topic,
            const std::string& transactional_id, uint32_t first, uint32_t count,
            bool per_checkpoint = false, bool by_window = false);
  ~KafkaSink();  // aborts what was not committed

  template <class R>
  void operator()(uint32_t worker, const Row<R>& row) {
    Slot& s = *slots_[worker - first_];
    const std::string_view line = s.text.format(row);
    if (!per_checkpoint_) {
      s.writer->write(message_key(line), line);
      return;
    }
    s.pending.append(line).push_back('\n');
    // Between prepare and committed a row belongs to the next transaction,
    // which begins only at the commit: held until then.
    if (s.held)
      s.held_rows.append(line).push_back('\n');
    else
      s.writer->write(message_key(line), line);
  }

  // With checkpoints. A worker's rows since the last checkpoint are in its
  // open transaction. prepare (at checkpoint c, before the snapshot) flushes
  // them into the log and returns them, with c, as the snapshot's token;
  // committed (once c is complete) commits the transaction with c as its
  // marker (the offset of group "<id>-<worker>", which commits atomically
  // with it) and begins the next, with the rows emitted since prepare
  // (held in memory meanwhile: the engine goes on while c completes). restore (from checkpoint c)
  // finds the marker: if c's transaction committed, nothing is to do; if the worker died between
  // c's completion and that commit (the new producer's fencing aborted it), it writes the token's
  // rows again and commits them with c.
  std::string prepare(uint32_t worker, uint64_t c);
  void committed(uint32_t worker, uint64_t c);
  void restore(uint32_t worker, const std::string& token);
  // The same for a checkpoint taken by another number of workers, restored
  // by `workers`: `tokens` are the old workers' (by old worker number). An
  // old worker g whose transaction of c never committed (it died between
  // c's completion and that commit) has its rows written again by new
  // worker g % workers, committed with g's marker.
  void restore_rescaled(uint32_t worker, uint32_t workers,
                        const std::vector<std::pair<uint32_t, std::string>>& tokens);
  // Worker w's transactional id (and its commit marker's group) under
  // `transactional_id`.
  static std::string worker_id(const std::string& transactional_id, uint32_t worker) {
    return transactional_id + "-" + std::to_string(worker);
  }
  // Fences `workers` of the output under `transactional_id` that no sink
  // writes as any more (a rescale to fewer workers after a loss): a
  // transaction the lost rank left open would hold read_committed readers
  // back until the broker's timeout; a producer of each id aborts it.
  static void fence(const KafkaConfig& config, const std::string& topic,
                    const std::string& transactional_id, const std::vector<uint32_t>& workers);
  // Rows written again by restore() on this rank (for tests and reports).
  uint64_t rewritten() const { return rewritten_; }
  void flush();  // every worker's rows in the broker's log, still uncommitted
  void commit();
  void abort();
  uint64_t written() const;

 private:
  struct Slot {
    std::unique_ptr<KafkaWriter> writer;
    std::string pending;    // per_checkpoint: the rows since the last checkpoint, a line each
    bool held = false;      // prepared, not yet committed: rows wait in held_rows
    std::string held_rows;  // a line each
    RowText text;
  };
  // A row's message key: its first three fields (window_start,window_end,
  // key) by window, else the third (the key).
  std::string_view message_key(std::string_view line) const {
    const size_t k0 = line.find(',', line.find(',') + 1) + 1;
    const size_t k1 = line.find(',', k0);
    return by_window_ ? line.substr(0, k1) : line.substr(k0, k1 - k0);
  }
  // Writes each line of `rows` (one a row, '\n'-ended) into s's open
  // transaction; how many.
  uint64_t write_lines(Slot& s, std::string_view rows);
  // Begins afresh: what the slot held is dropped and its open transaction
  // (rows emitted after the checkpoint being restored) aborted.
  void reset(Slot& s);
  // If worker g's checkpoint, whose token is `token`, completed but its
  // transaction never committed: writes its rows (*rows of them, maybe 0)
  // again on `s` and commits them with g's marker; the checkpoint's id if
  // it did, else 0.
  int64_t rewrite_uncommitted(Slot& s, uint32_t g, const std::string& token, uint64_t* rows);
  std::string group_of(uint32_t worker) const { return worker_id(transactional_id_, worker); }
  KafkaConfig config_;
  std::string topic_, transactional_id_;
  uint32_t first_;
  bool per_checkpoint_;
  bool by_window_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<uint64_t> rewritten_{0};
};

}  // namespace sluice::stream
