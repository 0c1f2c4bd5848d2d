#!/usr/bin/env bash
# A real, single-node Slurm cluster on loopback for tests/test_slurm.py: munged, MariaDB, slurmdbd (so that
# `sacct` answers), slurmctld and slurmd, all private to one folder (own munge socket, own ports, own state),
# so nothing touches /etc/slurm or a system munged.
#
#   setup-slurm.sh install   install what is missing (Debian packages) and start nothing; idempotent.
#   setup-slurm.sh [start]   install what is missing, start what is not running; idempotent.
#                            Prints SLURM_CONF=<path> last; export it to talk to this cluster.
#   setup-slurm.sh status    exit 0 when every daemon is up and the node takes jobs
#   setup-slurm.sh stop      stop the daemons this folder's pid files name (and nothing else)
#
# RGT_SLURM_DIR (default /tmp/rgt-slurm) holds config, keys, state, logs and pid files; keep it short
# (the munge and MariaDB unix sockets live in it). tests/test_slurm.py starts a private cluster per session
# with its own folder and ports, so CI only needs `install` (a started default cluster does no harm).
# RGT_SLURM_PORT (default 16817): slurmctld; +1 slurmd, +2 slurmdbd, +3 MariaDB.
#
# Cluster shape (and why): one node "localhost" declared with 8 CPUs and 4000 MB (config_overrides lets it
# exceed this machine, so tests can hold a CPU each at once); memory is a consumable resource with 64 MB per
# CPU by default and OverMemoryKill, so a job over its --mem is killed the way a cgroup-less cluster does it;
# two partitions, debug (default, PriorityTier 10) and scavenger (PriorityTier 1), with partition-priority
# preemption in CANCEL mode, so a real PREEMPTED can be produced; KillWait 2 s (SIGTERM, then SIGKILL).
set -euo pipefail

DIR=${RGT_SLURM_DIR:-/tmp/rgt-slurm}
PORT=${RGT_SLURM_PORT:-16817}
CTLD_PORT=$PORT
SLURMD_PORT=$((PORT + 1))
DBD_PORT=$((PORT + 2))
DB_PORT=$((PORT + 3))
CONF=$DIR/etc/slurm.conf
MUNGE_SOCKET=$DIR/munge/munge.socket
DB_SOCKET=$DIR/mariadb.sock
DB_PASS=rgt-loopback-only
export SLURM_CONF=$CONF

