// apps/kv/incoming_snapshot.h: a snapshot arriving in chunks (message.h,
// Snapshots), for either protocol: the chunks of one snapshot appended in
// order, the rest ignored, and the whole restored into a Store.
//
// A first chunk (offset 0) of another snapshot starts it afresh; a first
// chunk of the same one while later bytes are held answers a request sent
// again, and the transfer goes on from what is held (which resumes one that
// lost a chunk). Thread safety: none.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "message.h"
#include "store.h"

namespace kv {

class IncomingSnapshot {
 public:
  enum class Step {
    kIgnored,   // not a chunk this transfer can use
    kAskNext,   // ask its sender for the bytes from offset()
    kComplete,  // store() holds the whole snapshot of slot()
  };

  // Takes chunk `m` (kSnapshotChunk: slot a, offset b, total c, blob);
  // *appended says whether its bytes were new.
  Step add(const Message& m, bool* appended = nullptr) {
    if (appended != nullptr) *appended = false;
    if (m.b == 0 && m.a != slot_) {
      slot_ = m.a;
      bytes_.clear();
    }
    if (m.a != slot_) return Step::kIgnored;  // a piece of an older one
    if (m.b == bytes_.size()) {
      bytes_.append(m.blob);
      if (appended != nullptr) *appended = true;
    } else if (m.b != 0) {
      return Step::kIgnored;  // a piece already held (or out of order)
    }
    if (bytes_.size() < m.c) return Step::kAskNext;
    std::string why;
    if (bytes_.size() != m.c || !store_.restore(bytes_, &why)) {
      clear();
      return Step::kIgnored;
    }
    return Step::kComplete;
  }

  uint64_t slot() const { return slot_; }
  uint64_t offset() const { return bytes_.size(); }
  // After kComplete: the restored store, and the snapshot's bytes (which
  // the receiver keeps as its own snapshot, to serve others). Both leave
  // this transfer cleared.
  Store take_store() { return std::exchange(store_, Store()); }
  std::string take_bytes() {
    slot_ = 0;
    return std::exchange(bytes_, std::string());
  }
  void clear() {
    slot_ = 0;
    bytes_.clear();
    store_ = Store();
  }

 private:
  uint64_t slot_ = 0;
  std::string bytes_;
  Store store_;
};

}  // namespace kv
