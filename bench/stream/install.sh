#!/usr/bin/env bash
# Builds the stream benchmark's Timely Dataflow peer (bench/stream/timely-ysb,
# Rust; timely 0.12.0 and libc from crates.io, pinned in its Cargo.lock) with
# cargo, installing Debian's cargo first where none is on the PATH. The demo
# and the tests never need it; only bench/stream/compare.py does.
#
#   bench/stream/install.sh
set -euo pipefail
cd "$(dirname "$0")/timely-ysb"

if ! command -v cargo >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y --no-install-recommends cargo
fi
cargo build --release --locked
echo "bench/stream/install.sh: $(pwd)/target/release/timely-ysb ($(cargo --version))"
