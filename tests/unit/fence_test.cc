// control/fence.h: a process on this host named by its fence identity is
// killed and seen to exit; one of another host, or a pid now held by
// another process, is left alone.
#include "control/fence.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

namespace sluice::control {
namespace {

using std::chrono::milliseconds;

// A child that sends its own fence identity up a pipe, then sleeps until
// killed; with `main_exits`, its main thread exits (SYS_exit) and
// another thread sleeps on.
struct Child {
  pid_t pid = -1;
  std::string identity;
  explicit Child(bool main_exits = false) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const std::string id = fence_identity();
      (void)!::write(fds[1], id.data(), id.size());
      ::close(fds[1]);
      if (main_exits) {
        pthread_t t;
        ::pthread_create(
            &t, nullptr,
            [](void*) -> void* {
              for (;;) ::pause();
            },
            nullptr);
        ::syscall(SYS_exit, 0);  // this thread alone, without unwinding gtest's frames
      }
      for (;;) ::pause();
    }
    ::close(fds[1]);
    char buf[1024];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) identity.append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
  }
  // How it ended: the signal that killed it, or -1 if it is still running.
  int ended_by() {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return -1;
    pid = -1;
    return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// A process already exiting (its main thread's PF_EXITING: killed from
// outside, or returned) is said to be exiting, for the log, and killed all
// the same: here its main thread alone exited and another thread still
// runs, which the kill ends.
TEST(FenceTest, AProcessWhoseMainThreadExitedIsExitingAndStillKilled) {
  Child c(/*main_exits=*/true);
  ASSERT_FALSE(c.identity.empty());
  // The main thread's exit is seen in /proc shortly after it sent its identity.
  for (int i = 0; i < 200; ++i) {
    std::string status;
    if (FILE* f = std::fopen(("/proc/" + std::to_string(c.pid) + "/stat").c_str(), "r")) {
      char buf[512] = {};
      status.assign(buf, std::fread(buf, 1, sizeof(buf) - 1, f));
      std::fclose(f);
    }
    const size_t close = status.rfind(')');
    if (close != std::string::npos && status.substr(close + 2, 1) == "Z") break;
    ::usleep(5000);
  }
  const FenceOutcome out = fence(c.identity, static_cast<uint32_t>(c.pid), milliseconds(2000));
  EXPECT_EQ(out.kind, FenceOutcome::kExiting) << out.text;
  EXPECT_EQ(c.ended_by(), SIGKILL);
}

TEST(FenceTest, KillsAProcessOfThisHostAndSeesItExit) {
  Child c;
  ASSERT_FALSE(c.identity.empty());
  const FenceOutcome out = fence(c.identity, static_cast<uint32_t>(c.pid), milliseconds(2000));
  EXPECT_EQ(out.kind, FenceOutcome::kKilled) << out.text;
  EXPECT_EQ(c.ended_by(), SIGKILL);
}

TEST(FenceTest, LeavesAProcessOfAnotherHostAlone) {
  Child c;
  std::string other = c.identity;
  other[0] = other[0] == 'x' ? 'y' : 'x';  // another host name
  EXPECT_EQ(fence(other, static_cast<uint32_t>(c.pid), milliseconds(100)).kind,
            FenceOutcome::kElsewhere);
  EXPECT_EQ(fence("", static_cast<uint32_t>(c.pid), milliseconds(100)).kind,
            FenceOutcome::kElsewhere);
  EXPECT_EQ(c.ended_by(), -1);
}

TEST(FenceTest, LeavesAProcessWithAnotherStartTimeAlone) {
  // What a reused pid looks like: the identity names an earlier process.
  Child c;
  const std::string earlier = c.identity.substr(0, c.identity.rfind('|') + 1) + "1";
  EXPECT_EQ(fence(earlier, static_cast<uint32_t>(c.pid), milliseconds(100)).kind,
            FenceOutcome::kGone);
  EXPECT_EQ(c.ended_by(), -1);
}

TEST(FenceTest, AProcessThatAlreadyExitedIsGone) {
  Child c;
  const auto pid = static_cast<uint32_t>(c.pid);
  ::kill(c.pid, SIGKILL);
  ASSERT_EQ(c.ended_by() == -1 ? (::waitpid(c.pid, nullptr, 0), 0) : 0, 0);
  c.pid = -1;
  EXPECT_EQ(fence(c.identity, pid, milliseconds(100)).kind, FenceOutcome::kGone);
}

TEST(FenceTest, AProcessThatExitedButIsNotReapedYetIsGone) {
  Child c;
  ::kill(c.pid, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOWAIT), 0);  // a zombie
  EXPECT_EQ(fence(c.identity, static_cast<uint32_t>(c.pid), milliseconds(100)).kind,
            FenceOutcome::kGone);
}

TEST(FenceTest, NeverItself) {
  EXPECT_EQ(fence(fence_identity(), static_cast<uint32_t>(::getpid()), milliseconds(100)).kind,
            FenceOutcome::kElsewhere);
}

}  // namespace
}  // namespace sluice::control
