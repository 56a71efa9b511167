#!/usr/bin/env bash
# A Slurm cluster with job accounting on this machine, for the Slurm tests and for trying
# `snakemake --profile profiles/slurm` by hand. `start` installs what is missing (slurm-wlm, munge,
# slurmdbd, mariadb-server), starts munged, MariaDB, slurmdbd, slurmctld and one slurmd per node with
# every config, database and state file under one folder, and waits until every node is idle and
# `sacct` answers; `stop` stops the daemons it started, by the pids they recorded, in reverse order, and
# removes the network namespaces and the bridge it made.
#
#   eval "$(.ci/slurm.sh start)"                  # one node, this host: export SLURM_CONF=/etc/slurm/slurm.conf
#   eval "$(SLURM_NODES=2 .ci/slurm.sh start)"    # two nodes, mlnode1 and mlnode2
#   .ci/slurm.sh stop
#
# SLURM_NODES=N (N > 1): each node's slurmd runs in its own network, UTS and mount namespace: its own
# host name (mlnodeI), its own address (MLREPRO_SLURM_SUBNET.(10+I), default 10.251.77.0/24) on a veth
# to a bridge made here (mlrepro-br0, MLREPRO_SLURM_SUBNET.1 on the host side, where slurmctld listens),
# and an /etc/hosts of its own (bind-mounted in its mount namespace) that names every node, so a job's
# ranks find each other by host name as on a real cluster. Only that bridge, its veths and those
# namespaces are created; no other interface, route or namespace is touched. Start refuses a subnet
# that an address or route here already uses. Debian's Slurm is built without --enable-multiple-slurmd,
# so distinct host names are what tells the slurmds apart (NodeName = the namespace's host name).
#
# Why accounting (../shared/reference/engines-on-ci.md): the executor plugin asks `sacct` for job
# states whenever `sacct` exists; without slurmdbd it answers "accounting storage is disabled" and
# the pipeline waits forever. The config goes where Slurm looks by default, /etc/slurm (the executor's
# job step drops every SLURM_* variable, SLURM_CONF too, before its inner srun), and `stop` removes it
# again: a slurm.conf naming a controller that is gone makes every Slurm client wait ~10 s for it.
# An /etc/slurm/slurm.conf that this script did not write is never overwritten.
set -euo pipefail

D="${MLREPRO_SLURM_STATE:-/tmp/mlrepro-slurm}"
DB_PORT="${MLREPRO_SLURM_DB_PORT:-3307}"
NODES="${SLURM_NODES:-1}"
NET="${MLREPRO_SLURM_SUBNET:-10.251.77}"
BRIDGE=mlrepro-br0
ETC=/etc/slurm
MARK="# written by .ci/slurm.sh"
export SLURM_CONF="$ETC/slurm.conf"

