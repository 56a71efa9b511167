#!/usr/bin/env bash
# A Slurm cluster with job accounting and GPUs as GRES on this machine, for the Slurm tests and for trying
# `snakemake --profile profiles/slurm` by hand. `start` installs what is missing (slurm-wlm, munge,
# slurmdbd, mariadb-server), starts munged, MariaDB, slurmdbd, slurmctld and one slurmd per node with
# every config, database and state file under folders of its own, and waits until every node is idle and
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
# GPUs (a simulated GPU cluster, tests/test_gpu_cluster.py): every node has MLREPRO_SLURM_GPUS (default 4)
# GPUs as the GRES `gpu`, each a character device of its own (major 195, NVIDIA's, minor = its index) made
# with mknod in the cluster's state folder, not in /dev: no driver answers them, and nothing opens them.
# Slurm counts, allocates and accounts them (sacct's AllocTRES gres/gpu) and sets CUDA_VISIBLE_DEVICES,
# SLURM_JOB_GPUS and SLURM_STEP_GPUS in each job and step from what it allocated, as on a real cluster. A
# node has max(cores, GPUs) CPUs (SlurmdParameters=config_overrides where that is more than it has), so that
# `srun --ntasks-per-node=<GPUs>` of NVIDIA's run.sub fits a node. NVML is not simulated here: the run
# driver's replay backend reads a trace per host name (mlrepro/telemetry/replay.py). MLREPRO_SLURM_GPUS=0: no GRES.
#
# A shared machine (issue 36): nothing predictable in /tmp is trusted. The state folder is made by
# `mktemp -d` (mode 0700, root's) at each start and named in /run/mlrepro-slurm.state (/run: root's alone);
# every use checks it is a real folder, owned by root, mode 0700. MariaDB's data lives in a second
# `mktemp -d` folder, given to the mysql user. Before any kill, the pid's /proc/PID/exe must be the daemon
# the pid file claims; a pid that is another program is reported and left alone.
#
# Why accounting (../shared/reference/engines-on-ci.md): the executor plugin asks `sacct` for job
# states whenever `sacct` exists; without slurmdbd it answers "accounting storage is disabled" and
# the pipeline waits forever. The config goes where Slurm looks by default, /etc/slurm (the executor's
# job step drops every SLURM_* variable, SLURM_CONF too, before its inner srun), and `stop` removes it
# again: a slurm.conf naming a controller that is gone makes every Slurm client wait ~10 s for it.
# An /etc/slurm file that this script did not write is never overwritten.
set -euo pipefail

DB_PORT="${MLREPRO_SLURM_DB_PORT:-3307}"
NODES="${SLURM_NODES:-1}"
GPUS="${MLREPRO_SLURM_GPUS:-4}"
NET="${MLREPRO_SLURM_SUBNET:-10.251.77}"
BRIDGE=mlrepro-br0
ETC=/etc/slurm
# names the running cluster's state folder (tests/test_ci_slurm_sh.py points it elsewhere)
POINTER="${MLREPRO_SLURM_POINTER:-/run/mlrepro-slurm.state}"
MARK="# written by .ci/slurm.sh"
export SLURM_CONF="$ETC/slurm.conf"
D=""  # the state folder: made by start, found by stop through $POINTER

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

private_dir() {  # private_dir PATH OWNER: PATH is a folder (not a link) owned by OWNER, mode 0700
  [ -d "$1" ] && [ ! -L "$1" ] && [ "$(stat -c '%U %a' "$1")" = "$2 700" ]
}

