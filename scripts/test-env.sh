#!/bin/sh
# Runs a command (ctest, or bench/ci/test_cpu.py) as make test runs its
# tests: in a mount namespace of its own in which /proc/kallsyms reads
# empty, where it can (as root); elsewhere the command runs as it is. The
# make targets that run tests (test, test-unit, test-slow, asan, tsan) come
# through here:
#   scripts/test-env.sh ctest -j6 -LE 'slow|fuzz'
#
# Why: Debian's libfabric starts its verbs provider in every process that
# loads it (sluice loads it when a process opens its first ofi endpoint),
# and that provider begins by reading the kernel's whole symbol table twice,
# looking for two RDMA functions of the kernel (ib_register_peer_memory_client
# and ib_umem_dmabuf_get): about 120,000 lines formatted by the kernel, read
# 1 KiB at a time, 0.1 s of system time a process. The ofi cases start
# hundreds of such processes; reading nothing, the provider finds neither
# function, as it finds no RDMA device on a machine without one: the tests
# see libfabric as they would otherwise. (A user's job pays the 0.1 s once
# per rank, at its first ofi endpoint.)
#
# TEST_KALLSYMS=keep runs the command with the real file (not SLUICE_...: the
# launcher warns of a SLUICE_ variable it does not know, and the tests fail
# on warnings).
if [ "$(id -u)" = 0 ] && [ "${TEST_KALLSYMS:-}" != keep ] && [ -r /proc/kallsyms ] &&
  command -v unshare > /dev/null && unshare --mount --propagation private true 2> /dev/null; then
  exec unshare --mount --propagation private sh -c '
    if mount --bind /dev/null /proc/kallsyms 2> /dev/null; then
      echo "scripts/test-env.sh: /proc/kallsyms hidden from the tests (see the script; TEST_KALLSYMS=keep keeps it)"
    else
      echo "scripts/test-env.sh: could not hide /proc/kallsyms; the ofi tests read it (slower, same results)" >&2
    fi
    exec "$@"' test-env "$@"
fi
exec "$@"
