#!/usr/bin/env bash
# A Slurm cluster on the test hosts of test/multinode/hosts.sh.
#
#   slurm.sh up DIR
#       DIR is a hosts.sh DIR (its `hosts` file lists NAME ADDRESS PID, one
#       line per host). Writes DIR/slurm/slurm.conf (and the files it names),
#       starts one munged for all hosts (the hosts share the file system, so
#       one socket, DIR/slurm/munge/munge.socket, serves them all; own key,
#       generated here), slurmctld in the first host's namespaces and one
#       `slurmd -N NAME` per host in that host's namespaces, all as root.
#       Every host is a node (NodeAddr its address, CPUs=8 whatever the
#       machine has) of the default partition `test`; MpiDefault is pmix
#       (Slurm's PMIx v4 plugin, which Open MPI's ext3x component accepts),
#       so `srun -N 2 --ntasks-per-node 2 PROGRAM` starts one MPI job.
#       No cgroups: proctrack/linuxproc, task/none. Waits (at most 60 s)
#       until `sinfo` shows every node idle; exit 1 with the daemons' log
#       tails otherwise.
#   slurm.sh down DIR
#       Stops every daemon `up` started (SIGTERM, then SIGKILL after 5 s)
#       and deletes DIR/slurm. Idempotent. (hosts.sh down kills anything
#       left in the hosts' namespaces anyway.)
#
# Slurm's commands find this cluster through SLURM_CONF, and must run in a
# host's namespaces (the controller's address is only reachable there):
#   hosts.sh exec DIR HOST env SLURM_CONF=DIR/slurm/slurm.conf srun ...
# Faults: KillOnBadExit is Slurm's default (0), so a task that dies leaves
# the others to the program's own watchdog (`srun --kill-on-bad-exit=1`
# kills them at once instead). A host cut off (hosts.sh link HOST down)
# ends srun only when slurmctld declares the node failed, about 18 s with
# these timeouts; the node is DOWN until the link is up again, and then
# idle within seconds (ReturnToService=2).
# Files under DIR/slurm: slurm.conf, plugstack.conf (empty: no system SPANK
# plugins), munge/ (key, socket, log, pid), ctld/ (state, log, pid) and
# NAME/ per node (spool, tmp, slurmd.log, slurmd.pid).
#
# Exit 77 (ctest's skip code), printing "SKIPPED: <reason>", when not root
# or when munged, slurmctld, slurmd or the client commands are missing
# (Debian: munge, slurmctld, slurmd, slurm-client; scripts/install-deps.sh).
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || {
  sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d' >&2
  exit 2
}
DIR=$(realpath -m "$DIR")
S=$DIR/slurm
HOSTS_SH=$(dirname "$(realpath "$0")")/hosts.sh

skip() { echo "SKIPPED: $*"; exit 77; }
die() { echo "slurm.sh: error: $*" >&2; exit 1; }

# Every daemon's pid file, munged last (the others authenticate through it).
pidfiles() {
  [ -d "$S" ] || return 0
  ls "$S"/*/slurmd.pid "$S"/ctld/slurmctld.pid "$S"/munge/munged.pid 2>/dev/null || true
}

logtails() {
  for f in "$S"/munge/munged.log "$S"/ctld/slurmctld.log "$S"/*/slurmd.log; do
    [ -f "$f" ] || continue
    echo "--- $f (last 15 lines)" >&2
    tail -15 "$f" >&2
  done
}

