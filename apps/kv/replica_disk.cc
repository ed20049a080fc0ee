#include "replica_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "codec.h"

namespace kv {
namespace {

constexpr uint64_t kZerosAhead = uint64_t{1} << 20;  // 1 MiB: about a millisecond to write and sync

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return;
  struct stat st;
  if (errno == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  throw sluice::Error(
      sluice::ErrorCode::kResource,
      "sluice-kv: --data-dir: cannot create the directory " + path + ": " +
          (errno == EEXIST ? "a file of that name is in the way" : std::strerror(errno)));
}

// The ranks of DIR's rank-N directories that hold a log (a directory
// alone, made by a job that could not start, says nothing).
std::vector<uint32_t> rank_directories(const std::string& dir) {
  std::vector<uint32_t> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    throw sluice::Error(sluice::ErrorCode::kResource,
                        "sluice-kv: --data-dir: cannot read " + dir + ": " + std::strerror(errno));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("rank-", 0) != 0 || name.size() == 5) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos || name.size() > 14) continue;
    if (exists(dir + "/" + name + "/wal"))
      out.push_back(static_cast<uint32_t>(std::stoul(name.substr(5))));
  }
  ::closedir(d);
  return out;
}

std::string as_string(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// A record (replica_disk.h): a Multi-Paxos replica's as an Accept, a
// NOPaxos replica's as a StartView.
MsgType record_type(bool nopaxos) { return nopaxos ? MsgType::kStartView : MsgType::kAccept; }

std::string encode_changes(const DurableChanges& c, bool nopaxos) {
  Message m;
  m.type = record_type(nopaxos);
  m.view = c.ballot;
  m.a = c.commit;
  m.flag = c.recovering;
  if (nopaxos) {
    m.session = c.session;
    m.b = c.normal_view;
    m.c = c.normal_session;
    if (c.rewrite && c.snapshot_slot > 0) m.entries.push_back(c.snapshot_entry);
  }
  m.entries.insert(m.entries.end(), c.entries.begin(), c.entries.end());
  std::vector<std::byte> bytes;
  encode(m, bytes);
  return as_string(bytes);
}

}  // namespace

