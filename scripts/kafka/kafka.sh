#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, broker+controller) for tests, resolved from
# Maven Central with Maven instead of a release tarball.
#
#   kafka.sh install          cache the broker jars (idempotent; no network once cached)
#   kafka.sh start [RUN_DIR]  format a fresh log dir, start on free 127.0.0.1 ports, wait until
#                             ready; prints the bootstrap address (also in RUN_DIR/bootstrap)
#   kafka.sh stop [RUN_DIR]   stop the broker and delete its data
#   kafka.sh status [RUN_DIR] print "running <bootstrap> <pid>" (exit 0) or "stopped" (exit 3)
#
# Environment: OAHU_CACHE (default ~/.cache/oahu), KAFKA_HEAP_OPTS (default -Xmx512m),
# KAFKA_START_TIMEOUT seconds (default 90), PYTHON (for picking free ports, default python3).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/pom.xml")"
CACHE="${OAHU_CACHE:-$HOME/.cache/oahu}/kafka-$VERSION"
LIBS="$CACHE/libs"
RUN_DIR="${2:-$CACHE/run}"
PYTHON="${PYTHON:-python3}"

die() { echo "kafka.sh: $*" >&2; exit 1; }

install() {
  [[ -f "$LIBS/.complete" ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
  command -v java >/dev/null || die "java not found (apt-get install openjdk-17-jre-headless)"
  mkdir -p "$CACHE"
  # Resolve into a private dir and rename, so concurrent installs never see half a classpath.
  local tmp
  tmp="$(mktemp -d "$CACHE/libs.tmp.XXXXXX")"
  if ! mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
    cat "$tmp.mvn.log" >&2
    rm -rf "$tmp" "$tmp.mvn.log"
    die "maven could not resolve kafka $VERSION"
  fi
  rm -f "$tmp.mvn.log"
  touch "$tmp/.complete"
  if ! mv -T "$tmp" "$LIBS" 2>/dev/null; then
    rm -rf "$tmp"  # another install won the race
    [[ -f "$LIBS/.complete" ]] || die "could not install into $LIBS"
  fi
}

free_ports() {  # two distinct free loopback ports: broker, controller
  "$PYTHON" - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

java_run() {  # java_run MAIN_CLASS ARGS...; exec so a backgrounded call's $! is the JVM
  # shellcheck disable=SC2086  # option lists are meant to split
  exec java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms64m} ${JAVA_EXTRA:-} -XX:+UseSerialGC \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$HERE/log4j2.properties" -Dkafka.logs.dir="$RUN_DIR/logs" \
    -cp "$LIBS/*" "$@"
}

write_properties() {  # write_properties BROKER_PORT CONTROLLER_PORT
  cat >"$RUN_DIR/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$2
listeners=PLAINTEXT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$2
advertised.listeners=PLAINTEXT://127.0.0.1:$1
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$RUN_DIR/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
}

running_pid() {
  [[ -f "$RUN_DIR/kafka.pid" ]] || return 1
  local pid
  pid="$(cat "$RUN_DIR/kafka.pid")"
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start_once() {  # one attempt; returns 1 if the broker died (e.g. a port was taken meanwhile)
  local ports broker controller cluster_id pid deadline
  read -r broker controller <<<"$(free_ports)"
  rm -rf "$RUN_DIR/data" "$RUN_DIR/logs"
  mkdir -p "$RUN_DIR/logs"
  write_properties "$broker" "$controller"
  # A Kafka Uuid is 16 random bytes in unpadded URL-safe base64 (saves a JVM start); one
  # starting with "-" would be read as a command-line option, as Kafka's own generator knows.
  cluster_id="-"
  while [[ "$cluster_id" == -* ]]; do
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
  done
  # The formatter is a short-lived JVM: C1 only starts it faster.
  (JAVA_EXTRA="-XX:TieredStopAtLevel=1" java_run kafka.tools.StorageTool format -t "$cluster_id" -c "$RUN_DIR/server.properties") \
    >"$RUN_DIR/logs/format.log" 2>&1 || { cat "$RUN_DIR/logs/format.log" >&2; die "format failed"; }
  java_run kafka.Kafka "$RUN_DIR/server.properties" </dev/null >"$RUN_DIR/logs/stdout.log" 2>&1 &
  pid=$!
  echo "$pid" >"$RUN_DIR/kafka.pid"
  deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-90}))
  while ((SECONDS < deadline)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$RUN_DIR/kafka.pid"
      return 1
    fi
    if grep -q "Kafka Server started" "$RUN_DIR/logs/server.log" 2>/dev/null; then
      echo "127.0.0.1:$broker" >"$RUN_DIR/bootstrap"
      return 0
    fi
    sleep 0.2
  done
  stop
  die "broker not ready after ${KAFKA_START_TIMEOUT:-90}s; see $RUN_DIR/logs"
}

start() {
  install
  if running_pid >/dev/null; then
    cat "$RUN_DIR/bootstrap"
    return 0
  fi
  mkdir -p "$RUN_DIR"
  local attempt
  for attempt in 1 2 3; do
    if start_once; then
      cat "$RUN_DIR/bootstrap"
      return 0
    fi
    echo "kafka.sh: broker exited during start (attempt $attempt)" >&2
  done
  tail -n 40 "$RUN_DIR/logs/server.log" "$RUN_DIR/logs/stdout.log" >&2 || true
  die "broker failed to start; see $RUN_DIR/logs"
}

stop() {
  local pid
  if pid="$(running_pid)"; then
    kill "$pid"
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -rf "$RUN_DIR/data" "$RUN_DIR/kafka.pid" "$RUN_DIR/bootstrap"
}

status() {
  local pid
  if pid="$(running_pid)"; then
    echo "running $(cat "$RUN_DIR/bootstrap" 2>/dev/null) $pid"
  else
    echo "stopped"
    return 3
  fi
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: kafka.sh install|start|stop|status [RUN_DIR]" ;;
esac
