#include "transport/ofi/fabric_lib.h"

#include <dlfcn.h>
#include <rdma/fi_errno.h>
#include <signal.h>
#include <stdlib.h>

#include <cstring>
#include <iterator>
#include <string>

namespace sluice::detail::ofi::lib {
namespace {

constexpr const char* kLibrary = "libfabric.so.1";
constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT, SIGTERM};

struct Api {
  bool loaded = false;
  std::string why;  // when not loaded
  int restored = 0;
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
  decltype(&::fi_tostr) tostr = nullptr;
  decltype(&::fi_version) version = nullptr;
};

// Whether `handler` is code of libinfinipath (see the header).
bool from_infinipath(void* handler) {
  Dl_info where{};
  return ::dladdr(handler, &where) != 0 && where.dli_fname != nullptr &&
         std::strstr(where.dli_fname, "libinfinipath") != nullptr;
}

void* handler_of(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(a.sa_sigaction)
                                   : reinterpret_cast<void*>(a.sa_handler);
}

template <class Fn>
bool resolve(void* handle, const char* name, Fn* out, std::string* why) {
  *out = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (*out != nullptr) return true;
  *why = std::string(kLibrary) + " has no " + name;
  return false;
}

// Puts back `before[i]` (or the default, without `before`) wherever
// libinfinipath's handler is installed now; returns how many.
int restore_dispositions(const struct sigaction* before) {
  int restored = 0;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction now {};
    if (::sigaction(kSignals[i], nullptr, &now) != 0) continue;
    void* h = handler_of(now);
    if (h == reinterpret_cast<void*>(SIG_DFL) || h == reinterpret_cast<void*>(SIG_IGN)) continue;
    if (!from_infinipath(h)) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    if (::sigaction(kSignals[i], before != nullptr ? &before[i] : &dfl, nullptr) == 0) ++restored;
  }
  return restored;
}

// ofi_rxm (the RDM layer over tcp and verbs) posts FI_OFI_RXM_MSG_RX_SIZE
// receive buffers of its eager size (16 KiB) on every connection of every
// endpoint, and sluice opens an endpoint per flow end: its default of 128
// made a rank of a 3-rank job touch about 240 MB. 64 covers the deepest ring
// a flow has (a Latency flow's 64 segments), so a connection still takes
// every message a ring can have in flight; bandwidth and round trips
// measured the same (bench/results/history.md, 2026-12-04). Each endpoint's
// pools are also zeroed entries of FI_OFI_RXM_BUFFER_SIZE (the eager size,
// default 16 KiB): two of about 17 MB per endpoint, touched as it opens.
// 8448 (8 KiB and room for the headers) keeps a default segment (8 KiB of
// payload) one eager message on the message path (SLUICE_OFI_RMA=off) and
// halves that memory; bandwidth and round trips measured no slower over RMA
// and over messages (bench/results/history.md, 2026-12-05), where 4 KiB
// made the message path's 8 KiB round trips 37 times slower. Read once,
// when libfabric initialises its providers (the first fi_getinfo); a value
// the user set wins.
void set_provider_defaults() {
  ::setenv("FI_OFI_RXM_MSG_RX_SIZE", "64", /*overwrite=*/0);
  ::setenv("FI_OFI_RXM_MSG_TX_SIZE", "64", /*overwrite=*/0);
  ::setenv("FI_OFI_RXM_BUFFER_SIZE", "8448", /*overwrite=*/0);
}

Api load_api() {
  Api api;
  set_provider_defaults();
  struct sigaction before[std::size(kSignals)] = {};
  for (size_t i = 0; i < std::size(kSignals); ++i) ::sigaction(kSignals[i], nullptr, &before[i]);
  // RTLD_GLOBAL: libfabric loads its own provider plugins, which look for
  // its symbols.
  void* handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
  api.restored = restore_dispositions(before);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    api.why = std::string("cannot load ") + kLibrary +
              " (install libfabric1): " + (err ? err : "unknown error");
    return api;
  }
  if (!resolve(handle, "fi_getinfo", &api.getinfo, &api.why) ||
      !resolve(handle, "fi_freeinfo", &api.freeinfo, &api.why) ||
      !resolve(handle, "fi_dupinfo", &api.dupinfo, &api.why) ||
      !resolve(handle, "fi_fabric", &api.fabric, &api.why) ||
      !resolve(handle, "fi_strerror", &api.strerror, &api.why) ||
      !resolve(handle, "fi_tostr", &api.tostr, &api.why) ||
      !resolve(handle, "fi_version", &api.version, &api.why)) {
    return api;
  }
  api.loaded = true;
  return api;
}

const Api& api() {
  static const Api loaded = load_api();
  return loaded;
}

}  // namespace

bool load(std::string* why) {
  if (api().loaded) return true;
  if (why != nullptr) *why = api().why;
  return false;
}

int signal_dispositions_restored() { return api().restored; }

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  if (!api().loaded) return -FI_ENOSYS;
  const int rc = api().getinfo(version, node, service, flags, hints, info);
  // A provider plugin fi_getinfo loaded may have brought libinfinipath's
  // handlers only now: those go back to the default.
  restore_dispositions(nullptr);
  return rc;
}

void freeinfo(fi_info* info) {
  if (info != nullptr && api().loaded) api().freeinfo(info);
}

fi_info* dupinfo(const fi_info* info) { return api().loaded ? api().dupinfo(info) : nullptr; }

fi_info* allocinfo() { return dupinfo(nullptr); }

int fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  if (!api().loaded) return -FI_ENOSYS;
  return api().fabric(attr, fabric, context);
}

const char* strerror(int errnum) {
  return api().loaded ? api().strerror(errnum) : api().why.c_str();
}

const char* tostr(const void* data, fi_type datatype) {
  return api().loaded ? api().tostr(data, datatype) : "?";
}

uint32_t version() { return api().loaded ? api().version() : 0; }

}  // namespace sluice::detail::ofi::lib
