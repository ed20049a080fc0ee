#!/usr/bin/env bash
# Counts the public surface of include/sluice at a git revision (default: the
# work tree): the public types (classes, structs, enums and their public
# nested types, outside namespace detail), the public functions and how many
# of them are overloads of another, and every `detail` name in a public
# signature (a public member's type or parameters, a public base class).
# Doxygen reads the headers (XML, undocumented names included); surface.py
# counts. Issue 36's proof compares 1.0 with now:
#   bench/api/surface.sh 53c79a7    # 1.0, before the 1.1 wave
#   bench/api/surface.sh            # the work tree
# Add -v after the revision for the lists behind the counts.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rev="${1:-}"
verbose="${2:-}"
[ "$rev" = "-v" ] && { rev=""; verbose="-v"; }
command -v doxygen >/dev/null || { echo "surface: doxygen is missing (scripts/install-deps.sh doxygen)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ -n "$rev" ]; then
  git -C "$root" archive "$rev" include | tar -x -C "$tmp"
  src="$tmp"
else
  src="$root"
fi
cat >"$tmp/Doxyfile" <<DOX
INPUT = $src/include/sluice
FILE_PATTERNS = *.h
EXCLUDE = $src/include/sluice/detail $src/include/sluice/export.h
EXTRACT_ALL = YES
EXTRACT_PRIVATE = NO
EXTRACT_STATIC = YES
GENERATE_HTML = NO
GENERATE_LATEX = NO
GENERATE_XML = YES
XML_OUTPUT = $tmp/xml
QUIET = YES
WARNINGS = NO
MACRO_EXPANSION = YES
EXPAND_ONLY_PREDEF = YES
PREDEFINED = SLUICE_API_BEGIN= SLUICE_API_END= SLUICE_EXPORT=
DOX
doxygen "$tmp/Doxyfile" >/dev/null
python3 "$here/surface.py" "$tmp/xml" $verbose