ReplicaDisk::ReplicaDisk(const DiskOptions& options, uint32_t replicas, uint32_t rank)
    : options_(options), replicas_(replicas), rank_(rank) {
  make_directory(options.dir);
  for (uint32_t r : rank_directories(options.dir)) {
    if (r >= replicas)
      throw RecordFileError("sluice-kv: --data-dir " + options.dir + " holds rank-" +
                            std::to_string(r) +
                            ": it was written by a cluster with more replicas than this job's " +
                            std::to_string(replicas) +
                            "; use the --replicas it was written with, or another --data-dir");
  }
  rank_dir_ = options.dir + "/rank-" + std::to_string(rank);
  make_directory(rank_dir_);
  const std::string lock = rank_dir_ + "/lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0)
    throw sluice::Error(sluice::ErrorCode::kResource,
                        "sluice-kv: cannot create " + lock + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw sluice::Error(sluice::ErrorCode::kResource,
                        "sluice-kv: " + rank_dir_ + " is in use by another process (it holds " +
                            lock + "); two jobs cannot share a --data-dir");
  }
  const std::string wal = rank_dir_ + "/wal", snapshot = rank_dir_ + "/snapshot";
  const bool have_wal = exists(wal), have_snapshot = exists(snapshot);
  if (!have_wal && have_snapshot)
    throw RecordFileError("sluice-kv: " + snapshot + " is there but " + wal +
                          " is not: the replica's log is missing, so its state cannot be "
                          "restored (move the directory away to start it from the others)");
  if (!have_wal) return;
  RestoredState st;
  if (have_snapshot) {
    RecordFile f = read_record_file(snapshot, RecordFileKind::kSnapshot, replicas, rank);
    if (f.records.size() != 1 || f.torn_bytes != 0 || f.records[0].size() < 8)
      throw RecordFileError("sluice-kv: " + snapshot + " at offset " +
                            std::to_string(f.good_bytes) +
                            ": not one whole snapshot record (snapshots are written whole, so "
                            "this is damage, not a crash)");
    std::memcpy(&st.snapshot_slot, f.records[0].data(), 8);
    st.snapshot = f.records[0].substr(8);
    std::string why;
    if (!st.store.restore(st.snapshot, &why))
      throw RecordFileError("sluice-kv: " + snapshot + " at offset " +
                            std::to_string(f.offsets[0] + kRecordHeaderBytes + 8) +
                            ": the store's snapshot does not read back: " + why);
    snapshot_slot_ = st.snapshot_slot;
  }
  RecordFile f = read_record_file(wal, RecordFileKind::kLog, replicas, rank);
  runs_ = f.header.run;
  std::map<uint64_t, Entry> entries;
  for (size_t i = 0; i < f.records.size(); ++i) {
    Message m;
    std::string why;
    const std::string& rec = f.records[i];
    const bool read =
        decode(std::as_bytes(std::span<const char>(rec.data(), rec.size())), &m, &why);
    if (read && m.type == record_type(!options.nopaxos))
      throw RecordFileError(
          "sluice-kv: " + wal + " was written by " + (options.nopaxos ? "Multi-Paxos" : "NOPaxos") +
          " replicas: start the job with --protocol " +
          (options.nopaxos ? "multipaxos" : "nopaxos") + " as it was, or use another --data-dir");
    if (!read || m.type != record_type(options.nopaxos))
      throw RecordFileError("sluice-kv: " + wal + " at offset " + std::to_string(f.offsets[i]) +
                            ": a record whose checksum matches does not read back (" +
                            (why.empty() ? "not a log record" : why) + ")");
    st.ballot = m.view;
    // (A NOPaxos sync point is the last record's: each file begins with a
    // rewrite, after which it only grows.)
    st.commit = options.nopaxos ? m.a : std::max(st.commit, m.a);
    st.session = m.session;
    st.normal_view = m.b;
    st.normal_session = m.c;
    st.recovering = m.flag;
    for (Entry& e : m.entries) entries[e.slot] = std::move(e);
  }
  for (auto& [s, e] : entries) {
    if (options.nopaxos && s == st.snapshot_slot && s > 0) st.snapshot_entry = e;
    if (s <= st.snapshot_slot) continue;
    // A NOPaxos log is dense from its snapshot on: a hole is damage.
    if (options.nopaxos && s != st.snapshot_slot + st.entries.size() + 1)
      throw RecordFileError("sluice-kv: " + wal + ": the log has no entry for slot " +
                            std::to_string(st.snapshot_slot + st.entries.size() + 1) +
                            " but one for slot " + std::to_string(s) +
                            " (records are never written so: this is damage)");
    st.entries.push_back(std::move(e));
  }
  loaded_ =
      (st.snapshot_slot > 0
           ? "a snapshot of slot " + std::to_string(st.snapshot_slot) + " and " +
                 std::to_string(st.entries.size()) + " log entries after it"
           : "no snapshot, " + std::to_string(st.entries.size()) + " log entries") +
      (options.nopaxos
           ? ", view " + std::to_string(st.ballot) + " of session " + std::to_string(st.session) +
                 ", sync point " + std::to_string(st.commit) +
                 (st.recovering ? " (it was recovering from the others)" : "")
           : ", ballot " + std::to_string(st.ballot) + ", commit index " +
                 std::to_string(st.commit) +
                 (st.recovering ? " (it was recovering from the others)" : "")) +
      (f.torn_bytes > 0 ? " (a torn tail of " + std::to_string(f.torn_bytes) + " bytes at offset " +
                              std::to_string(f.good_bytes) + " dropped: a write a crash cut short)"
                        : "");
  restored_ = std::move(st);
}

ReplicaDisk::~ReplicaDisk() {
  log_ = RecordWriter();  // syncs what is left, while the directory is still locked
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void ReplicaDisk::begin_run(uint32_t run, const DurableChanges& state) {
  runs_ = run;
  snapshot_slot_ = 0;  // (written again: its header names the run)
  rewrite(state);
}

void ReplicaDisk::save(const DurableChanges& changes) {
  if (changes.rewrite) return rewrite(changes);
  log_.append(encode_changes(changes, options_.nopaxos));
  log_.commit();
}

void ReplicaDisk::rewrite(const DurableChanges& state) {
  const std::string snapshot = rank_dir_ + "/snapshot";
  if (state.snapshot_slot == 0) {
    if (exists(snapshot)) {
      if (::unlink(snapshot.c_str()) != 0)
        throw sluice::Error(sluice::ErrorCode::kResource,
                            "sluice-kv: cannot remove " + snapshot + ": " + std::strerror(errno));
      sync_directory(rank_dir_);
    }
  } else if (state.snapshot_slot != snapshot_slot_) {
    std::string record(8, '\0');
    std::memcpy(record.data(), &state.snapshot_slot, 8);
    record += state.snapshot;
    std::string file = encode_header({RecordFileKind::kSnapshot, replicas_, rank_, runs_});
    append_record(file, record);
    write_file_durably(snapshot, file);
  }
  snapshot_slot_ = state.snapshot_slot;
  const std::string wal = rank_dir_ + "/wal";
  std::string file = encode_header({RecordFileKind::kLog, replicas_, rank_, runs_});
  append_record(file, encode_changes(state, options_.nopaxos));
  write_file_durably(wal, file);
  // With --fsync always, a mebibyte of zeros ahead of the records: each
  // round's fdatasync then writes no file size (RecordWriterOptions).
  log_ = RecordWriter(
      wal, file.size(),
      RecordWriterOptions{options_.fsync, options_.hold_unsynced, options_.sync_delay_us,
                          options_.fsync == FsyncMode::kAlways ? kZerosAhead : 0});
}

}  // namespace kv
