#!/usr/bin/env bash
# Embeds the sluice source tree in a small parent project with
# add_subdirectory (tests/install/embed) and checks that, with the SLUICE_BUILD_*
# options at their defaults (off when sluice is not the top-level project),
# the build holds only the library and the parent's program, that the parent's
# program is compiled without sluice's warning or sanitizer flags and lands in
# the parent's own output directory, and that it compiles. With --link it also
# builds the whole embedded library and links the program (a minute more on
# two cores; the slow suite does it, install_test.sh links through
# find_package in the quick one).
# Usage: embed_test.sh SOURCE_DIR [--link]
set -euo pipefail
src=$1
link=${2:-}
scratch=$(mktemp -d /tmp/sluice-embed-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
build=$scratch/build
# Debug: what is checked here is what gets built and with which flags, not its
# speed, and an unoptimised library compiles in about two thirds of the time.
cmake -S "$src/tests/install/embed" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DSLUICE_SOURCE_DIR="$src" -DORDERS_SOURCE="$src/examples/orders.cc" >"$scratch/configure.log"

# Everything the default build would link: the library and the parent's
# program only (the shared library and the job harness are there to link,
# but are built only for a project that links them).
link_outputs=$(ninja -C "$build" -t targets all | sed -n 's/^\([^:]*\): CXX_\(EXECUTABLE\|STATIC_LIBRARY\|SHARED_LIBRARY\)_LINKER.*/\1/p' | sort)
default_inputs=$( (ninja -C "$build" -t inputs all; ninja -C "$build" -t query all | sed -n 's/^    \(.*\)$/\1/p') | sort -u)
linked=$(comm -12 <(echo "$link_outputs") <(echo "$default_inputs" | sed 's/^ *//' | sort -u))
expected=$(printf '%s\n' orders sluice/src/libsluice.a | sort)
if [[ "$linked" != "$expected" ]]; then
  echo "FAIL: the embedded build links more than the library:"; echo "$linked"; exit 1
fi
for option in SLUICE_BUILD_TESTS SLUICE_BUILD_BENCHMARKS SLUICE_BUILD_APPS SLUICE_BUILD_TOOLS; do
  grep -q "^$option:BOOL=OFF" "$build/CMakeCache.txt" || { echo "FAIL: $option is not OFF by default"; exit 1; }
done

# The parent's program: none of sluice's own flags, its own output directory.
commands=$(ninja -C "$build" -t commands orders)
compile=$(grep -- '-c .*orders.cc' <<<"$commands")
for flag in -Wall -Wextra -fsanitize; do
  if grep -q -- "$flag" <<<"$compile"; then echo "FAIL: sluice's $flag leaks into the parent: $compile"; exit 1; fi
done
grep -q -- '-std=\(c\|gnu\)++20' <<<"$compile" || { echo "FAIL: sluice::sluice does not bring C++20: $compile"; exit 1; }

if [[ "$link" == --link ]]; then
  ninja -C "$build" orders >"$scratch/build.log" || { cat "$scratch/build.log"; exit 1; }
  test -x "$build/orders" || { echo "FAIL: the parent's program is not in its own output directory"; exit 1; }
else
  # The parent's object only: sluice's public headers compile with the flags
  # sluice::sluice gives an outside program.
  object=$(ninja -C "$build" -t targets all | sed -n 's/^\(CMakeFiles\/orders[^:]*orders\.cc\.o\): .*/\1/p')
  [[ -n "$object" ]] || { echo "FAIL: no object for orders.cc in the embedded build"; exit 1; }
  ninja -C "$build" "$object" >"$scratch/build.log" || { cat "$scratch/build.log"; exit 1; }
  grep -q -- "-o orders " <<<"$commands" ||
    { echo "FAIL: the parent's program would not land in its own output directory: $commands"; exit 1; }
fi
test ! -e "$build/bin" || { echo "FAIL: sluice created a bin directory in the parent's build"; exit 1; }
echo "embed test: ok (links: $(echo $linked)${link:+, built and linked})"
