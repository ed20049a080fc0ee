// apps/kv/item_parts.h: what a hash, a list and a set hold (an Item's
// `fields`, `list` and `members`, store.h), each a standard container that
// keeps the bytes of its strings counted as it changes, as ZSet keeps its
// members' (zset.h). The store's limits (Store::used_bytes, item_bytes)
// add those counts up in O(1), so a write to a large set, hash or list
// costs what it names, not a walk of the whole item.
//
// Read them freely (const iterators, find, size, ...); change them only
// through the members below, which keep bytes() equal to the sum of the
// strings' sizes (a hash: each field's and its value's). `items()` is the
// container itself, read-only, for code that takes one.
//
// Thread safety: none (values).
#pragma once

#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace kv {

// A hash's fields and their values, in field order.
class Fields {
 public:
  using Map = std::map<std::string, std::string>;
  using const_iterator = Map::const_iterator;

  Fields() = default;
  Fields(const Fields&) = default;
  Fields& operator=(const Fields&) = default;
  Fields(Fields&& o) noexcept : map_(std::move(o.map_)), bytes_(std::exchange(o.bytes_, 0)) {
    o.map_.clear();
  }
  Fields& operator=(Fields&& o) noexcept {
    map_ = std::move(o.map_);
    bytes_ = std::exchange(o.bytes_, 0);
    o.map_.clear();
    return *this;
  }

  const Map& items() const { return map_; }
  // The fields' and values' bytes.
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return map_.empty(); }
  size_t size() const { return map_.size(); }
  const_iterator begin() const { return map_.begin(); }
  const_iterator end() const { return map_.end(); }
  const_iterator find(const std::string& f) const { return map_.find(f); }
  size_t count(const std::string& f) const { return map_.count(f); }
  const std::string& at(const std::string& f) const { return map_.at(f); }

  // Sets `f` to `v`; true if `f` was not a field.
  bool insert_or_assign(std::string f, std::string v) {
    auto it = map_.find(f);
    if (it != map_.end()) {
      bytes_ = bytes_ - it->second.size() + v.size();
      it->second = std::move(v);
      return false;
    }
    bytes_ += f.size() + v.size();
    map_.emplace_hint(it, std::move(f), std::move(v));
    return true;
  }
  // Adds `f` with `v` if `f` is not a field (else changes nothing).
  std::pair<const_iterator, bool> emplace(std::string f, std::string v) {
    const uint64_t n = f.size() + v.size();
    auto [it, added] = map_.emplace(std::move(f), std::move(v));
    if (added) bytes_ += n;
    return {it, added};
  }
  // Removes `f`; how many were removed (0 or 1).
  size_t erase(const std::string& f) {
    auto it = map_.find(f);
    if (it == map_.end()) return 0;
    bytes_ -= it->first.size() + it->second.size();
    map_.erase(it);
    return 1;
  }
  void clear() {
    map_.clear();
    bytes_ = 0;
  }

  friend bool operator==(const Fields& a, const Fields& b) { return a.map_ == b.map_; }
  friend auto operator<=>(const Fields& a, const Fields& b) { return a.map_ <=> b.map_; }

 private:
  Map map_;
  uint64_t bytes_ = 0;
};

// A list's elements, head first.
class Elements {
 public:
  using Deque = std::deque<std::string>;
  using const_iterator = Deque::const_iterator;
  using const_reverse_iterator = Deque::const_reverse_iterator;

  Elements() = default;
  // Takes `d` whole (counting its bytes: O(its size)).
  explicit Elements(Deque d) : deque_(std::move(d)) {
    for (const std::string& v : deque_) bytes_ += v.size();
  }
  Elements(const Elements&) = default;
  Elements& operator=(const Elements&) = default;
  Elements(Elements&& o) noexcept
      : deque_(std::move(o.deque_)), bytes_(std::exchange(o.bytes_, 0)) {
    o.deque_.clear();
  }
  Elements& operator=(Elements&& o) noexcept {
    deque_ = std::move(o.deque_);
    bytes_ = std::exchange(o.bytes_, 0);
    o.deque_.clear();
    return *this;
  }