log() { echo "setup-slurm: $*" >&2; }

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v munged >/dev/null || missing+=(munge)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  command -v mariadb-admin >/dev/null || missing+=(mariadb-client)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# alive PIDFILE NAME: the pid file names a live process whose command is NAME (guards against pid reuse).
alive() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll every 0.1 s until COMMAND succeeds.
wait_for() {
  local limit=$1 what=$2 i
  shift 2
  for ((i = 0; i < limit * 10; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  log "$what did not come up within ${limit}s; logs in $DIR/log"
  tail -n 20 "$DIR"/log/*.log >&2 2>/dev/null || true
  return 1
}

write_config() {
  mkdir -p "$DIR"/{etc,munge,state,spool,log,run,mariadb}
  chmod 755 "$DIR" "$DIR/munge"
  if [ ! -s "$DIR/munge/munge.key" ]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
  fi
  cat >"$CONF.new" <<EOF
# Written by .ci/setup-slurm.sh: a loopback test cluster. Do not edit; rerun the script.
ClusterName=rgt
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=64
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
SchedulerType=sched/backfill
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
ReturnToService=2
KillWait=2
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP PriorityTier=10
PartitionName=scavenger Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=1
EOF
  if [ -f "$CONF" ] && ! cmp -s "$CONF.new" "$CONF"; then
    log "slurm.conf changed: restarting slurmctld and slurmd"
    stop_one "$DIR/run/slurmd.pid" slurmd
    stop_one "$DIR/run/slurmctld.pid" slurmctld
  fi
  mv "$CONF.new" "$CONF"
  cat >"$DIR/etc/slurmdbd.conf.new" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf.new"
  if [ -f "$DIR/etc/slurmdbd.conf" ] && ! cmp -s "$DIR/etc/slurmdbd.conf.new" "$DIR/etc/slurmdbd.conf"; then
    log "slurmdbd.conf changed: restarting slurmdbd"
    stop_one "$DIR/run/slurmdbd.pid" slurmdbd
  fi
  mv "$DIR/etc/slurmdbd.conf.new" "$DIR/etc/slurmdbd.conf"
}

munge_ok() { munge -S "$MUNGE_SOCKET" -n </dev/null | unmunge -S "$MUNGE_SOCKET"; }
db_ok() { mariadb-admin --no-defaults -S "$DB_SOCKET" -u root ping; }
dbd_ok() { sacctmgr -n -P list cluster; }
node_ok() { sinfo -h -N -o '%T' | grep -Eqx 'idle|mixed|allocated|completing'; }
cluster_registered() { sacctmgr -n -P list cluster format=Cluster,ControlPort | grep -qx "rgt|$CTLD_PORT"; }

start_munged() {
  alive "$DIR/run/munged.pid" munged && return 0
  setsid -f munged -F --force -S "$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/seed" --log-file="$DIR/log/munged.log" \
    </dev/null >>"$DIR/log/munged.out" 2>&1
  wait_for 10 munged munge_ok
}

start_mariadb() {
  if ! alive "$DIR/run/mariadb.pid" mariadbd; then
    if [ ! -d "$DIR/mariadb/mysql" ]; then
      mariadb-install-db --no-defaults --user=root --datadir="$DIR/mariadb" --skip-test-db \
        --auth-root-authentication-method=socket >"$DIR/log/mariadb-install.log" 2>&1
    fi
    setsid -f mariadbd --no-defaults --user=root --datadir="$DIR/mariadb" --socket="$DB_SOCKET" \
      --bind-address=127.0.0.1 --port="$DB_PORT" --pid-file="$DIR/run/mariadb.pid" \
      --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 \
      </dev/null >>"$DIR/log/mariadb.out" 2>&1
    wait_for 30 mariadb db_ok
  fi
  mariadb --no-defaults -S "$DB_SOCKET" -u root -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
  alive "$DIR/run/slurmdbd.pid" slurmdbd && return 0
  setsid -f slurmdbd -D </dev/null >>"$DIR/log/slurmdbd.out" 2>&1
  wait_for 60 slurmdbd dbd_ok
}

start_slurmctld() {
  alive "$DIR/run/slurmctld.pid" slurmctld && return 0
  setsid -f slurmctld -D -i </dev/null >>"$DIR/log/slurmctld.out" 2>&1
  wait_for 30 slurmctld scontrol ping
}

start_slurmd() {
  alive "$DIR/run/slurmd.pid" slurmd && return 0
  setsid -f slurmd -D -N localhost </dev/null >>"$DIR/log/slurmd.out" 2>&1
}

start() {
  install_packages
  write_config
  start_munged
  start_mariadb
  start_slurmdbd
  start_slurmctld
  start_slurmd
  wait_for 30 "the node" node_ok
  wait_for 30 "cluster registration with slurmdbd" cluster_registered
  echo "SLURM_CONF=$CONF"
}

status() {
  [ -s "$CONF" ] || return 1
  for daemon in munged mariadb slurmdbd slurmctld slurmd; do
    name=$daemon
    [ "$daemon" = mariadb ] && name=mariadbd
    alive "$DIR/run/$daemon.pid" "$name" || { log "$daemon is not running"; return 1; }
  done
  node_ok || { log "the node does not take jobs"; return 1; }
  echo "SLURM_CONF=$CONF"
}

# stop_one PIDFILE NAME: TERM the recorded process, wait for it, KILL after 10 s.
stop_one() {
  local pid i
  alive "$1" "$2" || return 0
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    [ -d "/proc/$pid" ] || return 0
    [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# drain_jobs: cancel every job of this cluster and give the steps a moment to end, so no slurmstepd is left
# waiting for a slurmd that is gone.
drain_jobs() {
  local ids i
  alive "$DIR/run/slurmctld.pid" slurmctld || return 0
  ids=$(squeue -h -o '%i' 2>/dev/null) || return 0
  [ -n "$ids" ] || return 0
  # shellcheck disable=SC2086
  scancel $ids 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    [ -z "$(squeue -h -t RUNNING,COMPLETING,SUSPENDED -o '%i' 2>/dev/null)" ] && return 0
    sleep 0.1
  done
}

# sweep_steps: SIGKILL what is left of this cluster's jobs: slurmstepd processes and job processes (both
# carry this cluster's SLURM_CONF in their environment; only job processes carry SLURM_JOB_ID).
sweep_steps() {
  local proc pid environ
  for proc in /proc/[0-9]*; do
    pid=${proc#/proc/}
    [ "$pid" = "$$" ] && continue
    environ=$(tr '\0' '\n' 2>/dev/null <"$proc/environ") || continue
    grep -qxF "SLURM_CONF=$CONF" <<<"$environ" || continue
    if [ "$(cat "$proc/comm" 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<<"$environ"; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

stop() {
  drain_jobs
  stop_one "$DIR/run/slurmd.pid" slurmd
  sweep_steps
  stop_one "$DIR/run/slurmctld.pid" slurmctld
  stop_one "$DIR/run/slurmdbd.pid" slurmdbd
  stop_one "$DIR/run/mariadb.pid" mariadbd
  stop_one "$DIR/run/munged.pid" munged
}

case "${1:-start}" in
  install) install_packages ;;
  start) start ;;
  status) status ;;
  stop) stop ;;
  *) echo "usage: $0 [install|start|status|stop]" >&2; exit 2 ;;
esac
