// Linger: the work a destructor hands over instead of waiting for it.
// Destructors never block on the network (docs/guide.md, "Lifecycle"), yet
// some ends of a life need the network: an ofi source destroyed right after
// close() still has its last segments in flight and its targets'
// confirmations to hear; a flow whose DeclaredFlow is destroyed must stay
// mapped until every participant let go of it. The destructor parks that
// work here, and the Linger's one thread finishes it: each task within its
// own deadline, all of them on leave() (Cluster::leave waits for them), or
// abandoned, with a warning naming them, when the Linger is destroyed.
//
// Thread safety: add(), drain() and pending() may be called from any
// thread; a task runs on the Linger's thread only, after its owner handed
// it over.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "sluice/deadline.h"

namespace sluice::detail {

class Linger {
 public:
  class Task {
   public:
    virtual ~Task() = default;
    // Moves the work on, waiting at most about `slice`; true once it is done
    // (the Linger then destroys the task).
    virtual bool step(std::chrono::milliseconds slice) = 0;
    // When to give up on it.
    virtual Deadline deadline() const = 0;
    // What it is, for messages ("flow 'x' source (0,1): its last transfers").
    virtual std::string describe() const = 0;
    // Its deadline passed, or the Linger ends before it is done: let go of
    // what is left (the task is destroyed right after).
    virtual void give_up(const std::string& why) = 0;
    // An opaque key for pending(key) (a flow's context): 0 for none.
    virtual const void* key() const { return nullptr; }
  };

  Linger() = default;
  // Gives up on every task left (one warning names them) and joins the thread.
  ~Linger();
  Linger(const Linger&) = delete;
  Linger& operator=(const Linger&) = delete;

  // Takes over `task`; starts the thread the first time. After close(),
  // gives up on it at once instead.
  void add(std::unique_ptr<Task> task);
  // Takes no more tasks (the rank left the job); those it has go on.
  void close();
  // Waits until no task is left, or `deadline`; true if none is.
  bool drain(Deadline deadline);
  // Waits until no task with `key` is left, or `deadline`; true if none is.
  bool drain(const void* key, Deadline deadline);
  // Tasks with `key` not yet done.
  size_t pending(const void* key) const;

 private:
  void loop();

  mutable Mutex mu_;
  std::condition_variable_any changed_;  // a task was added, or one ended
  std::vector<std::unique_ptr<Task>> tasks_ SLUICE_GUARDED_BY(mu_);
  // The keys of the tasks the thread is stepping (out of tasks_ meanwhile).
  std::vector<const void*> running_ SLUICE_GUARDED_BY(mu_);
  bool stopping_ SLUICE_GUARDED_BY(mu_) = false;
  bool closed_ SLUICE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::detail