log() { echo "slurm.sh: $*" >&2; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND every 0.5 s
  local seconds="$1" what="$2"; shift 2
  for _ in $(seq 1 $((seconds * 2))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "timed out after ${seconds}s waiting for $what; logs in $D"
  tail -n 20 "$D"/*.log >&2 || true
  exit 1
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

idle_nodes() { [ "$(sinfo -h -N -o %T | grep -cx idle)" -ge "$1" ]; }

# The nodes' network: a bridge, and per node a namespace whose veth (eth0 inside) is on it. Each thing
# made is listed in $D/created at once, so that `stop` removes exactly those, even after a failed start.
make_network() {
  if ip -4 -o addr show | grep -q " inet $NET\." || ip -4 route show | grep -q "^$NET\."; then
    log "subnet $NET.0/24 (MLREPRO_SLURM_SUBNET) is in use on this machine; choose another"; exit 1
  fi
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "interface $BRIDGE exists already (a cluster not stopped? .ci/slurm.sh stop); not touching it"; exit 1
  fi
  ip link add "$BRIDGE" type bridge && echo "link $BRIDGE" >>"$D/created"
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local i ns
  for i in $(seq 1 "$NODES"); do
    ns="mlrepro-node$i"
    if ip netns list | grep -qw "$ns"; then log "network namespace $ns exists already; not touching it"; exit 1; fi
    ip netns add "$ns" && echo "netns $ns" >>"$D/created"
    ip link add "mlrepro-v$i" type veth peer name eth0 netns "$ns" && echo "link mlrepro-v$i" >>"$D/created"
    ip link set "mlrepro-v$i" master "$BRIDGE"
    ip link set "mlrepro-v$i" up
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

remove_network() {
  [ -f "$D/created" ] || return 0
  local kind name
  # in reverse order: veths, then namespaces, then the bridge
  tac "$D/created" | while read -r kind name; do
    case "$kind" in
      link) ip link del "$name" 2>/dev/null || true ;;
      netns) ip netns del "$name" 2>/dev/null || true ;;
    esac
  done
  rm -f "$D/created"
}

node_lines() {  # slurm.conf's NodeName lines
  local cpus="$1" mem="$2" i
  if [ "$NODES" -eq 1 ]; then
    echo "NodeName=$(hostname) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
  else
    for i in $(seq 1 "$NODES"); do
      echo "NodeName=mlnode$i NodeHostname=mlnode$i NodeAddr=$NET.$((10 + i)) CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
  fi
}

start_slurmds() {
  if [ "$NODES" -eq 1 ]; then slurmd >&2; return; fi
  local i
  { grep -v -w -e "mlnode[0-9]*" /etc/hosts; echo "$NET.1 $(hostname)"
    for i in $(seq 1 "$NODES"); do echo "$NET.$((10 + i)) mlnode$i"; done; } >"$D/hosts"
  for i in $(seq 1 "$NODES"); do
    # its own host name and /etc/hosts (a private mount namespace), in its network namespace; nsenter, not
    # `ip netns exec`, which mounts a /sys of its own without /sys/fs/cgroup, and slurmd needs that
    nsenter --net="/run/netns/mlrepro-node$i" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd' sh "mlnode$i" "$D/hosts" >&2
  done
}

start() {
  # a step that fails ends the script (set -e): say where, and that `stop` removes what was started
  trap 'log "start failed at line $LINENO; logs in $D; .ci/slurm.sh stop stops and removes what started"' ERR
  case "$NODES" in ''|*[!0-9]*|0) log "SLURM_NODES=$NODES: a number of nodes, 1 or more"; exit 2 ;; esac
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >&2
  fi
  if alive "$D/slurmctld.pid"; then
    local running
    running="$(sinfo -h -N -o %N | sort -u | wc -l)"
    if [ "$running" -ne "$NODES" ]; then
      log "already running with $running node(s), not $NODES; .ci/slurm.sh stop first"; exit 1
    fi
    log "already running (slurmctld pid $(cat "$D/slurmctld.pid"), $running node(s))"
    echo "export SLURM_CONF=$SLURM_CONF"
    return 0
  fi
  if [ -f "$SLURM_CONF" ] && ! grep -qx "$MARK" "$SLURM_CONF"; then
    log "$SLURM_CONF exists and was not written by this script; not touching it"; exit 1
  fi
  remove_network  # what a failed start left
  rm -rf "$D"
  mkdir -p "$ETC" "$D/state" "$D/spool" "$D/db" "$D/run"
  local host cpus mem controller name
  host="$(hostname)"; cpus="$(nproc)"
  # Four fifths of the host's memory, shared by the nodes, so that a job's --mem never asks for more than is there.
  mem="$(awk -v n="$NODES" '/MemTotal/ {print int($2 / 1024 * 0.8 / n)}' /proc/meminfo)"
  controller="$host"
  if [ "$NODES" -gt 1 ]; then
    make_network
    controller="$host($NET.1)"  # the nodes reach the controller on the bridge
  fi
  for name in $(node_lines 0 0 | sed 's/^NodeName=\([^ ]*\).*/\1/'); do mkdir -p "$D/spool/$name"; done

  # munge: the key the Debian package made; one munged per host, so keep one that runs already.
  # (Its socket is a file: the nodes' namespaces reach it too.)
  mkdir -p /run/munge "$D/munge" && chown -R munge:munge "$D/munge" /run/munge /var/log/munge /var/lib/munge /etc/munge
  if [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; then
    log "using the running munged"
  else
    su -s /bin/sh munge -c "munged --force --pid-file=$D/munge/munged.pid" >&2
    wait_for 10 munged munge -n
    cp "$D/munge/munged.pid" "$D/munged.pid"
  fi

  # MariaDB with its own data folder and TCP port, so that it touches no system database.
  chown mysql:mysql "$D/db" "$D/run"
  mariadb-install-db --user=mysql --datadir="$D/db" --auth-root-authentication-method=socket \
    --skip-test-db >"$D/mariadb-install.log" 2>&1
  mariadbd --no-defaults --user=mysql --datadir="$D/db" --socket="$D/run/mysqld.sock" \
    --pid-file="$D/run/mariadb.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --log-error="$D/mariadb.log" >/dev/null 2>&1 &
  echo $! >"$D/mariadb.pid"
  wait_for 30 MariaDB mariadb-admin --socket="$D/run/mysqld.sock" ping
  mariadb --socket="$D/run/mysqld.sock" -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmdbpass';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

  cat >"$ETC/slurmdbd.conf" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$D/slurmdbd.log
PidFile=$D/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmdbpass
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$ETC/slurmdbd.conf"
  # KillWait/OverTimeLimit 0-5 s: a job past its walltime ends within a minute's check, not later.
  # %n: a pid file, spool folder and log per node (several slurmds on this machine).
  cat >"$SLURM_CONF" <<EOF
$MARK
ClusterName=local
SlurmctldHost=$controller
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoreFlags=job_comment
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
KillWait=5
OverTimeLimit=0
MinJobAge=600
$(node_lines "$cpus" "$mem")
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  slurmdbd >&2
  wait_for 30 slurmdbd sacctmgr -n show cluster
  sacctmgr -i add cluster local >/dev/null 2>&1 || true   # adds account and user root too
  slurmctld >&2
  start_slurmds
  wait_for 60 "$NODES idle node(s)" idle_nodes "$NODES"
  # sacct answers only once the controller has registered with slurmdbd.
  wait_for 60 "sacct" sh -c 'sacct -n -X -S now-1minutes >/dev/null'
  log "Slurm $(sinfo -V | awk '{print $2}') up: $NODES node(s) $(sinfo -h -N -o %N | sort -u | paste -sd, -)" \
      "($cpus CPUs, ${mem} MB each), partition debug, accounting on; state in $D"
  echo "export SLURM_CONF=$SLURM_CONF"
}

stop() {
  local f pid stopped=()
  for f in "$D"/slurmd-*.pid "$D/slurmctld.pid" "$D/slurmdbd.pid" "$D/mariadb.pid" "$D/munged.pid"; do
    alive "$f" || continue
    pid="$(cat "$f")"
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    stopped+=("$(basename "$f" .pid):$pid")
  done
  rm -f "$D"/*.pid
  remove_network
  for f in "$ETC/slurm.conf" "$ETC/slurmdbd.conf"; do
    if [ -f "$f" ] && grep -qx "$MARK" "$f"; then rm -f "$f"; fi
  done
  log "stopped ${stopped[*]:-nothing (not running)}"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: [SLURM_NODES=N] $0 start | $0 stop" >&2; exit 2 ;;
esac
