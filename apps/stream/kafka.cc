#include "stream/kafka.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace sluice::stream {

namespace {

struct KafkaDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using KafkaPtr = std::unique_ptr<rd_kafka_t, KafkaDeleter>;

struct ErrorDeleter {
  void operator()(rd_kafka_error_t* e) const { rd_kafka_error_destroy(e); }
};
using ErrorPtr = std::unique_ptr<rd_kafka_error_t, ErrorDeleter>;

// A client of the broker with the config's properties and `extra`.
KafkaPtr make_client(rd_kafka_type_t type, const KafkaConfig& config,
                     std::vector<std::pair<std::string, std::string>> extra) {
  if (config.bootstrap.empty()) throw std::invalid_argument("Kafka needs a bootstrap server");
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  extra.insert(extra.begin(), {"bootstrap.servers", config.bootstrap});
  extra.insert(extra.end(), config.properties.begin(), config.properties.end());
  for (const auto& [name, value] : extra) {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      throw std::invalid_argument("Kafka property " + name + "=" + value + ": " + err);
    }
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof err);  // takes conf on success
  if (rk == nullptr) {
    rd_kafka_conf_destroy(conf);
    throw std::runtime_error("cannot make a Kafka client of " + config.bootstrap + ": " + err);
  }
  return KafkaPtr(rk);
}

// Asks for `topic`'s metadata, so that the client knows it before the first
// produce or fetch (otherwise librdkafka waits for its 1 s topic scan).
void learn_topic(rd_kafka_t* rk, const std::string& topic, int timeout_ms) {
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk, 0, t, &md, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_metadata_destroy(md);
  }
  rd_kafka_topic_destroy(t);
}

std::string describe(rd_kafka_error_t* e) {
  return std::string(rd_kafka_error_name(e)) + ": " + rd_kafka_error_string(e);
}

}  // namespace

int32_t kafka_partition_count(const KafkaConfig& config, const std::string& topic) {
  KafkaPtr rk = make_client(RD_KAFKA_PRODUCER, config, {{"allow.auto.create.topics", "false"}});
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk.get(), 0, t, &md, config.timeout_ms);
  rd_kafka_topic_destroy(t);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("cannot read the metadata of Kafka topic " + topic + " from " +
                             config.bootstrap + ": " + rd_kafka_err2str(err));
  }
  int32_t n = -1;
  std::string why;
  for (int i = 0; i < md->topic_cnt; ++i) {
    if (topic != md->topics[i].topic) continue;
    if (md->topics[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      why = rd_kafka_err2str(md->topics[i].err);
    } else {
      n = md->topics[i].partition_cnt;
    }
  }
  rd_kafka_metadata_destroy(md);
  if (n <= 0) {
    throw std::runtime_error("Kafka topic " + topic + " at " + config.bootstrap +
                             (why.empty() ? " has no partitions" : ": " + why));
  }
  return n;
}

void kafka_create_topic(const KafkaConfig& config, const std::string& topic, int32_t partitions) {
  KafkaPtr rk = make_client(RD_KAFKA_PRODUCER, config, {});
  char err[512];
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, err, sizeof err);
  if (nt == nullptr) throw std::invalid_argument("Kafka topic " + topic + ": " + err);
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk.get());
  rd_kafka_CreateTopics(rk.get(), &nt, 1, nullptr, q);
  rd_kafka_NewTopic_destroy(nt);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, config.timeout_ms);
  std::string why;
  if (ev == nullptr) {
    why = "no answer within " + std::to_string(config.timeout_ms) + " ms";
  } else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    why = rd_kafka_event_error_string(ev);
  } else {
    size_t n = 0;
    const rd_kafka_topic_result_t** res =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
    for (size_t i = 0; i < n; ++i) {
      if (rd_kafka_topic_result_error(res[i]) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        why = std::string(rd_kafka_err2name(rd_kafka_topic_result_error(res[i]))) + ": " +
              rd_kafka_topic_result_error_string(res[i]);
      }
    }
  }
  if (ev != nullptr) rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(q);
  if (!why.empty()) {
    throw std::runtime_error("cannot create Kafka topic " + topic + " at " + config.bootstrap +
                             ": " + why);
  }
}

