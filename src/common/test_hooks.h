// Test-only fault and reordering switches, read from the environment
// (once, but for region_post_refused).
//
// The installed library is built without them: every function here returns
// 0 / false whatever the environment says, so an ordinary program can never
// be made to die or reorder by a stray variable. Test programs link the
// `sluice_test_hooks` object (this file compiled with SLUICE_TEST_HOOKS=1)
// ahead of the library, which makes the switches live.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::detail::test_hooks {

// True when this process honours the switches below.
bool enabled();
// SLUICE_TEST_DIE_AFTER_SEQUENCE=n: an ordered flow's source exits (status
// 17) right after taking its n-th sequence number. 0: never.
uint64_t die_after_sequence();
// SLUICE_TEST_OFI_EAGAIN_EVERY=n: every n-th segment post of an ofi source
// is refused once, as a full provider queue would. 0: never.
uint64_t ofi_eagain_every();
// SLUICE_OFI_TEST_UNORDERED=1: completions and receive buffers are shuffled
// as an unordered provider (EFA's SRD) would deliver them.
bool ofi_unordered();
// SLUICE_TEST_OFI_CLOSE_DELAY_MS=n: a closed ofi source waits n ms without
// reading its completion queue before it closes its endpoint, as a thread
// descheduled right there would. 0: no wait.
uint64_t ofi_close_delay_ms();
// SLUICE_TEST_OFI_IMPERSONATE=r:s: every ofi source on rank r sends its
// segments in the name of source index s (message tags and completion
// data), as a buggy or hostile peer might. Returns s + 1 on rank r, else 0.
uint64_t ofi_impersonate(uint32_t rank);
// SLUICE_TEST_OFI_NO_WAIT_FD=1: ofi completion queues get no wait fd, as on
// a provider without FI_WAIT_FD, so a Worker on several of them sleeps in
// slices instead of one poll(2).
bool ofi_no_wait_fd();
// SLUICE_TEST_OFI_CLOSE_NO_FLUSH=1: an ofi source's close() hands its last
// segments to the provider and returns without driving the endpoint (no
// brief drain), as a thread descheduled right there would: what moves them
// then is whoever reads the completion queue next.
bool ofi_close_no_flush();
// SLUICE_TEST_REGION_POST_REFUSED=1: every post of a one-sided region
// operation is refused with -FI_EAGAIN, as by a provider whose queue to a
// lost peer never drains. Read on every call, unlike the others, so that
// one test in a process can turn it on and off.
bool region_post_refused();
// SLUICE_TEST_MAP_DELAY=r:flow:ms[,r:flow:ms...]: rank r, declaring the
// flow named `flow` (as the registry names it: "name@epoch" in a view),
// sleeps ms milliseconds after publishing its rings and before mapping its
// peers', as a rank descheduled right there would. Returns ms for this rank
// and flow, else 0.
uint64_t map_delay_ms(uint32_t rank, const std::string& flow);

// SLUICE_TEST_FENCE_DELAY_MS=n: the fence of a rank reported lost (the
// registry client's on_lost, on its control thread) first sleeps n ms, as a
// control thread descheduled right there would; fences_delayed() counts the
// fences that began such a sleep, fence_delays_ended() those whose sleep
// ended. Read on every call, so that one test can turn it on.
void delay_fence();
uint64_t fences_delayed();
uint64_t fence_delays_ended();

// Destructors never block on the network (docs/guide.md, "Lifecycle"). The
// destructor of every public handle runs inside a DestructorScope, and
// every blocking wait of the library (a registry request, a source waiting
// for its last transfers, a region's goodbye) calls note_blocking_wait().
// With SLUICE_TEST_DESTRUCTOR_WAITS=1, a wait entered inside a scope is
// counted, and a process that counted any says which at exit and exits
// with status kDestructorWaitStatus; the tests set it for every case.
class DestructorScope {
 public:
  DestructorScope();
  ~DestructorScope();
  DestructorScope(const DestructorScope&) = delete;
  DestructorScope& operator=(const DestructorScope&) = delete;
};
void note_blocking_wait(const char* what);
// Waits counted so far in this process (0 unless the switch is on).
uint64_t destructor_waits();
inline constexpr int kDestructorWaitStatus = 86;

}  // namespace sluice::detail::test_hooks
