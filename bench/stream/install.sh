#!/usr/bin/env bash
# Builds the stream benchmark's peers: Timely Dataflow (bench/stream/timely-peer,
# Rust; timely 0.12.0 and libc from crates.io, pinned in its Cargo.lock) with
# cargo, and Apache Flink's MiniCluster (bench/stream/flink-peer, Java; Flink
# 1.18.1 from Maven Central) with Maven, installing Debian's cargo, JDK and
# maven first where they are missing. The demo and the tests never need
# them; only bench/stream/compare.py does.
#
#   bench/stream/install.sh
set -euo pipefail
cd "$(dirname "$0")"

missing=()
command -v cargo >/dev/null || missing+=(cargo)
command -v javac >/dev/null || missing+=(default-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update
  $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi
(cd timely-peer && cargo build --release --locked)
echo "bench/stream/install.sh: $(pwd)/timely-peer/target/release/timely-peer ($(cargo --version))"
(cd flink-peer && mvn -B -q package -DskipTests)
echo "bench/stream/install.sh: $(pwd)/flink-peer/target/flink-peer-0.1.0.jar (Flink 1.18.1, $(java -version 2>&1 | head -1))"
