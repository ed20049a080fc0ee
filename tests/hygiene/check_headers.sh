#!/usr/bin/env bash
# Every public header compiles on its own (STYLE: "every header compiles on
# its own"): each of include/sluice/**.h is the whole of a translation unit,
# compiled with the project's warnings as errors.
#   tests/hygiene/check_headers.sh CXX SOURCE_DIR
set -uo pipefail
cxx=$1
src=$2
failed=0
count=0
while IFS= read -r header; do
  count=$((count + 1))
  rel=${header#"$src/include/"}
  if ! out=$(echo "#include \"$rel\"" |
    "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Wno-missing-field-initializers -Werror \
      -I"$src/include" -x c++ - 2>&1); then
    echo "check_headers: $rel does not compile on its own:"
    echo "$out" | head -20
    failed=$((failed + 1))
  fi
done < <(find "$src/include/sluice" -name '*.h' | LC_ALL=C sort)
if [ "$failed" -ne 0 ]; then
  echo "check_headers: $failed of $count public headers do not compile alone"
  exit 1
fi
echo "check_headers: all $count public headers compile alone"
