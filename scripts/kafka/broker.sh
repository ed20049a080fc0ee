#!/usr/bin/env bash
# Starts and stops a single-node Kafka broker (KRaft: broker and controller in
# one JVM) on 127.0.0.1 for the apps/stream tests (the Kafka source and sink of
# sluice-stream). It runs the jars that scripts/install-kafka.sh put into
# .tools/kafka/libs; its configuration, data and logs all live in DIR, a
# directory the test owns (a temporary one), so that nothing is left elsewhere.
#
#   scripts/kafka/broker.sh start DIR [PORT]
#       Formats DIR/data (unless already formatted: a start in the same DIR
#       after a stop keeps the topics), starts the broker on PORT (default:
#       the port of the last start in DIR if free, else a free one), waits
#       until it answers a Metadata request listing itself (at most
#       KAFKA_BROKER_START_TIMEOUT seconds, default 60), then prints
#       `bootstrap=127.0.0.1:PORT` on stdout. The pid is in DIR/broker.pid,
#       the port in DIR/broker.port, the log in DIR/logs/server.log.
#   scripts/kafka/broker.sh stop DIR
#       Stops it (SIGTERM, then SIGKILL after KAFKA_BROKER_STOP_TIMEOUT
#       seconds, default 30) and waits until the process is gone. Stopping a
#       broker that is not running is not an error.
#   scripts/kafka/broker.sh status DIR
#       Exit 0 and `bootstrap=...` if a broker of DIR runs and answers.
#
# Exit status: 0 done; 1 failed (the end of the broker's log is printed on
# stderr); 3 Kafka is not installed here (no java, or no jars: run
# scripts/install-kafka.sh), so that a test can skip with that message.
#
# A broker never outlives its owner for long: a small watchdog kills it after
# KAFKA_BROKER_MAX_SECONDS (default 3600; 0: no limit), and, when
# KAFKA_BROKER_OWNER_PID is set, as soon as that process is gone.
# KAFKA_BROKER_JVM_OPTS replaces the JVM options below; KAFKA_BROKER_CDS=0
# leaves the class data sharing archive out; KAFKA_LIBS replaces the jar
# directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
libs="${KAFKA_LIBS:-$root/.tools/kafka/libs}"
# Small heap and serial GC: a test broker beside other tests on 2 cores. C1
# only and no perf data file cut the start's CPU time. With the class data
# sharing archive of the broker's classes that install-kafka.sh records
# (.tools/kafka/kafka.jsa) the JVM starts in half the time; if the archive
# does not fit (another JDK, other jars) the JVM warns in logs/broker.out and
# runs without it.
jvm_opts="${KAFKA_BROKER_JVM_OPTS:--Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -Djava.awt.headless=true}"
cds="$libs/../kafka.jsa"
if [ -n "${KAFKA_BROKER_CDS_DUMP:-}" ]; then
  jvm_opts="$jvm_opts -XX:ArchiveClassesAtExit=$KAFKA_BROKER_CDS_DUMP"
elif [ -f "$cds" ] && [ "${KAFKA_BROKER_CDS:-1}" != 0 ]; then
  jvm_opts="$jvm_opts -XX:SharedArchiveFile=$cds"
fi
start_timeout="${KAFKA_BROKER_START_TIMEOUT:-60}"
stop_timeout="${KAFKA_BROKER_STOP_TIMEOUT:-30}"
max_seconds="${KAFKA_BROKER_MAX_SECONDS:-3600}"

usage() {
  echo "usage: $0 start DIR [PORT] | stop DIR | status DIR" >&2
  exit 1
}
say() { echo "broker: $*" >&2; }

# alive PID: the process exists and is not a zombie.
alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [ -n "$state" ] && [ "$state" != Z ]
}

# ours PID DIR: PID is a broker started for DIR (not a recycled pid).
ours() {
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2/server.properties"
}