  const Deque& items() const { return deque_; }
  // The elements' bytes.
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return deque_.empty(); }
  size_t size() const { return deque_.size(); }
  const_iterator begin() const { return deque_.begin(); }
  const_iterator end() const { return deque_.end(); }
  const_reverse_iterator rbegin() const { return deque_.rbegin(); }
  const_reverse_iterator rend() const { return deque_.rend(); }
  const std::string& front() const { return deque_.front(); }
  const std::string& back() const { return deque_.back(); }
  const std::string& operator[](size_t i) const { return deque_[i]; }

  void push_front(std::string v) {
    bytes_ += v.size();
    deque_.push_front(std::move(v));
  }
  void push_back(std::string v) {
    bytes_ += v.size();
    deque_.push_back(std::move(v));
  }
  // REQUIRES: !empty(). Removes the head (the tail) and answers it.
  std::string pop_front() {
    std::string v = std::move(deque_.front());
    deque_.pop_front();
    bytes_ -= v.size();
    return v;
  }
  std::string pop_back() {
    std::string v = std::move(deque_.back());
    deque_.pop_back();
    bytes_ -= v.size();
    return v;
  }
  // REQUIRES: i < size().
  void set(size_t i, std::string v) {
    bytes_ = bytes_ - deque_[i].size() + v.size();
    deque_[i] = std::move(v);
  }
  void insert(const_iterator at, std::string v) {
    bytes_ += v.size();
    deque_.insert(at, std::move(v));
  }
  // Removes [first, last).
  void erase(const_iterator first, const_iterator last) {
    for (auto it = first; it != last; ++it) bytes_ -= it->size();
    deque_.erase(first, last);
  }
  // Empties the list and answers what it held.
  Deque release() {
    bytes_ = 0;
    Deque out = std::move(deque_);
    deque_.clear();
    return out;
  }
  void clear() {
    deque_.clear();
    bytes_ = 0;
  }

  friend bool operator==(const Elements& a, const Elements& b) { return a.deque_ == b.deque_; }
  friend auto operator<=>(const Elements& a, const Elements& b) { return a.deque_ <=> b.deque_; }

 private:
  Deque deque_;
  uint64_t bytes_ = 0;
};

// A set's members, in byte order.
class Members {
 public:
  using Set = std::set<std::string>;
  using const_iterator = Set::const_iterator;
  using const_reverse_iterator = Set::const_reverse_iterator;

  Members() = default;
  // Takes `s` whole (counting its bytes: O(its size)).
  explicit Members(Set s) : set_(std::move(s)) {
    for (const std::string& m : set_) bytes_ += m.size();
  }
  Members(const Members&) = default;
  Members& operator=(const Members&) = default;
  Members(Members&& o) noexcept : set_(std::move(o.set_)), bytes_(std::exchange(o.bytes_, 0)) {
    o.set_.clear();
  }
  Members& operator=(Members&& o) noexcept {
    set_ = std::move(o.set_);
    bytes_ = std::exchange(o.bytes_, 0);
    o.set_.clear();
    return *this;
  }

  const Set& items() const { return set_; }
  // The members' bytes.
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return set_.empty(); }
  size_t size() const { return set_.size(); }
  const_iterator begin() const { return set_.begin(); }
  const_iterator end() const { return set_.end(); }
  const_reverse_iterator rbegin() const { return set_.rbegin(); }
  const_reverse_iterator rend() const { return set_.rend(); }
  const_iterator find(const std::string& m) const { return set_.find(m); }
  size_t count(const std::string& m) const { return set_.count(m); }

  // Adds `m`; .second: it was not a member.
  std::pair<const_iterator, bool> insert(std::string m) {
    const uint64_t n = m.size();
    auto r = set_.insert(std::move(m));
    if (r.second) bytes_ += n;
    return r;
  }
  // The same with a hint (where `m` goes, as std::set::insert takes one).
  const_iterator insert(const_iterator hint, std::string m) {
    const size_t before = set_.size();
    const uint64_t n = m.size();
    auto it = set_.insert(hint, std::move(m));
    if (set_.size() != before) bytes_ += n;
    return it;
  }
  // Removes `m`; how many were removed (0 or 1).
  size_t erase(const std::string& m) {
    auto it = set_.find(m);
    if (it == set_.end()) return 0;
    bytes_ -= it->size();
    set_.erase(it);
    return 1;
  }
  void clear() {
    set_.clear();
    bytes_ = 0;
  }

  friend bool operator==(const Members& a, const Members& b) { return a.set_ == b.set_; }
  friend auto operator<=>(const Members& a, const Members& b) { return a.set_ <=> b.set_; }

 private:
  Set set_;
  uint64_t bytes_ = 0;
};

}  // namespace kv
