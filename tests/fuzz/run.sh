#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer on) in build-fuzz and runs each for a bounded
# time, printing executions and coverage. Installs clang if it is missing.
#   tests/fuzz/run.sh [seconds per target, default 60]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SLUICE_FUZZ_BUILD_DIR:-$root/build-fuzz}

# clang and its runtime libraries (libFuzzer, the sanitizers) beside the
# project's own packages, each installed only if missing.
"$root/scripts/install-deps.sh" clang libclang-rt-dev

# -U: look for libFuzzer again, in case it was installed since the last run.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -U SLUICE_HAVE_LIBFUZZER \
  -DCMAKE_CXX_COMPILER=clang++ -DSLUICE_SANITIZE=address -DSLUICE_FUZZ=ON \
  -DSLUICE_FUZZ_SECONDS="$seconds"
cmake --build "$build" --target sluice_fuzz_targets
cd "$build" && ctest --output-on-failure --verbose -L fuzz