case $cmd in
up)
  [ "$(id -u)" = 0 ] || skip "needs root (hosts.sh's namespaces, daemons as root)"
  for t in munged munge slurmctld slurmd sinfo srun; do
    command -v "$t" >/dev/null ||
      skip "$t not installed (Debian: munge slurmctld slurmd slurm-client)"
  done
  [ -s "$DIR/hosts" ] || die "no hosts in $DIR/hosts (run hosts.sh up $DIR N first)"
  [ ! -e "$S" ] || die "$S exists (a cluster not taken down? slurm.sh down $DIR)"
  mkdir -p "$S/munge" "$S/ctld"
  # munged insists on a socket directory that everyone may enter and no one
  # but its owner may write, and on a key only its owner can read.
  chmod 755 "$S" "$S/munge"
  dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$S/munge/munge.key"
  sock=$S/munge/munge.socket
  # --force: run even when a directory above DIR is group-writable.
  munged --force --socket="$sock" --key-file="$S/munge/munge.key" \
    --log-file="$S/munge/munged.log" --pid-file="$S/munge/munged.pid" \
    --seed-file="$S/munge/munged.seed" </dev/null >/dev/null 2>&1 ||
    { logtails; "$0" down "$DIR"; die "munged did not start"; }
  munge --socket="$sock" -n </dev/null | unmunge --socket="$sock" >/dev/null ||
    { logtails; "$0" down "$DIR"; die "munged does not answer on $sock"; }

  first=$(awk 'NR == 1 {print $1 "(" $2 ")"}' "$DIR/hosts")
  nodes=$(awk '{printf "%s%s", (NR > 1 ? "," : ""), $1}' "$DIR/hosts")
  : >"$S/plugstack.conf"
  {
    cat <<EOF
# Written by test/multinode/slurm.sh for the test hosts of $DIR/hosts.
ClusterName=tessera-test
SlurmctldHost=$first
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$S/ctld/state
SlurmctldPidFile=$S/ctld/slurmctld.pid
SlurmctldLogFile=$S/ctld/slurmctld.log
SlurmdSpoolDir=$S/%n/spool
SlurmdPidFile=$S/%n/slurmd.pid
SlurmdLogFile=$S/%n/slurmd.log
# Node-local scratch: the PMIx plugin makes its client directories under
# TmpFS, and /tmp is shared by all hosts (two nodes would collide).
TmpFS=$S/%n/tmp
SlurmdParameters=config_overrides
PlugStackConfig=$S/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
# Short timeouts: a test cluster, one machine.
SlurmctldTimeout=10
SlurmdTimeout=10
MessageTimeout=5
TCPTimeout=2
KillWait=2
InactiveLimit=0
MinJobAge=10
SlurmctldDebug=info
SlurmdDebug=info
EOF
    while read -r name addr _; do
      echo "NodeName=$name NodeAddr=$addr CPUs=8 RealMemory=1000 State=UNKNOWN"
    done <"$DIR/hosts"
    echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE State=UP"
  } >"$S/slurm.conf"
  export SLURM_CONF=$S/slurm.conf

  h1=$(awk 'NR == 1 {print $1}' "$DIR/hosts")
  "$HOSTS_SH" exec "$DIR" "$h1" slurmctld -i -f "$SLURM_CONF" \
    </dev/null >"$S/ctld/slurmctld.out" 2>&1 ||
    { cat "$S/ctld/slurmctld.out" >&2; logtails; "$0" down "$DIR"; die "slurmctld did not start"; }
  while read -r name _; do
    mkdir -p "$S/$name/spool" "$S/$name/tmp"
    "$HOSTS_SH" exec "$DIR" "$name" slurmd -N "$name" -f "$SLURM_CONF" \
      </dev/null >"$S/$name/slurmd.out" 2>&1 ||
      { cat "$S/$name/slurmd.out" >&2; logtails; "$0" down "$DIR"; die "slurmd on $name did not start"; }
  done <"$DIR/hosts"

  n=$(wc -l <"$DIR/hosts")
  for _ in $(seq 600); do
    idle=$("$HOSTS_SH" exec "$DIR" "$h1" sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" = "$n" ] && break
    sleep 0.1
  done
  if [ "$idle" != "$n" ]; then
    "$HOSTS_SH" exec "$DIR" "$h1" sinfo -N >&2 || true
    logtails
    "$0" down "$DIR"
    die "$idle of $n nodes idle after 60 s"
  fi
  "$HOSTS_SH" exec "$DIR" "$h1" sinfo -N
  ;;
down)
  pids=""
  for f in $(pidfiles); do
    p=$(cat "$f" 2>/dev/null || true)
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null && pids+=" $p"
  done
  if [ -n "$pids" ]; then
    # Slurm's daemons first, munged last.
    for f in $(pidfiles); do
      p=$(cat "$f" 2>/dev/null || true)
      [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true
    done
    for _ in $(seq 50); do
      left=""
      for p in $pids; do kill -0 "$p" 2>/dev/null && left+=" $p"; done
      [ -z "$left" ] && break
      sleep 0.1
    done
    [ -z "$left" ] || kill -KILL $left 2>/dev/null || true
  fi
  # A job step outlives slurmd: its slurmstepd (and the tasks under it)
  # belong to the step, not to the daemon. Kill the ones in the hosts.
  if [ -f "$DIR/hosts" ]; then
    for ns in $(awk '{print $1}' "$DIR/hosts"); do
      for p in $(ip netns pids "$ns" 2>/dev/null || true); do
        case $(cat "/proc/$p/comm" 2>/dev/null) in
        slurmstepd) kill -KILL "$p" 2>/dev/null || true ;;
        esac
      done
    done
  fi
  rm -rf "$S"
  ;;
*)
  die "unknown command '$cmd' (up, down)"
  ;;
esac
