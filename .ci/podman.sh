#!/usr/bin/env bash
# Podman's Docker-compatible API for the container tests: `start` installs podman+runc when missing,
# writes a containers.conf that works on the CI machine, starts `podman system service` on a socket
# and waits until it answers; `stop` stops that service by the pid it recorded.
#
#   eval "$(.ci/podman.sh start)"     # prints: export MLREPRO_PODMAN_STATE=... MLREPRO_PODMAN_SOCKET=unix://...
#   .ci/podman.sh stop                # stops the service of $MLREPRO_PODMAN_STATE
#
# Run as root on a shared machine, nothing here trusts /tmp: the state folder is a new one from
# `mktemp -d` (or $MLREPRO_PODMAN_STATE, which must be the caller's own, mode 700, not a symlink);
# `stop` kills only a pid whose /proc entry is this user's `podman system service` on this folder's
# socket, started when the pid file says; the containers.conf installed in /etc is written from the
# private folder, never copied from one another user can write.
#
# Why these settings (see ../shared/reference/engines-on-ci.md): crun fails on this machine's
# hybrid cgroups, so the runtime is runc; raising RLIMIT_NOFILE/NPROC is not permitted, so the
# containers' default ulimits are the host's own limits.
set -euo pipefail

log() { echo "podman.sh: $*" >&2; }

# The folder, when it is a real folder of this user's with mode 700; else exit naming it and its owner.
private_dir() {
  local d="$1"
  if [ -L "$d" ] || [ ! -d "$d" ]; then
    log "refusing $d: not a folder of its own (a symlink or not a folder, owner $(stat -c %U "$d" 2>/dev/null || echo none))"; exit 1
  fi
  local owner mode
  owner="$(stat -c %u "$d")"; mode="$(stat -c %a "$d")"
  if [ "$owner" != "$(id -u)" ] || [ "$mode" != 700 ]; then
    log "refusing $d: owned by $(stat -c %U "$d") (uid $owner) with mode $mode; the state folder must be yours with mode 700"; exit 1
  fi
}

set_paths() {
  STATE_DIR="$1"
  SOCK="$STATE_DIR/podman.sock"
  PIDFILE="$STATE_DIR/service.pid"
  CONF="$STATE_DIR/containers.conf"
}

# The start time of a pid (field 22 of /proc/PID/stat): with the pid it names one process, not a later one.
start_time() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

# 0 when PID is this user's `podman system service` on $SOCK and was started when the pid file says.
is_our_service() {
  local pid="$1" started="$2"
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  [ -r "/proc/$pid/cmdline" ] || return 1
  [ "$(stat -c %u "/proc/$pid")" = "$(id -u)" ] || return 1
  [ "$(start_time "$pid")" = "$started" ] || return 1
  local cmd; cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline")"
  case "$cmd" in *podman*" system service "*"unix://$SOCK"*) return 0 ;; esac
  return 1
}

start() {
  if [ -n "${MLREPRO_PODMAN_STATE:-}" ]; then
    [ -e "$MLREPRO_PODMAN_STATE" ] || [ -L "$MLREPRO_PODMAN_STATE" ] || mkdir -m 700 "$MLREPRO_PODMAN_STATE"
    set_paths "$MLREPRO_PODMAN_STATE"
  else
    set_paths "$(mktemp -d "${TMPDIR:-/tmp}/mlrepro-podman.XXXXXXXX")"
  fi
  private_dir "$STATE_DIR"
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    log "installing podman and runc"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq podman runc >&2
  fi
  local running=""
  if [ -f "$PIDFILE" ] && [ ! -L "$PIDFILE" ]; then
    read -r pid started < "$PIDFILE" || true
    is_our_service "${pid:-}" "${started:-}" && running="$pid"
  fi
  if [ -n "$running" ]; then
    log "service already running (pid $running)"
  else
    # The reference recipe's values, lowered further when the host's own limits are lower
    # (nproc equal to the host's 96364 was still refused for RUN steps here; 4096 works).
    local nofile nproc
    nofile="$(ulimit -n)"; nproc="$(ulimit -u)"
    { [ "$nofile" = unlimited ] || [ "$nofile" -gt 20000 ]; } && nofile=20000
    { [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ]; } && nproc=4096
    rm -f "$CONF"
    cat > "$CONF" <<CONF
# written by .ci/podman.sh
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]
[engine]
runtime = "runc"
CONF
    # Builds read /etc/containers/containers.conf: install ours there unless someone else's is.
    if [ ! -f /etc/containers/containers.conf ] || grep -q "written by .ci/podman.sh" /etc/containers/containers.conf; then
      # from the private folder (no one else can swap it), as a new file renamed into place
      mkdir -p /etc/containers && install -m 0644 -T "$CONF" /etc/containers/.containers.conf.$$ \
        && mv -f /etc/containers/.containers.conf.$$ /etc/containers/containers.conf
    else
      log "keeping the existing /etc/containers/containers.conf; the service uses $CONF"
    fi
    rm -f "$SOCK"
        CONTAINERS_CONF="$CONF" nohup podman system service --time=0 "unix://$SOCK" \
      >"$STATE_DIR/service.log" 2>&1 &
    local pid=$!
    echo "$pid $(start_time "$pid")" > "$PIDFILE"
    for _ in $(seq 1 60); do
      if [ -S "$SOCK" ] && podman --remote --url "unix://$SOCK" version >/dev/null 2>&1; then
        break
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        log "podman system service exited; its log:"; cat "$STATE_DIR/service.log" >&2; exit 1
      fi
      sleep 0.5
    done
    podman --remote --url "unix://$SOCK" version >/dev/null || { log "no answer on $SOCK"; exit 1; }
    log "podman $(podman --version | awk '{print $3}') answering on unix://$SOCK (pid $pid)"
  fi
  printf 'export MLREPRO_PODMAN_STATE=%q MLREPRO_PODMAN_SOCKET=%q\n' "$STATE_DIR" "unix://$SOCK"
}

stop() {
  [ -n "${MLREPRO_PODMAN_STATE:-}" ] || { log "not running (no MLREPRO_PODMAN_STATE: start prints it)"; return 0; }
  [ -e "$MLREPRO_PODMAN_STATE" ] || { log "not running ($MLREPRO_PODMAN_STATE is gone)"; return 0; }
  set_paths "$MLREPRO_PODMAN_STATE"
  private_dir "$STATE_DIR"
  [ -f "$PIDFILE" ] || { log "not running"; return 0; }
  local pid started
  read -r pid started < "$PIDFILE" || true
  if is_our_service "${pid:-}" "${started:-}"; then
    kill "$pid"
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    is_our_service "$pid" "$started" && kill -9 "$pid"
    log "stopped (pid $pid)"
  elif [ -n "${pid:-}" ] && [ -e "/proc/${pid}" ]; then
    log "not stopping pid $pid: it is not the podman service this folder started (its command: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | head -c 200))"
  fi
  rm -f "$PIDFILE" "$SOCK"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
