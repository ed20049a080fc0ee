#!/usr/bin/env bash
# Builds the `adya` isolation checker (crates.io, an Elle-style checker for
# transaction histories) into .tools/adya at the top of the source tree
# (ignored by git), checker only (no database drivers), at a pinned version.
# Cheap when already there. The apps/nam tests check their transaction
# histories with .tools/adya/bin/adya. Uses cargo from PATH or ~/.cargo/bin;
# without cargo it says so and exits 0 (the nam history tests then fail,
# naming the missing checker and this script).
#   scripts/install-adya.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.1.0"
dest="$root/.tools/adya"
bin="$dest/bin/adya"

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null | awk '{print $2}')" = "$version" ]; then
  echo "install-adya: $bin ($version) present"
  exit 0
fi
cargo="$(command -v cargo || true)"
if [ -z "$cargo" ] && [ -x "$HOME/.cargo/bin/cargo" ]; then cargo="$HOME/.cargo/bin/cargo"; fi
if [ -z "$cargo" ]; then
  echo "install-adya: cargo not found (install Rust from https://rustup.rs to build the adya checker)" >&2
  exit 0
fi
echo "install-adya: building adya $version into $dest"
# An unoptimised build (--debug): it compiles in half the CPU time (about 25
# against 47 CPU-seconds here), and the tests' histories are small enough
# that checking them takes the same time either way.
"$cargo" install --quiet --locked --debug --no-default-features --version "=$version" --root "$dest" adya </dev/null
echo "install-adya: installed $bin"
