#!/usr/bin/env bash
# Every tracked C++ file is formatted with the tree's .clang-format
# (`make format` formats them). Reports the files that are not, and fails.
#   tests/hygiene/check_format.sh <source dir>
set -euo pipefail
cd "${1:?usage: check_format.sh <source dir>}"
if ! command -v clang-format >/dev/null 2>&1; then
  echo "check_format: clang-format is missing (make test-tools installs it)"
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h')
else
  mapfile -t files < <(find apps bench examples include src tests tools -name '*.cc' -o -name '*.h')
fi
bad=$(clang-format --dry-run "${files[@]}" 2>&1 | grep -oE '^[^:]+:[0-9]+:[0-9]+: (warning|error)' |
  cut -d: -f1 | sort -u || true)
if [ -n "$bad" ]; then
  echo "check_format: not formatted with .clang-format (run make format):"
  echo "$bad"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