// ------------------------------------------------------------------ reader

struct KafkaReader::Impl {
  std::string topic;
  std::vector<int32_t> partitions;
  std::map<int32_t, int64_t> start;  // seek(): partition -> first offset to read
  bool assigned = false;
  void assign();
  KafkaPtr rk;
  rd_kafka_queue_t* queue = nullptr;
  size_t open = 0;           // partitions not at their end yet
  bool follow = false;       // an unbounded read: a partition's end does not end it
  std::set<int32_t> at_end;  // partitions whose end came after their last message
  std::vector<rd_kafka_message_t*> batch;
  ~Impl() {
    if (queue != nullptr) rd_kafka_queue_destroy(queue);
    if (rk) rd_kafka_consumer_close(rk.get());
  }
};

KafkaReader::KafkaReader(const KafkaConfig& config, const std::string& topic,
                         std::vector<int32_t> partitions)
    : impl_(std::make_unique<Impl>()) {
  impl_->topic = topic;
  impl_->partitions = partitions;
  impl_->open = partitions.size();
  impl_->follow = static_cast<bool>(config.stop);
  // Offsets are never committed to the broker: a reader starts where it is
  // told (the beginning), and a job's position belongs to the job.
  impl_->rk = make_client(RD_KAFKA_CONSUMER, config,
                          {{"group.id", "sluice-stream-" + topic},
                           {"enable.auto.commit", "false"},
                           {"enable.auto.offset.store", "false"},
                           {"enable.partition.eof", "true"},
                           {"isolation.level", "read_committed"},
                           {"fetch.wait.max.ms", "50"},
                           {"auto.offset.reset", "earliest"}});
  if (partitions.empty()) return;
  learn_topic(impl_->rk.get(), topic, config.timeout_ms);
  impl_->queue = rd_kafka_queue_get_consumer(impl_->rk.get());
  // The partitions are assigned at the first poll, from the offsets seek()
  // set by then (else the beginning): a consumer that fetched from the
  // beginning first would hold those messages when told to start elsewhere.
}

void KafkaReader::seek(const std::vector<std::pair<int32_t, int64_t>>& offsets) {
  Impl& s = *impl_;
  if (s.assigned) throw std::logic_error("KafkaReader::seek after the first poll");
  for (const auto& [p, off] : offsets) s.start[p] = off;
}

void KafkaReader::Impl::assign() {
  assigned = true;
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size()));
  for (int32_t p : partitions) {
    const auto it = start.find(p);
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset =
        it == start.end() ? RD_KAFKA_OFFSET_BEGINNING : it->second;
  }
  const rd_kafka_resp_err_t err = rd_kafka_assign(rk.get(), list);
  rd_kafka_topic_partition_list_destroy(list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("cannot assign partitions of Kafka topic " + topic + ": " +
                             rd_kafka_err2str(err));
  }
}

KafkaReader::~KafkaReader() = default;
KafkaReader::KafkaReader(KafkaReader&&) noexcept = default;
KafkaReader& KafkaReader::operator=(KafkaReader&&) noexcept = default;

const std::string& KafkaReader::topic() const { return impl_->topic; }

