#!/usr/bin/env bash
# Test hosts on this machine: Linux network namespaces joined by a bridge.
#
#   hosts.sh up DIR N [PREFIX [SUBNET]]
#       Makes N hosts PREFIX-h1 .. PREFIX-hN (PREFIX default tmn, SUBNET
#       default 10.213.0, a /24). Each host is a network namespace of that
#       name (`ip netns add`) with a veth `eth0` at SUBNET.i/24 and its own
#       UTS namespace (its host name is its namespace's name), held by one
#       `sleep` process. The other ends of the veths sit on a bridge `br0`
#       in a namespace PREFIX-sw of their own (the switch); nothing is
#       created or addressed in the namespace the script runs in. DIR gets
#         hosts   one line per host: NAME ADDRESS HOLDER-PID
#         rsh     a remote-shell agent for Open MPI (`--mca plm_rsh_agent
#                 DIR/rsh`) and anything else that runs `rsh HOST COMMAND`:
#                 it runs COMMAND (a shell command line, as ssh would) in
#                 HOST's namespaces (HOST a name or address of DIR/hosts)
#       Exit 77 (ctest's skip code), printing "SKIPPED: <reason>", when not
#       root, when ip, nsenter or unshare is missing, or when the kernel
#       refuses network namespaces, veths or bridges; exit 1 when a host of
#       that name exists already (a previous run not taken down).
#   hosts.sh exec DIR HOST COMMAND [ARG...]
#       Runs COMMAND in HOST's network and UTS namespaces (nsenter).
#   hosts.sh link DIR HOST down|up
#       Sets HOST's port on the switch down (cuts it off the network, as
#       `ip link set down` on a cable's switch port) or up again.
#   hosts.sh down DIR
#       Kills every process in the hosts' and the switch's namespaces
#       (SIGTERM, then SIGKILL after 2 s), deletes the namespaces and DIR's
#       files. Idempotent: safe after a failed `up` or a second `down`.
#
# Requires root and Debian's iproute2 and util-linux. Files of DIR only; no
# address, route or link outside the namespaces it made.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || {
  sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//; $d' >&2
  exit 2
}

skip() { echo "SKIPPED: $*"; exit 77; }
die() { echo "hosts.sh: error: $*" >&2; exit 1; }

host_field() { # NAME-or-ADDRESS FIELD(2: address, 3: pid)
  awk -v h="$1" -v f="$2" '$1 == h || $2 == h {print $f; found=1}
    END {exit !found}' "$DIR/hosts" 2>/dev/null ||
    die "no host '$1' in $DIR/hosts"
}

namespaces() { # every namespace this DIR made, the switch last
  [ -f "$DIR/namespaces" ] && tac "$DIR/namespaces" || true
}

case $cmd in
up)
  N=${3:?hosts.sh up DIR N}
  P=${4:-tmn}
  NET=${5:-10.213.0}
  [ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
  for t in ip nsenter unshare; do
    command -v "$t" >/dev/null || skip "$t not installed (iproute2, util-linux)"
  done
  for ns in "$P-sw" $(seq -f "$P-h%g" 1 "$N"); do
    ! ip netns list | grep -qw "^$ns" ||
      die "namespace $ns exists (a run not taken down? hosts.sh down DIR, or ip netns del $ns)"
  done
  mkdir -p "$DIR"
  : >"$DIR/namespaces"
  : >"$DIR/hosts"
  ip netns add "$P-sw" 2>"$DIR/up.err" ||
    skip "the kernel refuses network namespaces: $(head -1 "$DIR/up.err")"
  echo "$P-sw" >>"$DIR/namespaces"
  ip -n "$P-sw" link add br0 type bridge 2>"$DIR/up.err" ||
    { "$0" down "$DIR" >/dev/null; skip "no bridges: $(head -1 "$DIR/up.err")"; }
  ip -n "$P-sw" link set br0 up
  for i in $(seq 1 "$N"); do
    h=$P-h$i
    ip netns add "$h"
    echo "$h" >>"$DIR/namespaces"
    # Both ends are made inside the namespaces: the host's eth0 and its
    # port on the switch, named after the host.
    ip -n "$h" link add eth0 type veth peer name "$h" netns "$P-sw" \
      2>"$DIR/up.err" ||
      { "$0" down "$DIR" >/dev/null; skip "no veths: $(head -1 "$DIR/up.err")"; }
    ip -n "$P-sw" link set "$h" master br0 up
    ip -n "$h" addr add "$NET.$i/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
    # The holder: a process in the host's network namespace and a UTS
    # namespace of its own, named after the host; `exec` enters both.
    ip netns exec "$h" unshare --uts --fork \
      sh -c "hostname '$h' && exec sleep infinity" </dev/null >/dev/null 2>&1 &
    holder=
    for _ in $(seq 50); do
      holder=$(pgrep -P $! -x sleep || true)
      [ -n "$holder" ] && break
      sleep 0.1
    done
    [ -n "$holder" ] || { "$0" down "$DIR" >/dev/null; die "the holder of $h did not start"; }
    echo "$h $NET.$i $holder" >>"$DIR/hosts"
  done
  cat >"$DIR/rsh" <<EOF
#!/bin/sh
# rsh HOST COMMAND...: runs COMMAND (one shell command line, as ssh does) on
# a test host of $DIR/hosts (test/multinode/hosts.sh).
host=\$1; shift
pid=\$(awk -v h="\$host" '\$1 == h || \$2 == h {print \$3}' "$DIR/hosts")
[ -n "\$pid" ] || { echo "rsh: no test host '\$host' in $DIR/hosts" >&2; exit 255; }
exec nsenter -t "\$pid" --net --uts -- /bin/sh -c "\$*"
EOF
  chmod +x "$DIR/rsh"
  rm -f "$DIR/up.err"
  # Every host reaches every other one: a TCP connect to port 9 (discard)
  # is refused at once when the address answers, and times out when not.
  for h in $(awk '{print $1}' "$DIR/hosts"); do
    for a in $(awk '{print $2}' "$DIR/hosts"); do
      out=$(nsenter -t "$(host_field "$h" 3)" --net -- timeout 2 \
        bash -c "exec 3<>/dev/tcp/$a/9" 2>&1 || true)
      case $out in
      "" | *refused*) ;;
      *) "$0" down "$DIR" >/dev/null; die "$h cannot reach $a: $out" ;;
      esac
    done
  done
  cat "$DIR/hosts"
  ;;
exec)
  h=${3:?hosts.sh exec DIR HOST COMMAND...}
  shift 3
  pid=$(host_field "$h" 3)
  exec nsenter -t "$pid" --net --uts -- "$@"
  ;;
link)
  h=${3:?hosts.sh link DIR HOST down|up}
  state=${4:?hosts.sh link DIR HOST down|up}
  name=$(host_field "$h" 1)
  sw=$(namespaces | tail -1)
  ip -n "$sw" link set "$name" "$state"
  ;;
down)
  for ns in $(namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -TERM $pids 2>/dev/null || true
  done
  for _ in $(seq 20); do
    left=""
    for ns in $(namespaces); do left+=$(ip netns pids "$ns" 2>/dev/null || true); done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for ns in $(namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -f "$DIR/hosts" "$DIR/rsh" "$DIR/namespaces" "$DIR/up.err"
  ;;
*)
  die "unknown command '$cmd' (up, exec, link, down)"
  ;;
esac
