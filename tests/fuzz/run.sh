#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer and
# UndefinedBehaviorSanitizer on) in build-fuzz and runs each for a bounded
# time, printing executions and coverage. Installs clang if it is missing.
#   tests/fuzz/run.sh [seconds per target, default 60]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${SLUICE_FUZZ_BUILD_DIR:-$root/build-fuzz}

# clang and its runtime libraries (libFuzzer, the sanitizers), installed only
# if missing, as scripts/install-deps.sh does for the rest.
packages=(clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -ne 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo="sudo"
    else
      echo "fuzz: need root (or sudo) to install: ${missing[*]}" >&2
      exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q </dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi
"$root/scripts/install-deps.sh"

# -U: look for libFuzzer again, in case it was installed since the last run.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -U SLUICE_HAVE_LIBFUZZER \
  -DCMAKE_CXX_COMPILER=clang++ -DSLUICE_SANITIZE=address -DSLUICE_FUZZ=ON \
  -DSLUICE_FUZZ_SECONDS="$seconds"
cmake --build "$build" --target sluice_fuzz_targets
cd "$build" && ctest --output-on-failure --verbose -L fuzz
