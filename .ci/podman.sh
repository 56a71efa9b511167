#!/usr/bin/env bash
# Podman's Docker-compatible API for the container tests: `start` installs podman+runc when missing,
# writes a containers.conf that works on the CI machine, starts `podman system service` on a socket
# and waits until it answers; `stop` stops that service by the pid it recorded.
#
#   eval "$(.ci/podman.sh start)"     # prints: export MLREPRO_PODMAN_SOCKET=unix://...
#   .ci/podman.sh stop
#
# Why these settings (see ../shared/reference/engines-on-ci.md): crun fails on this machine's
# hybrid cgroups, so the runtime is runc; raising RLIMIT_NOFILE/NPROC is not permitted, so the
# containers' default ulimits are the host's own limits.
set -euo pipefail

STATE_DIR="${MLREPRO_PODMAN_STATE:-/tmp/mlrepro-podman}"
SOCK="$STATE_DIR/podman.sock"
PIDFILE="$STATE_DIR/service.pid"
CONF="$STATE_DIR/containers.conf"

log() { echo "podman.sh: $*" >&2; }

start() {
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    log "installing podman and runc"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq podman runc >&2
  fi
  mkdir -p "$STATE_DIR"
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    log "service already running (pid $(cat "$PIDFILE"))"
  else
    # The reference recipe's values, lowered further when the host's own limits are lower
    # (nproc equal to the host's 96364 was still refused for RUN steps here; 4096 works).
    local nofile nproc
    nofile="$(ulimit -n)"; nproc="$(ulimit -u)"
    { [ "$nofile" = unlimited ] || [ "$nofile" -gt 20000 ]; } && nofile=20000
    { [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ]; } && nproc=4096
    cat > "$CONF" <<CONF
# written by .ci/podman.sh
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONF
    # Builds read /etc/containers/containers.conf: install ours there unless someone else's is.
    if [ ! -f /etc/containers/containers.conf ] || grep -q "written by .ci/podman.sh" /etc/containers/containers.conf; then
      mkdir -p /etc/containers && cp "$CONF" /etc/containers/containers.conf
    else
      log "keeping the existing /etc/containers/containers.conf; the service uses $CONF"
    fi
    rm -f "$SOCK"
        CONTAINERS_CONF="$CONF" nohup podman system service --time=0 "unix://$SOCK" \
      >"$STATE_DIR/service.log" 2>&1 &
    echo $! > "$PIDFILE"
    for _ in $(seq 1 60); do
      if [ -S "$SOCK" ] && podman --remote --url "unix://$SOCK" version >/dev/null 2>&1; then
        break
      fi
      if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        log "podman system service exited; its log:"; cat "$STATE_DIR/service.log" >&2; exit 1
      fi
      sleep 0.5
    done
    podman --remote --url "unix://$SOCK" version >/dev/null || { log "no answer on $SOCK"; exit 1; }
    log "podman $(podman --version | awk '{print $3}') answering on unix://$SOCK (pid $(cat "$PIDFILE"))"
  fi
  echo "export MLREPRO_PODMAN_SOCKET=unix://$SOCK"
}

stop() {
  [ -f "$PIDFILE" ] || { log "not running"; return 0; }
  local pid; pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$PIDFILE" "$SOCK"
  log "stopped (pid $pid)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
