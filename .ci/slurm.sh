#!/usr/bin/env bash
# A one-node Slurm cluster on localhost with job accounting, for the Slurm tests and for trying
# `snakemake --profile profiles/slurm` by hand. `start` installs what is missing (slurm-wlm, munge,
# slurmdbd, mariadb-server), starts munged, MariaDB, slurmdbd, slurmctld and slurmd with every
# config, database and state file under one folder, and waits until the node is idle and `sacct`
# answers; `stop` stops the daemons it started, by the pids they recorded, in reverse order.
#
#   eval "$(.ci/slurm.sh start)"     # prints: export SLURM_CONF=/etc/slurm/slurm.conf
#   .ci/slurm.sh stop
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

start() {
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
    log "already running (slurmctld pid $(cat "$D/slurmctld.pid"))"
    echo "export SLURM_CONF=$SLURM_CONF"
    return 0
  fi
  if [ -f "$SLURM_CONF" ] && ! grep -qx "$MARK" "$SLURM_CONF"; then
    log "$SLURM_CONF exists and was not written by this script; not touching it"; exit 1
  fi
  rm -rf "$D"
  mkdir -p "$ETC" "$D/state" "$D/spool" "$D/db" "$D/run"
  local host cpus mem
  host="$(hostname)"; cpus="$(nproc)"
  # Four fifths of the host's memory, so that a job's --mem never asks for more than is there.
  mem="$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)"

  # munge: the key the Debian package made; one munged per host, so keep one that runs already.
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
  cat >"$SLURM_CONF" <<EOF
$MARK
ClusterName=local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
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
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  slurmdbd >&2
  wait_for 30 slurmdbd sacctmgr -n show cluster
  sacctmgr -i add cluster local >/dev/null 2>&1 || true   # adds account and user root too
  slurmctld >&2
  slurmd >&2
  wait_for 60 "an idle node" sh -c 'sinfo -h -o %T | grep -qx idle'
  # sacct answers only once the controller has registered with slurmdbd.
  wait_for 60 "sacct" sh -c 'sacct -n -X -S now-1minutes >/dev/null'
  log "Slurm $(sinfo -V | awk '{print $2}') up: node $host ($cpus CPUs, ${mem} MB), partition debug, accounting on; state in $D"
  echo "export SLURM_CONF=$SLURM_CONF"
}

stop() {
  local f pid stopped=()
  for f in slurmd slurmctld slurmdbd mariadb munged; do
    alive "$D/$f.pid" || continue
    pid="$(cat "$D/$f.pid")"
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    stopped+=("$f:$pid")
  done
  rm -f "$D"/*.pid
  for f in "$ETC/slurm.conf" "$ETC/slurmdbd.conf"; do
    if [ -f "$f" ] && grep -qx "$MARK" "$f"; then rm -f "$f"; fi
  done
  log "stopped ${stopped[*]:-nothing (not running)}"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
