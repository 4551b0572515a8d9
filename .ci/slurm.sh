#!/usr/bin/env bash
# Start a private one-node SLURM cluster for tests/system/test_slurm.py.
#
#   .ci/slurm.sh            # install (Debian packages slurm-wlm, munge; needs root) if missing, start
#   .ci/slurm.sh stop       # stop what it started (its own pid files only)
#   .ci/slurm.sh status     # exit 0 if its controller and node daemon run (installs and starts nothing)
#
# Its own directory ($SYNTHLAB_SLURM_DIR, default /tmp/synthlab-slurm: slurm.conf, state, spool,
# logs, a munge key and socket) and ports ($SYNTHLAB_SLURM_PORT, default 16817, and the next one
# for slurmd): the machine's own SLURM or munge, if any, is never touched. slurmctld + slurmd +
# munged on this host, proctrack/linuxproc and task/none (no cgroups needed), select/cons_tres,
# one partition `debug` holding the node. No slurmdbd: `sacct` has no accounting database here,
# so jobs are seen in the controller's log ($SYNTHLAB_SLURM_LOG) and the job completion file
# (jobcomp/filetxt, $SYNTHLAB_SLURM_JOBCOMP). Idempotent. On success the last stdout lines are
# what a client needs:
#   export SLURM_CONF=/tmp/synthlab-slurm/slurm.conf
#   export SYNTHLAB_SLURM_LOG=/tmp/synthlab-slurm/slurmctld.log
#   export SYNTHLAB_SLURM_JOBCOMP=/tmp/synthlab-slurm/jobcomp.txt
# (`eval "$(bash .ci/slurm.sh)"`). Sourced (`source .ci/slurm.sh`), it exports them itself and
# returns 1 on failure without exiting the caller; a cluster it started is stopped when the
# calling shell exits (an EXIT trap; where the caller has one already, a background watcher of the
# caller's pid). The test reads $SLURM_CONF when
# set, otherwise runs this script itself; a pytest session stops a cluster it started
# (tests/conftest.py).

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # sourced (e.g. by scripts/test.sh): run as a child, export its lines, never exit the caller
    _synthlab_slurm_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
    _synthlab_slurm_was_running=0
    bash "$_synthlab_slurm_script" status && _synthlab_slurm_was_running=1
    if _synthlab_slurm_out="$(bash "$_synthlab_slurm_script" "$@")" \
            && _synthlab_slurm_conf="$(grep '^export SLURM_CONF=' <<<"$_synthlab_slurm_out")"; then
        while IFS= read -r _synthlab_slurm_line; do
            case "$_synthlab_slurm_line" in
                "export SLURM_CONF="*|"export SYNTHLAB_SLURM_"*) export "${_synthlab_slurm_line#export }" ;;
            esac
        done <<<"$_synthlab_slurm_out"
        if [[ "$_synthlab_slurm_was_running" == 0 ]]; then
            if [[ -z "$(trap -p EXIT)" ]]; then
                trap "bash '$_synthlab_slurm_script' stop" EXIT
            else  # the caller's trap is kept (e.g. postgres.sh's): a watcher stops the cluster after the shell
                ( _synthlab_slurm_parent=$$
                  while kill -0 "$_synthlab_slurm_parent" 2>/dev/null; do sleep 2; done
                  bash "$_synthlab_slurm_script" stop ) </dev/null >/dev/null 2>&1 &
                disown
            fi
        fi
        return 0
    fi
    return 1
fi

set -euo pipefail

DIR="${SYNTHLAB_SLURM_DIR:-/tmp/synthlab-slurm}"
PORT="${SYNTHLAB_SLURM_PORT:-16817}"
CONF="$DIR/slurm.conf"
NODE="$(hostname -s)"