# The state folder of the cluster that runs (or ran), from $POINTER; empty when there is none. A pointer
# or folder that is not root's and private is refused: someone else made it.
find_state() {
  [ -e "$POINTER" ] || return 0
  if [ -L "$POINTER" ] || [ "$(stat -c %U "$POINTER")" != root ]; then
    log "$POINTER is not a plain file of root's ($(stat -c '%U %F' "$POINTER")); not using it"; exit 1
  fi
  local dir
  dir="$(cat "$POINTER")"
  if ! private_dir "$dir" root; then
    log "state folder '$dir' (named in $POINTER) is not a folder of root's with mode 0700" \
        "($(stat -c '%U %a %F' "$dir" 2>/dev/null || echo missing)); not using it"
    exit 1
  fi
  D="$dir"
}

# The pid in FILE (one of the state folder's) if that process runs the program that the command NAME is
# (Debian's slurmd is a link to slurmd-wlm: compared once resolved); otherwise nothing, saying why when the
# pid is some other program's.
pid_of() {
  local file="$1" name="$2" pid path want
  [ -f "$file" ] && [ ! -L "$file" ] || return 0
  pid="$(cat "$file")"
  case "$pid" in ''|*[!0-9]*) log "$file holds no pid ('${pid:0:20}'); ignoring it"; return 0 ;; esac
  path="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 0   # not running
  path="${path% (deleted)}"
  want="$(readlink -f "$(command -v "$name")")"
  if [ "$path" != "$want" ]; then
    log "pid $pid of $file is $path, not $name ($want); not touching it"; return 0
  fi
  echo "$pid"
}

idle_nodes() { [ "$(sinfo -h -N -o %T | grep -cx idle)" -ge "$1" ]; }

node_names() {
  if [ "$NODES" -eq 1 ]; then hostname; else seq 1 "$NODES" | sed 's/^/mlnode/'; fi
}

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

# Each node's GPUs: character devices nvidia0..N-1 in $D/dev/<node>/, and gres.conf's line for them.
make_gpus() {
  local name i
  for name in $(node_names); do
    mkdir -p "$D/dev/$name"
    for i in $(seq 0 $((GPUS - 1))); do mknod -m 0600 "$D/dev/$name/nvidia$i" c 195 "$i"; done
    echo "NodeName=$name Name=gpu File=$D/dev/$name/nvidia[0-$((GPUS - 1))]"
  done
}

node_lines() {  # slurm.conf's NodeName lines
  local cpus="$1" mem="$2" gres="" i
  [ "$GPUS" -gt 0 ] && gres=" Gres=gpu:$GPUS"
  if [ "$NODES" -eq 1 ]; then
    echo "NodeName=$(hostname) CPUs=$cpus RealMemory=$mem$gres State=UNKNOWN"
  else
    for i in $(seq 1 "$NODES"); do
      echo "NodeName=mlnode$i NodeHostname=mlnode$i NodeAddr=$NET.$((10 + i)) CPUs=$cpus RealMemory=$mem$gres State=UNKNOWN"
    done
  fi
}

start_slurmds() {
  if [ "$NODES" -eq 1 ]; then slurmd >&2; return; fi
  local i
  { grep -v -w -e "mlnode[0-9]*" /etc/hosts; echo "$NET.1 $(hostname)"
    for i in $(seq 1 "$NODES"); do echo "$NET.$((10 + i)) mlnode$i"; done; } >"$D/hosts"
  chmod 644 "$D/hosts"
  for i in $(seq 1 "$NODES"); do
    # its own host name and /etc/hosts (a private mount namespace), in its network namespace; nsenter, not
    # `ip netns exec`, which mounts a /sys of its own without /sys/fs/cgroup, and slurmd needs that
    # and a folder of its own at $D/node-tmp, PMIx's client folders (mpi.conf): the nodes share /tmp
    mkdir -p "$D/node-tmp" "$D/node-tmp.mlnode$i"
    nsenter --net="/run/netns/mlrepro-node$i" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" "$4" && exec slurmd' \
      sh "mlnode$i" "$D/hosts" "$D/node-tmp.mlnode$i" "$D/node-tmp" >&2
  done
}

