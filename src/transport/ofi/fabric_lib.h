// libfabric's exported functions, loaded (dlopen of libfabric.so.1) when a
// program first asks for an ofi endpoint or for the host's providers, not
// when it starts.
//
// Why: Debian's libfabric links the PSM libraries of old Intel fabrics
// (libpsm_infinipath, libinfinipath, libpsm2), whose constructors calibrate a
// timer by sleeping: about 200 ms in every process that links libfabric,
// before main, whether it uses ofi or not. Every rank, every `sluice`
// command and every test program paid it. Loaded on demand, only a process
// that opens an ofi endpoint (or runs `sluice info`) does, once.
//
// libinfinipath's constructor also installs handlers for SIGSEGV, SIGBUS,
// SIGILL, SIGABRT, SIGINT and SIGTERM that print a backtrace and exit(1): a
// rank killed by a signal would look to its launcher like one that failed
// with status 1. Loading puts back what each of those signals had before
// (the program's own handler, or the default).
//
// The data path never comes here: libfabric's operations (fi_send, fi_cq_read,
// ...) are inline functions of its headers that call through the endpoint's
// operation tables.
//
// Thread safety: every function may be called from any thread; the first
// call loads the library once.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace sluice::detail::ofi::lib {

// Loads libfabric if it is not loaded yet. False if it cannot be loaded, and
// then *why (if given) names the library and dlerror()'s reason.
bool load(std::string* why = nullptr);

// How many signal dispositions loading put back (for tests): 0 before the
// library is loaded.
int signal_dispositions_restored();

// libfabric's functions of the same names. If the library cannot be loaded,
// getinfo and fabric return -FI_ENOSYS, dupinfo and allocinfo nullptr,
// version 0, and strerror the reason it could not be loaded.
int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info);
void freeinfo(fi_info* info);
fi_info* dupinfo(const fi_info* info);
fi_info* allocinfo();
int fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
const char* strerror(int errnum);
const char* tostr(const void* data, fi_type datatype);
uint32_t version();

}  // namespace sluice::detail::ofi::lib
