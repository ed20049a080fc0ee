// The library's mutex, annotated for clang's thread-safety analysis
// (-Wthread-safety; `make thread-safety` builds the library with it and fails
// on a warning). A member a mutex guards says so with SLUICE_GUARDED_BY(mu_);
// a function that must be called with it held, SLUICE_REQUIRES(mu_). Under
// GCC the annotations expand to nothing and Mutex is std::mutex.
//
//   Mutex mu_;
//   std::map<...> peers_ SLUICE_GUARDED_BY(mu_);
//   void f() { MutexLock lock(mu_); peers_.clear(); }
//
// Thread safety: Mutex is a mutex; a MutexLock belongs to the thread that
// made it.
#pragma once

#include <mutex>

#if defined(__clang__)
#define SLUICE_TSA(x) __attribute__((x))
#else
#define SLUICE_TSA(x)
#endif

#define SLUICE_CAPABILITY(x) SLUICE_TSA(capability(x))
#define SLUICE_SCOPED_CAPABILITY SLUICE_TSA(scoped_lockable)
#define SLUICE_GUARDED_BY(x) SLUICE_TSA(guarded_by(x))
#define SLUICE_PT_GUARDED_BY(x) SLUICE_TSA(pt_guarded_by(x))
#define SLUICE_REQUIRES(...) SLUICE_TSA(requires_capability(__VA_ARGS__))
#define SLUICE_EXCLUDES(...) SLUICE_TSA(locks_excluded(__VA_ARGS__))
#define SLUICE_ACQUIRE(...) SLUICE_TSA(acquire_capability(__VA_ARGS__))
#define SLUICE_RELEASE(...) SLUICE_TSA(release_capability(__VA_ARGS__))
#define SLUICE_TRY_ACQUIRE(...) SLUICE_TSA(try_acquire_capability(__VA_ARGS__))
#define SLUICE_NO_THREAD_SAFETY_ANALYSIS SLUICE_TSA(no_thread_safety_analysis)

namespace sluice {

class SLUICE_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() SLUICE_ACQUIRE() { mu_.lock(); }
  void unlock() SLUICE_RELEASE() { mu_.unlock(); }
  bool try_lock() SLUICE_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope. lock()/unlock() let a condition_variable_any
// wait on it (the analysis then treats the mutex as held throughout).
class SLUICE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) SLUICE_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() SLUICE_RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() SLUICE_ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  void unlock() SLUICE_RELEASE() {
    held_ = false;
    mu_.unlock();
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

}  // namespace sluice