running() {  # the daemon whose pid file is $1 runs
    local pid
    pid="$(cat "$1" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

stop_one() {  # stop the daemon of pid file $1 (TERM, then KILL after 10 s)
    local pid i
    pid="$(cat "$1" 2>/dev/null || true)"
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || { rm -f "$1"; return 0; }
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$1"
}

case "${1:-start}" in
    status)
        running "$DIR/slurmctld.pid" && running "$DIR/slurmd.pid" && exit 0
        exit 1 ;;
    stop)
        # only what this script started: the daemons named by its own pid files
        stop_one "$DIR/slurmd.pid"
        stop_one "$DIR/slurmctld.pid"
        stop_one "$DIR/munged.pid"
        exit 0 ;;
    start) ;;
    *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac

if ! command -v slurmctld >/dev/null 2>&1 && [ ! -x /usr/sbin/slurmctld ] \
        || ! command -v munged >/dev/null 2>&1 && [ ! -x /usr/sbin/munged ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "slurm.sh: SLURM is not installed and installing it needs root (apt-get install slurm-wlm munge)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }; } \
        || { echo "slurm.sh: apt-get install slurm-wlm munge failed" >&2; exit 1; }
fi
export PATH="$PATH:/usr/sbin:/sbin"
ME="$(id -un)"

mkdir -p "$DIR"/state "$DIR"/spool "$DIR"/tmp
chmod 700 "$DIR"

# munge: its own key, socket and pid file (the machine's munged, if one runs, is left alone)
if ! running "$DIR/munged.pid"; then
    if [ ! -s "$DIR/munge.key" ]; then
        (umask 077; head -c 1024 /dev/urandom >"$DIR/munge.key")
    fi
    rm -f "$DIR/munge.sock" "$DIR/munge.sock.lock"
    munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.sock" --pid-file="$DIR/munged.pid" \
        --log-file="$DIR/munged.log" --seed-file="$DIR/munged.seed" >/dev/null 2>&1 \
        || { echo "slurm.sh: munged did not start:" >&2; tail -5 "$DIR/munged.log" >&2 2>/dev/null; exit 1; }
fi

CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
cat >"$CONF.tmp" <<EOF
# written by .ci/slurm.sh: a private one-node cluster for synthlab's tests
ClusterName=synthlab
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=$ME
SlurmdUser=$ME
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$DIR/munge.sock,cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
TmpFS=$DIR/tmp
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
ReturnToService=2
KillWait=10
MinJobAge=600
SchedulerParameters=sched_interval=2
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
mv "$CONF.tmp" "$CONF"
export SLURM_CONF="$CONF"

if ! running "$DIR/slurmctld.pid"; then
    slurmctld -f "$CONF" -i >>"$DIR/slurmctld.out" 2>&1 \
        || { echo "slurm.sh: slurmctld did not start:" >&2; tail -5 "$DIR/slurmctld.log" "$DIR/slurmctld.out" >&2 2>/dev/null; exit 1; }
fi
if ! running "$DIR/slurmd.pid"; then
    slurmd -f "$CONF" -N "$NODE" >>"$DIR/slurmd.out" 2>&1 \
        || { echo "slurm.sh: slurmd did not start:" >&2; tail -5 "$DIR/slurmd.log" "$DIR/slurmd.out" >&2 2>/dev/null; exit 1; }
fi

# ready when the node is idle (or mixed/allocated: jobs of an earlier start still run)
for i in $(seq 60); do
    state="$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)"
    case "$state" in idle*|mix*|alloc*) break ;; esac
    if [ "$i" = 60 ]; then
        echo "slurm.sh: node $NODE not ready after 30 s (state: ${state:-none}):" >&2
        tail -5 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 2>/dev/null
        exit 1
    fi
    case "$state" in down*|drain*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;; esac
    sleep 0.5
done

echo "export SLURM_CONF=$CONF"
echo "export SYNTHLAB_SLURM_LOG=$DIR/slurmctld.log"
echo "export SYNTHLAB_SLURM_JOBCOMP=$DIR/jobcomp.txt"