# port_in_use PORT: something accepts connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port [NOT]: a port below the ephemeral range that nothing listens on.
free_port() {
  local p _
  for _ in $(seq 200); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    if [ "$p" != "${1:-}" ] && ! port_in_use "$p"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# rpc PORT REQUEST_HEX: sends one request (hex, without its size) to
# 127.0.0.1:PORT and prints the response (hex, without its size).
rpc() {
  local port="$1" req="$2" len resp
  exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
  # shellcheck disable=SC2059
  printf "$(printf '%08x%s' $((${#req} / 2)) "$req" | sed 's/../\\x&/g')" >&3
  len="$(timeout 5 head -c 4 <&3 | od -An -tx1 | tr -d ' \n')"
  if [ ${#len} -ne 8 ] || [ $((16#$len)) -le 0 ] || [ $((16#$len)) -gt 65536 ]; then
    exec 3<&-
    return 1
  fi
  resp="$(timeout 5 head -c $((16#$len)) <&3 | od -An -tx1 | tr -d ' \n')"
  exec 3<&-
  echo "$resp"
}
hex() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n'; }
client="0005$(hex probe)"

# probe PORT: the broker answers a Metadata request (v4, no topics) listing
# itself as 127.0.0.1:PORT, which it does once registered and unfenced; then
# it finds a transaction coordinator and a group coordinator (FindCoordinator
# v1, error 0) and gets a producer id for the transactional id
# "sluice-probe": this creates and loads __transaction_state and
# __consumer_offsets, so that a test's first init_transactions or group
# request does not wait for them.
probe() {
  local port="$1" resp key_type
  resp="$(rpc "$port" "0003000400000001${client}0000000000")" || return 1
  [[ "$resp" == *"0009$(hex 127.0.0.1)$(printf '%08x' "$port")"* ]] || return 1
  for key_type in 01 00; do
    # api 10 v1 | correlation 2 | client | key "sluice-probe" | key_type
    resp="$(rpc "$port" "000a000100000002${client}000c$(hex sluice-probe)$key_type")" || return 1
    # correlation (4 bytes), throttle (4), error code (2)
    [ "${resp:16:4}" = 0000 ] || return 1
    if [ "$key_type" = 01 ]; then
      # The coordinator loads its partition after FindCoordinator answers:
      # InitProducerId (v0, transactional id "sluice-probe", timeout 60 s)
      # fails with COORDINATOR_LOAD_IN_PROGRESS until then (librdkafka then
      # backs off 500 ms).
      resp="$(rpc "$port" "0016000000000003${client}000c$(hex sluice-probe)0000ea60")" || return 1
      [ "${resp:16:4}" = 0000 ] || return 1
    fi
  done
}

log_tail() {
  local f
  for f in "$dir/logs/server.log" "$dir/logs/broker.out" "$dir/logs/format.log"; do
    if [ -s "$f" ]; then
      echo "--- last lines of $f" >&2
      grep -E 'ERROR|FATAL|Exception|WARN' "$f" | tail -n 15 >&2 || true
      tail -n 10 "$f" >&2
    fi
  done
}

stop_broker() {
  local pid="" wd="" waited=0
  [ -f "$dir/broker.pid" ] && pid="$(cat "$dir/broker.pid")"
  [ -f "$dir/watchdog.pid" ] && wd="$(cat "$dir/watchdog.pid")"
  if [ -n "$pid" ] && alive "$pid" && ours "$pid" "$dir"; then
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid" && [ "$waited" -lt $((stop_timeout * 10)) ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if alive "$pid"; then
      say "pid $pid still running after ${stop_timeout}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while alive "$pid"; do sleep 0.1; done
    fi
  fi
  if [ -n "$wd" ] && alive "$wd"; then kill -TERM "$wd" 2>/dev/null || true; fi
  rm -f "$dir/broker.pid" "$dir/watchdog.pid"
}

# Kills the broker when its owner is gone or it has run too long; ends with it.
watchdog() {
  local pid="$1" owner="$2" deadline=0 now
  [ "$max_seconds" -gt 0 ] && deadline=$(($(date +%s) + max_seconds))
  while alive "$pid"; do
    now=$(date +%s)
    if { [ -n "$owner" ] && ! alive "$owner"; } || { [ "$deadline" -gt 0 ] && [ "$now" -ge "$deadline" ]; }; then
      echo "watchdog: owner ${owner:-none} gone or ${max_seconds}s reached: stopping broker $pid" >>"$dir/logs/broker.out"
      kill -TERM "$pid" 2>/dev/null || true
      now=0
      while alive "$pid" && [ "$now" -lt "$stop_timeout" ]; do
        sleep 1
        now=$((now + 1))
      done
      if alive "$pid" && ours "$pid" "$dir"; then kill -KILL "$pid" 2>/dev/null || true; fi
      break
    fi
    sleep 1
  done
}

start_broker() {
  local port="$1" given="$1" cport cid pid t0 deadline attempt
  local -a dir_opts
  if [ -f "$dir/broker.pid" ] && alive "$(cat "$dir/broker.pid")" && ours "$(cat "$dir/broker.pid")" "$dir"; then
    say "a broker already runs for $dir (pid $(cat "$dir/broker.pid")); stop it first"
    exit 1
  fi
  rm -f "$dir/broker.pid" "$dir/watchdog.pid"
  if [ -z "$port" ] && [ -f "$dir/broker.port" ] && ! port_in_use "$(cat "$dir/broker.port")"; then
    port="$(cat "$dir/broker.port")"
  fi
  mkdir -p "$dir/logs" "$dir/tmp"
  # Interrupted while starting (a test's timeout): leave nothing running.
  trap 'stop_broker; exit 1' INT TERM HUP
  for attempt in 1 2 3; do
    if [ -z "$port" ]; then port="$(free_port)" || { say "no free port found"; exit 1; }; fi
    if port_in_use "$port"; then say "port $port is in use"; exit 1; fi
    cport="$(free_port "$port")" || { say "no free port found"; exit 1; }
    sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" -e "s|@CONTROLLER_PORT@|$cport|g" \
      "$here/server.properties.in" >"$dir/server.properties"
    echo "$port" >"$dir/broker.port"
    # Temporary files (native libraries of the compression codecs) and crash
    # reports stay in DIR too.
    dir_opts=(-Djava.io.tmpdir="$dir/tmp" -XX:ErrorFile="$dir/logs/hs_err_%p.log")

    if [ ! -f "$dir/data/meta.properties" ]; then
      # A cluster id is 16 random bytes in URL-safe base64. Given as its own
      # argument, one that starts with '-' (1 in 64) reads as an option
      # ("argument --cluster-id/-t: expected one argument"): draw again.
      cid="-"
      while [ "${cid#-}" != "$cid" ]; do
        cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)"
      done
      # shellcheck disable=SC2086
      if ! java $jvm_opts "${dir_opts[@]}" -Dlog4j2.configurationFile="$here/log4j2.properties" \
        -Dkafka.logs.dir="$dir/logs" -cp "$libs/*" kafka.tools.StorageTool \
        format -t "$cid" -c "$dir/server.properties" </dev/null >"$dir/logs/format.log" 2>&1; then
        say "formatting $dir/data failed"
        log_tail
        exit 1
      fi
    fi

    t0=$(date +%s)
    # shellcheck disable=SC2086
    java $jvm_opts "${dir_opts[@]}" -Dlog4j2.configurationFile="$here/log4j2.properties" \
      -Dkafka.logs.dir="$dir/logs" -cp "$libs/*" kafka.Kafka "$dir/server.properties" \
      </dev/null >>"$dir/logs/broker.out" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/broker.pid"
    watchdog "$pid" "${KAFKA_BROKER_OWNER_PID:-}" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"

    deadline=$((t0 + start_timeout))
    while alive "$pid"; do
      if probe "$port" 2>/dev/null; then
        trap - INT TERM HUP
        echo "bootstrap=127.0.0.1:$port"
        return 0
      fi
      if [ "$(date +%s)" -ge "$deadline" ]; then
        say "not ready after ${start_timeout}s"
        log_tail
        stop_broker
        exit 1
      fi
      sleep 0.2
    done
    # It died. Another process may have taken one of our ports in between:
    # try new ones unless the caller chose the port.
    stop_broker
    if [ -z "$given" ] && grep -q 'Address already in use' "$dir/logs/server.log" "$dir/logs/broker.out" 2>/dev/null; then
      say "port $port or $cport was taken meanwhile; retrying"
      port=""
      mv "$dir/logs/server.log" "$dir/logs/server.log.$attempt" 2>/dev/null || true
      continue
    fi
    break
  done
  say "the broker exited during start"
  log_tail
  exit 1
}

cmd="${1:-}"
[ -n "${2:-}" ] || usage
if [ "$cmd" != start ] && [ ! -d "$2" ]; then
  [ "$cmd" = stop ] && exit 0
  exit 1
fi
mkdir -p "$2"
dir="$(cd "$2" && pwd)"
case "$cmd" in
  start)
    if ! command -v java >/dev/null 2>&1; then
      say "java not found (install a JDK 17+, then run scripts/install-kafka.sh)"
      exit 3
    fi
    if ! compgen -G "$libs/kafka_2.13-*.jar" >/dev/null; then
      say "Kafka jars not found in $libs (run scripts/install-kafka.sh)"
      exit 3
    fi
    port="${3:-}"
    if [ -n "$port" ] && ! [[ "$port" =~ ^[0-9]+$ ]]; then usage; fi
    start_broker "$port"
    ;;
  stop)
    stop_broker
    ;;
  status)
    if [ -f "$dir/broker.pid" ] && alive "$(cat "$dir/broker.pid")" && probe "$(cat "$dir/broker.port")" 2>/dev/null; then
      echo "bootstrap=127.0.0.1:$(cat "$dir/broker.port")"
    else
      exit 1
    fi
    ;;
  *) usage ;;
esac