bool KafkaReader::poll(size_t max, int wait_ms, const std::function<void(const Message&)>& fn) {
  Impl& s = *impl_;
  if (s.open == 0) return false;
  if (!s.assigned) s.assign();
  s.batch.resize(std::max<size_t>(1, max));
  const ssize_t n = rd_kafka_consume_batch_queue(s.queue, wait_ms, s.batch.data(), s.batch.size());
  if (n < 0) {
    throw std::runtime_error("reading Kafka topic " + s.topic + ": " +
                             rd_kafka_err2str(rd_kafka_last_error()));
  }
  std::string error;
  size_t i = 0;
  try {
    for (; i < static_cast<size_t>(n); ++i) {
      rd_kafka_message_t* m = s.batch[i];
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        s.at_end.insert(m->partition);
        if (s.open > 0 && !s.follow) --s.open;
      } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (error.empty()) {
          error = "reading Kafka topic " + s.topic + " partition " + std::to_string(m->partition) +
                  ": " + rd_kafka_message_errstr(m);
        }
      } else if (error.empty()) {
        s.at_end.erase(m->partition);
        fn(Message{m->partition, m->offset, rd_kafka_message_timestamp(m, nullptr),
                   std::string_view(static_cast<const char*>(m->payload), m->len)});
      }
      rd_kafka_message_destroy(m);
    }
  } catch (...) {
    // fn threw on message i, before it was destroyed: every message held
    // keeps the client from ever being destroyed.
    for (; i < static_cast<size_t>(n); ++i) rd_kafka_message_destroy(s.batch[i]);
    throw;
  }
  if (!error.empty()) throw std::runtime_error(error);
  return s.follow || s.open > 0 || n > 0;
}

bool KafkaReader::caught_up() const { return impl_->at_end.size() == impl_->partitions.size(); }
bool KafkaReader::caught_up(int32_t partition) const { return impl_->at_end.count(partition) != 0; }

// ------------------------------------------------------------------ writer

struct KafkaWriter::Impl {
  std::string topic, id;
  int timeout_ms = 0;
  KafkaPtr rk;
  bool open = false;  // a transaction is begun and not ended
  uint64_t written = 0;

  [[noreturn]] void fail(const std::string& what, rd_kafka_error_t* e) {
    const std::string msg = "Kafka transactional producer " + id + " (topic " + topic +
                            "): " + what + ": " + describe(e);
    rd_kafka_error_destroy(e);
    throw std::runtime_error(msg);
  }
  void begin() {
    if (rd_kafka_error_t* e = rd_kafka_begin_transaction(rk.get())) fail("begin", e);
    open = true;
  }
};

KafkaWriter::KafkaWriter(const KafkaConfig& config, const std::string& topic,
                         const std::string& transactional_id)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.topic = topic;
  s.id = transactional_id;
  s.timeout_ms = config.timeout_ms;
  s.rk = make_client(RD_KAFKA_PRODUCER, config,
                     {{"transactional.id", transactional_id},
                      {"enable.idempotence", "true"},
                      {"linger.ms", "5"},
                      {"transaction.timeout.ms", "60000"}});
  if (rd_kafka_error_t* e = rd_kafka_init_transactions(s.rk.get(), s.timeout_ms)) {
    s.fail("init_transactions", e);
  }
  learn_topic(s.rk.get(), topic, s.timeout_ms);
  s.begin();
}

KafkaWriter::~KafkaWriter() {
  if (impl_ && impl_->open) {
    if (rd_kafka_error_t* e = rd_kafka_abort_transaction(impl_->rk.get(), impl_->timeout_ms)) {
      rd_kafka_error_destroy(e);  // the broker aborts it at its timeout, or the next init fences it
    }
  }
}

void KafkaWriter::write(std::string_view key, std::string_view value, int64_t timestamp_ms,
                        int32_t partition) {
  Impl& s = *impl_;
  while (true) {
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        s.rk.get(), RD_KAFKA_V_TOPIC(s.topic.c_str()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_PARTITION(partition < 0 ? RD_KAFKA_PARTITION_UA : partition),
        RD_KAFKA_V_TIMESTAMP(timestamp_ms),
        RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      throw std::runtime_error("Kafka transactional producer " + s.id + " (topic " + s.topic +
                               "): produce: " + rd_kafka_err2str(err));
    }
    rd_kafka_poll(s.rk.get(), 10);  // the local queue is full: let deliveries drain it
  }
  rd_kafka_poll(s.rk.get(), 0);
  ++s.written;
}

void KafkaWriter::flush() {
  Impl& s = *impl_;
  const rd_kafka_resp_err_t err = rd_kafka_flush(s.rk.get(), s.timeout_ms);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("Kafka transactional producer " + s.id + " (topic " + s.topic +
                             "): flush: " + rd_kafka_err2str(err));
  }
}

