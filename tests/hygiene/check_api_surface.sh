#!/usr/bin/env bash
# The public surface of the shared library: every symbol libsluice.so.1
# exports from namespace sluice (functions, data, vtables and typeinfo), by
# its demangled signature, against the checked-in list tests/hygiene/api_surface.txt.
# A difference fails, printed as a diff, so that every change to the surface
# (a new public function, a changed signature, a detail core the inline code
# calls) is deliberate: run with --update to accept it, and commit the list.
# Weak symbols (inline functions and template instantiations a compiler
# chose to emit out of line) vary with the optimiser and are left out.
#   tests/hygiene/check_api_surface.sh LIBSLUICE_SO [--update]
set -euo pipefail
lib=$1
list="$(cd "$(dirname "$0")" && pwd)/api_surface.txt"
actual=$(nm -DC --defined-only "$lib" |
  awk '$2 ~ /^[TDBRV]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
  grep -E '^((typeinfo|typeinfo name|vtable|VTT) for )?sluice::' | LC_ALL=C sort -u)
if [ "${2:-}" = "--update" ]; then
  printf '%s\n' "$actual" >"$list"
  echo "check_api_surface: wrote $(wc -l <"$list") names to $list"
  exit 0
fi
if ! diff -u "$list" <(printf '%s\n' "$actual") >/tmp/api_surface.$$.diff; then
  echo "check_api_surface: $lib exports another surface than $list:"
  cat /tmp/api_surface.$$.diff
  rm -f /tmp/api_surface.$$.diff
  echo "If the change is deliberate: tests/hygiene/check_api_surface.sh $lib --update, and commit the list."
  exit 1
fi
rm -f /tmp/api_surface.$$.diff
echo "check_api_surface: $(wc -l <"$list") public names, as listed"