write_conf() {  # write_conf FILE: stdin into FILE, unless FILE exists and this script did not write it
  if [ -e "$1" ] && ! grep -qx "$MARK" "$1"; then
    log "$1 exists and was not written by this script; not touching it"; exit 1
  fi
  { echo "$MARK"; cat; } >"$1"
}

start() {
  # a step that fails ends the script (set -e): say where, and that `stop` removes what was started
  trap 'log "start failed at line $LINENO; logs in ${D:-?}; .ci/slurm.sh stop stops and removes what started"' ERR
  case "$NODES" in ''|*[!0-9]*|0) log "SLURM_NODES=$NODES: a number of nodes, 1 or more"; exit 2 ;; esac
  case "$GPUS" in ''|*[!0-9]*) log "MLREPRO_SLURM_GPUS=$GPUS: a number of GPUs per node, 0 or more"; exit 2 ;; esac
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  # srun --mpi=pmix: Slurm's PMIx plugin opens pmix2/lib/libpmix.so, which only the -dev package has
  [ -e /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so ] || [ "$(uname -m)" != x86_64 ] || missing+=(libpmix-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq "${missing[@]}" >&2
  fi
  find_state
  if [ -n "$D" ] && [ -n "$(pid_of "$D/slurmctld.pid" slurmctld)" ]; then
    local running
    running="$(sinfo -h -N -o %N | sort -u | wc -l)"
    if [ "$running" -ne "$NODES" ]; then
      log "already running with $running node(s), not $NODES; .ci/slurm.sh stop first"; exit 1
    fi
    log "already running (slurmctld pid $(cat "$D/slurmctld.pid"), $running node(s), state in $D)"
    echo "export SLURM_CONF=$SLURM_CONF"
    return 0
  fi
  if [ -n "$D" ]; then stop; D=""; fi  # what a failed start left
  local f
  for f in "$ETC/slurm.conf" "$ETC/slurmdbd.conf" "$ETC/gres.conf" "$ETC/mpi.conf"; do
    if [ -e "$f" ] && ! grep -qx "$MARK" "$f"; then log "$f exists and was not written by this script; not touching it"; exit 1; fi
  done
  mkdir -p "$ETC"
  D="$(mktemp -d "${TMPDIR:-/tmp}/mlrepro-slurm.XXXXXXXX")"
  private_dir "$D" root || { log "mktemp -d gave $D, not a private folder of root's"; exit 1; }
  echo "$D" >"$POINTER"
  mkdir "$D/state" "$D/spool"
  local host cpus mem controller name db
  host="$(hostname)"; cpus="$(nproc)"
  [ "$GPUS" -gt "$cpus" ] && cpus="$GPUS"
  # Four fifths of the host's memory, shared by the nodes, so that a job's --mem never asks for more than is there.
  mem="$(awk -v n="$NODES" '/MemTotal/ {print int($2 / 1024 * 0.8 / n)}' /proc/meminfo)"
  controller="$host"
  if [ "$NODES" -gt 1 ]; then
    make_network
    controller="$host($NET.1)"  # the nodes reach the controller on the bridge
  fi
  for name in $(node_names); do mkdir -p "$D/spool/$name"; done

  # munge: the key the Debian package made; one munged per host, so keep one that runs already. Its pid
  # file is in /run/munge (root's /run; the folder is the munge user's, as the package has it).
  # (Its socket is a file: the nodes' namespaces reach it too.)
  mkdir -p /run/munge && chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  if [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; then
    log "using the running munged"
  else
    su -s /bin/sh munge -c "munged --force --pid-file=/run/munge/munged.pid" >&2
    wait_for 10 munged munge -n
    pid_of /run/munge/munged.pid munged >"$D/munged.pid"
  fi

  # MariaDB with its own data folder (a second private folder, the mysql user's) and TCP port, so that it
  # touches no system database.
  db="$(mktemp -d "${TMPDIR:-/tmp}/mlrepro-slurm-db.XXXXXXXX")"
  echo "$db" >"$D/db.dir"
  chown mysql:mysql "$db"
  private_dir "$db" mysql || { log "MariaDB's folder $db is not a private folder of mysql's"; exit 1; }
  mariadb-install-db --user=mysql --datadir="$db/data" --auth-root-authentication-method=socket \
    --skip-test-db >"$D/mariadb-install.log" 2>&1
  mariadbd --no-defaults --user=mysql --datadir="$db/data" --socket="$db/mysqld.sock" \
    --pid-file="$db/mariadb.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --log-error="$db/mariadb.log" >/dev/null 2>&1 &
  echo $! >"$D/mariadb.pid"
  wait_for 30 MariaDB mariadb-admin --socket="$db/mysqld.sock" ping
  mariadb --socket="$db/mysqld.sock" -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmdbpass';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

  write_conf "$ETC/slurmdbd.conf" <<EOF
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
  local gres_lines=""
  if [ "$GPUS" -gt 0 ]; then
    gres_lines="GresTypes=gpu
AccountingStorageTRES=gres/gpu"
    make_gpus | write_conf "$ETC/gres.conf"
  fi
  # --mpi=pmix (NVIDIA's run.sub files ask for it): PMIx makes a folder per step in PMIxCliTmpDirBase, by
  # default /tmp, which the nodes of this machine share; each node has its own folder there instead.
  if [ "$NODES" -gt 1 ]; then
    echo "PMIxCliTmpDirBase=$D/node-tmp" | write_conf "$ETC/mpi.conf"
  fi
  local overrides=""
  [ "$cpus" -gt "$(nproc)" ] && overrides="SlurmdParameters=config_overrides"
  # KillWait/OverTimeLimit 0-5 s: a job past its walltime ends within a minute's check, not later.
  # %n: a pid file, spool folder and log per node (several slurmds on this machine).
  write_conf "$SLURM_CONF" <<EOF
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
$gres_lines
$overrides
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
      "($cpus CPUs, ${mem} MB, $GPUS GPUs each), partition debug, accounting on; state in $D"
  echo "export SLURM_CONF=$SLURM_CONF"
}

stop() {
  find_state
  local f pid exe stopped=()
  if [ -n "$D" ]; then
    for f in "$D"/slurmd-*.pid "$D/slurmctld.pid" "$D/slurmdbd.pid" "$D/mariadb.pid" "$D/munged.pid"; do
      case "$(basename "$f")" in slurmd-*) exe=slurmd ;; mariadb.pid) exe=mariadbd ;; *) exe="$(basename "$f" .pid)" ;; esac
      pid="$(pid_of "$f" "$exe")"
      [ -n "$pid" ] || continue
      kill "$pid"
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      stopped+=("$exe:$pid")
    done
    rm -f "$D"/*.pid
    remove_network
    # MariaDB's data (tens of MB) goes; the state folder stays, for its logs, until the machine's /tmp is cleared.
    if [ -f "$D/db.dir" ]; then
      local db
      db="$(cat "$D/db.dir")"
      if private_dir "$db" mysql; then rm -rf -- "$db"; else log "not removing '$db': not MariaDB's private folder"; fi
      rm -f "$D/db.dir"
    fi
    rm -rf -- "$D/state" "$D/spool" "$D/dev" "$D"/node-tmp*
    rm -f "$POINTER"
    # the config files of this cluster: written by this script, naming this state folder
    for f in "$ETC/slurm.conf" "$ETC/slurmdbd.conf" "$ETC/gres.conf" "$ETC/mpi.conf"; do
      if [ -f "$f" ] && grep -qx "$MARK" "$f" && grep -qF "$D/" "$f"; then rm -f "$f"; fi
    done
  fi
  log "stopped ${stopped[*]:-nothing (not running)}${D:+; logs in $D}"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: [SLURM_NODES=N] [MLREPRO_SLURM_GPUS=N] $0 start | $0 stop" >&2; exit 2 ;;
esac
