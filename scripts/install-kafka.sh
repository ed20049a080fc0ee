#!/usr/bin/env bash
# Fetches the jars of an Apache Kafka broker (4.4.0, KRaft mode, the version
# scripts/kafka/pom.xml pins) from Maven Central into .tools/kafka/libs at the
# top of the source tree (ignored by git): Kafka has no binary tarball here, so
# the broker is the kafka_2.13 jar and its runtime dependencies (45 jars,
# 43 MB), plus a class data sharing archive that halves its start time. The
# apps/stream tests of the Kafka source and sink start a single-node broker
# from them with scripts/kafka/broker.sh. Cheap when already there (a stamp of
# the pom and of `java -version`). Needs java (17 or newer: Kafka 4 brokers
# need it) and mvn; without them it says so and exits 0 (the Kafka tests then
# skip, naming the missing piece and this script).
#   scripts/install-kafka.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pom="$root/scripts/kafka/pom.xml"
dest="$root/.tools/kafka"
libs="$dest/libs"
# The pom and the JDK: the class data sharing archive is only good for the JDK
# that recorded it.
stamp="$( (cat "$pom"; java -version 2>&1 || true) | sha256sum | cut -c1-16)"

if [ -d "$libs" ] && [ "$(cat "$dest/stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "install-kafka: $libs present"
  exit 0
fi
if ! command -v java >/dev/null 2>&1; then
  echo "install-kafka: java not found (install a JDK 17 or newer, e.g. apt-get install openjdk-17-jdk-headless, to run the Kafka test broker)" >&2
  exit 0
fi
java_major="$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}')"
if [ "${java_major:-0}" -lt 17 ] 2>/dev/null; then
  echo "install-kafka: java ${java_major:-?} is too old (Kafka 4 brokers need 17 or newer)" >&2
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "install-kafka: mvn not found (install Maven, e.g. apt-get install maven, to fetch the Kafka jars)" >&2
  exit 0
fi
echo "install-kafka: fetching the Kafka broker jars into $libs"
mkdir -p "$dest"
tmp="$(mktemp -d "$dest/libs.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$tmp" </dev/null >"$dest/mvn.log" 2>&1; then
  cat "$dest/mvn.log" >&2
  echo "install-kafka: mvn failed (log above, also in $dest/mvn.log)" >&2
  exit 1
fi
rm -rf "$libs" "$dest/kafka.jsa"
chmod 755 "$tmp"
mv "$tmp" "$libs"
echo "install-kafka: installed $(find "$libs" -name '*.jar' | wc -l) jars ($(du -sh "$libs" | cut -f1)) in $libs"

# Record the classes a broker loads while it starts into a class data sharing
# archive (.tools/kafka/kafka.jsa, ~50 MB): scripts/kafka/broker.sh then starts
# in about 2.3 s instead of 3.7 s and uses half the CPU. Optional: without it
# the broker starts all the same.
echo "install-kafka: recording a class data sharing archive of the broker"
tmp="$(mktemp -d)"
if KAFKA_BROKER_CDS_DUMP="$dest/kafka.jsa.new" KAFKA_BROKER_MAX_SECONDS=300 \
  "$root/scripts/kafka/broker.sh" start "$tmp" >/dev/null </dev/null &&
  KAFKA_BROKER_STOP_TIMEOUT=60 "$root/scripts/kafka/broker.sh" stop "$tmp" </dev/null &&
  [ -s "$dest/kafka.jsa.new" ]; then
  mv "$dest/kafka.jsa.new" "$dest/kafka.jsa"
  echo "install-kafka: recorded $dest/kafka.jsa"
else
  "$root/scripts/kafka/broker.sh" stop "$tmp" </dev/null || true
  rm -f "$dest/kafka.jsa.new"
  echo "install-kafka: no class data sharing archive (the broker starts without it, only slower)" >&2
fi
echo "$stamp" >"$dest/stamp"
