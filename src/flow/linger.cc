#include "flow/linger.h"

#include <algorithm>

#include "common/log.h"

namespace sluice::detail {

namespace {
// How long one step of a task may wait while others are queued behind it.
constexpr auto kSlice = std::chrono::milliseconds(2);
// How long the thread sleeps when it has nothing to do.
constexpr auto kIdle = std::chrono::milliseconds(100);
}  // namespace

Linger::~Linger() {
  std::vector<std::unique_ptr<Task>> left;
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    MutexLock lock(mu_);
    left = std::move(tasks_);
  }
  if (left.empty()) return;
  std::string names;
  for (const auto& t : left) names += (names.empty() ? "" : "; ") + t->describe();
  log::warn("gave up on ", left.size(),
            " unfinished end(s) of life when the Cluster ended without "
            "leave(): ",
            names);
  for (auto& t : left) t->give_up("the Cluster ended without leave()");
}

void Linger::close() {
  MutexLock lock(mu_);
  closed_ = true;
}

void Linger::add(std::unique_ptr<Task> task) {
  {
    MutexLock lock(mu_);
    if (closed_) {
      lock.unlock();
      task->give_up("this rank has left the job");
      return;
    }
    tasks_.push_back(std::move(task));
    if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
  }
  changed_.notify_all();
}

bool Linger::drain(Deadline deadline) {
  MutexLock lock(mu_);
  while (!tasks_.empty() || !running_.empty()) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return tasks_.empty() && running_.empty();
    }
  }
  return true;
}

size_t Linger::pending(const void* key) const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& t : tasks_) n += t->key() == key;
  for (const void* k : running_) n += k == key;
  return n;
}

bool Linger::drain(const void* key, Deadline deadline) {
  for (;;) {
    if (pending(key) == 0) return true;
    MutexLock lock(mu_);
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      lock.unlock();
      return pending(key) == 0;
    }
  }
}

void Linger::loop() {
  for (;;) {
    std::vector<std::unique_ptr<Task>> batch;
    {
      MutexLock lock(mu_);
      while (tasks_.empty() && !stopping_) changed_.wait_for(lock, kIdle);
      if (stopping_) return;
      batch = std::move(tasks_);
      tasks_.clear();
      for (const auto& t : batch) running_.push_back(t->key());
    }
    // One step each: a task waits at most a slice while others are queued,
    // as long as it likes when it is the only one.
    const auto slice = batch.size() == 1 ? std::chrono::milliseconds(20) : kSlice;
    std::vector<std::unique_ptr<Task>> done;
    for (auto& t : batch) {
      bool finished = false;
      try {
        finished = t->step(slice);
      } catch (const std::exception& e) {
        log::warn(t->describe(), ": ", e.what());
        finished = true;
      }
      if (!finished && Clock::now() >= t->deadline()) {
        t->give_up("its deadline passed");
        finished = true;
      }
      if (finished) done.push_back(std::move(t));
    }
    // Destroyed outside the lock (a task's end may take a moment), and
    // before running_ lets drain() see them gone.
    done.clear();
    {
      MutexLock lock(mu_);
      running_.clear();
      for (auto& t : batch) {
        if (t != nullptr) tasks_.push_back(std::move(t));
      }
    }
    changed_.notify_all();
  }
}

}  // namespace sluice::detail
