#!/usr/bin/env bash
# The user docs (README.md and docs/*.md) read as a guide and a reference,
# not a development log: no tracker numbers ("issue 37", "(issue 12)") and no
# "this/previous/another/earlier session". Dated history of measurements
# belongs in bench/results/history.md. Reports file:line of each offence, and
# fails.
#   tests/hygiene/check_docs.sh <source dir>
set -euo pipefail
cd "${1:?usage: check_docs.sh <source dir>}"
shopt -s nullglob
files=(README.md docs/*.md)
for f in "${files[@]}"; do
  if [ ! -f "$f" ]; then
    echo "check_docs: $f is missing"
    exit 1
  fi
done
tracker='\b[Ii]ssue [0-9]+|\(issue'
devlog='\b(this|previous|another|earlier) session\b'
bad=$({
  grep -nHE -- "$tracker" "${files[@]}" || true
  grep -nHiE -- "$devlog" "${files[@]}" || true
} | sort -t: -k1,1 -k2,2n | uniq)
if [ -n "$bad" ]; then
  echo "check_docs: tracker numbers or development-log phrasing in the user docs"
  echo "(reword them; dated history goes to bench/results/history.md):"
  echo "$bad"
  exit 1
fi
echo "check_docs: ${#files[@]} docs free of tracker numbers and development-log phrasing"
