#include "counters_reader.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <tuple>

namespace sluice::tool {
namespace {

namespace ctr = detail::counters;

std::string text_of(const char* chars, size_t cap) {
  return std::string(chars, strnlen(chars, cap));
}

// Copies the live slots of one process's area; false if it is not one.
bool read_area(int pid, const std::string& fd_path, Process* out) {
  const int fd = ::open(fd_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  const size_t want = ctr::kHeaderBytes + ctr::kSlots * ctr::kSlotBytes;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < want) {
    ::close(fd);
    return false;
  }
  void* p = ::mmap(nullptr, want, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return false;
  const auto* header = static_cast<const ctr::AreaHeader*>(p);
  bool ok = header->magic == ctr::kMagic && header->version == ctr::kVersion &&
            header->slots == ctr::kSlots && header->slot_bytes == ctr::kSlotBytes;
  if (ok) {
    std::atomic_thread_fence(std::memory_order_acquire);
    out->pid = pid;
    out->rank = header->rank;
    out->epoch = header->epoch.load(std::memory_order_relaxed);
    out->job = text_of(header->job, sizeof(header->job));
    const auto* slots =
        reinterpret_cast<const ctr::Slot*>(static_cast<const std::byte*>(p) + ctr::kHeaderBytes);
    for (uint32_t i = 0; i < ctr::kSlots; ++i) {
      const ctr::Slot& s = slots[i];
      const auto state = static_cast<ctr::State>(s.state.load(std::memory_order_acquire));
      if (state == ctr::State::kFree || state == ctr::State::kDestroyed) continue;
      const uint32_t g1 = s.generation.load(std::memory_order_acquire);
      Endpoint e = ctr::read_slot(s);
      if (e.state == ctr::State::kFree || e.state == ctr::State::kDestroyed) continue;
      std::atomic_thread_fence(std::memory_order_acquire);
      // Reassigned while we copied (or being rewritten): skip it this round.
      if ((g1 & 1) != 0 || s.generation.load(std::memory_order_relaxed) != g1) continue;
      out->endpoints.push_back(std::move(e));
    }
  }
  ::munmap(p, want);
  return ok;
}

}  // namespace

// Every process on the host with a counters area (that this user may read).
std::vector<Process> read_counters(int only_pid) {
  std::vector<Process> out;
  const std::string want = "/memfd:" + std::string(ctr::kAreaName);
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = ::readdir(proc)) {
    const int pid = std::atoi(d->d_name);
    if (pid <= 0 || (only_pid != 0 && pid != only_pid)) continue;
    const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* fds = ::opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* f = ::readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      const std::string path = fd_dir + "/" + f->d_name;
      char link[256];
      const ssize_t n = ::readlink(path.c_str(), link, sizeof(link) - 1);
      if (n <= 0 || std::string_view(link, static_cast<size_t>(n)).rfind(want, 0) != 0) continue;
      Process p;
      if (read_area(pid, path, &p)) out.push_back(std::move(p));
      break;
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  std::sort(out.begin(), out.end(), [](const Process& a, const Process& b) {
    return std::tie(a.job, a.rank, a.pid) < std::tie(b.job, b.rank, b.pid);
  });
  return out;
}

}  // namespace sluice::tool