void KafkaWriter::commit_marked(const std::string& group, int64_t marker) {
  Impl& s = *impl_;
  if (!s.open) throw std::logic_error("KafkaWriter::commit_marked: no open transaction");
  rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(offsets, s.topic.c_str(), 0)->offset = marker;
  rd_kafka_consumer_group_metadata_t* cgm = rd_kafka_consumer_group_metadata_new(group.c_str());
  rd_kafka_error_t* e =
      rd_kafka_send_offsets_to_transaction(s.rk.get(), offsets, cgm, s.timeout_ms);
  rd_kafka_consumer_group_metadata_destroy(cgm);
  rd_kafka_topic_partition_list_destroy(offsets);
  if (e != nullptr) {
    s.open = false;
    rd_kafka_error_t* a = rd_kafka_abort_transaction(s.rk.get(), s.timeout_ms);
    if (a != nullptr) rd_kafka_error_destroy(a);
    s.fail("send_offsets_to_transaction", e);
  }
  commit();
  s.begin();
}

int64_t KafkaWriter::committed_marker(const KafkaConfig& config, const std::string& topic,
                                      const std::string& group) {
  KafkaPtr rk = make_client(RD_KAFKA_CONSUMER, config,
                            {{"group.id", group},
                             {"enable.auto.commit", "false"},
                             {"isolation.level", "read_committed"}});
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), 0);
  const rd_kafka_resp_err_t err = rd_kafka_committed(rk.get(), list, config.timeout_ms);
  const int64_t marker = list->elems[0].offset;
  const rd_kafka_resp_err_t perr = list->elems[0].err;
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(rk.get());
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR || perr != RD_KAFKA_RESP_ERR_NO_ERROR) {
    throw std::runtime_error("cannot read the commit marker of " + group + " on Kafka topic " +
                             topic + ": " +
                             rd_kafka_err2str(err != RD_KAFKA_RESP_ERR_NO_ERROR ? err : perr));
  }
  return marker < 0 ? -1 : marker;
}

void KafkaWriter::commit() {
  Impl& s = *impl_;
  if (!s.open) throw std::logic_error("KafkaWriter::commit: no open transaction");
  s.open = false;
  if (rd_kafka_error_t* e = rd_kafka_commit_transaction(s.rk.get(), s.timeout_ms)) {
    if (rd_kafka_error_txn_requires_abort(e)) {
      rd_kafka_error_t* a = rd_kafka_abort_transaction(s.rk.get(), s.timeout_ms);
      if (a != nullptr) rd_kafka_error_destroy(a);
    }
    s.fail("commit", e);
  }
}

void KafkaWriter::begin() {
  if (!impl_->open) impl_->begin();
}

void KafkaWriter::abort() {
  Impl& s = *impl_;
  if (!s.open) return;
  s.open = false;
  if (rd_kafka_error_t* e = rd_kafka_abort_transaction(s.rk.get(), s.timeout_ms)) {
    s.fail("abort", e);
  }
}

uint64_t KafkaWriter::written() const { return impl_->written; }

// -------------------------------------------------------------------- sink

KafkaSink::KafkaSink(const KafkaConfig& config, const std::string& topic,
                     const std::string& transactional_id, uint32_t first, uint32_t count,
                     bool per_checkpoint, bool by_window)
    : config_(config),
      topic_(topic),
      transactional_id_(transactional_id),
      first_(first),
      per_checkpoint_(per_checkpoint),
      by_window_(by_window) {
  for (uint32_t w = first; w < first + count; ++w) {
    auto slot = std::make_unique<Slot>();
    slot->writer = std::make_unique<KafkaWriter>(config, topic, worker_id(transactional_id, w));
    slots_.push_back(std::move(slot));
  }
}

KafkaSink::~KafkaSink() = default;

void KafkaSink::fence(const KafkaConfig& config, const std::string& topic,
                      const std::string& transactional_id, const std::vector<uint32_t>& workers) {
  for (uint32_t w : workers) {
    // (Constructed, it has fenced the id and begun a transaction of its
    // own, which its destructor aborts.)
    KafkaWriter writer(config, topic, worker_id(transactional_id, w));
  }
}

std::string KafkaSink::prepare(uint32_t worker, uint64_t c) {
  Slot& s = *slots_[worker - first_];
  s.writer->flush();
  std::string token = std::to_string(c) + "\n" + s.pending;
  s.pending.clear();
  s.held = true;
  return token;
}

void KafkaSink::committed(uint32_t worker, uint64_t c) {
  Slot& s = *slots_[worker - first_];
  s.writer->commit_marked(group_of(worker), static_cast<int64_t>(c));
  s.held = false;
  write_lines(s, s.held_rows);
  s.held_rows.clear();
}

uint64_t KafkaSink::write_lines(Slot& s, std::string_view rows) {
  uint64_t n = 0;
  for (size_t at = 0; at < rows.size(); ++n) {
    const size_t end = rows.find('\n', at);
    const std::string_view line = rows.substr(at, end - at);
    s.writer->write(message_key(line), line);
    at = end + 1;
  }
  return n;
}

void KafkaSink::reset(Slot& s) {
  s.pending.clear();
  s.held = false;
  s.held_rows.clear();
  s.writer->abort();
  s.writer->begin();
}

int64_t KafkaSink::rewrite_uncommitted(Slot& s, uint32_t g, const std::string& token,
                                       uint64_t* rows) {
  *rows = 0;
  if (token.empty()) return 0;  // a fresh start
  const size_t nl = token.find('\n');
  const auto c = static_cast<int64_t>(std::stoull(token.substr(0, nl)));
  if (KafkaWriter::committed_marker(config_, topic_, group_of(g)) >= c) return 0;
  *rows = write_lines(s, std::string_view(token).substr(nl + 1));
  rewritten_ += *rows;
  s.writer->commit_marked(group_of(g), c);
  return c;
}

void KafkaSink::restore_rescaled(uint32_t worker, uint32_t workers,
                                 const std::vector<std::pair<uint32_t, std::string>>& tokens) {
  Slot& s = *slots_[worker - first_];
  reset(s);
  // An old worker's checkpoint completed but its transaction never
  // committed (it died between the two): its rows, held in its token, are
  // written again by the new worker g % workers, committed with the old
  // worker's marker in one transaction (as restore() does for its own), so
  // that they are in the topic once whatever size restores them.
  for (const auto& [g, token] : tokens) {
    if (g % workers != worker) continue;
    uint64_t rows = 0;
    if (const int64_t c = rewrite_uncommitted(s, g, token, &rows); c != 0) {
      std::fprintf(stderr,
                   "sluice-stream: worker %u wrote the rows of old worker %u at checkpoint %" PRId64
                   " again (%" PRIu64 " rows): its transaction had not committed\n",
                   worker, g, c, rows);
    }
  }
}

void KafkaSink::restore(uint32_t worker, const std::string& token) {
  Slot& s = *slots_[worker - first_];
  // A survivor's open transaction holds rows emitted after the checkpoint:
  // the restored run emits them again.
  reset(s);
  // Checkpoint c completed, but its transaction never committed: its rows
  // again, committed with c now.
  uint64_t rows = 0;
  if (const int64_t c = rewrite_uncommitted(s, worker, token, &rows); c != 0) {
    std::fprintf(stderr,
                 "sluice-stream: worker %u wrote the rows of checkpoint %" PRId64 " again (%" PRIu64
                 " rows): its transaction had not committed\n",
                 worker, c, rows);
  }
}

void KafkaSink::flush() {
  for (auto& s : slots_) s->writer->flush();
}

void KafkaSink::commit() {
  for (auto& s : slots_) s->writer->commit();
}

void KafkaSink::abort() {
  for (auto& s : slots_) s->writer->abort();
}

uint64_t KafkaSink::written() const {
  uint64_t n = 0;
  for (const auto& s : slots_) n += s->writer->written();
  return n;
}

}  // namespace sluice::stream
