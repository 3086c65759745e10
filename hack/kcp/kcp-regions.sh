#!/usr/bin/env bash
# kcp-regions.sh turns kcp's sharded test environment (cmd/sharded-test-server, one cache for
# every shard) into two regions: the root shard pushes to cache "east", shard-1 to cache "west",
# and the two caches mirror each other. sharded-test-server resolves its binaries through
# KCP_ASSET_<NAME> when NO_GORUN=1; hack/kcp/kcp-e2e.sh (REGIONS mode) points three of them at
# shims that call this script:
#
#   kcp-regions.sh cache ARGS...  KCP_ASSET_CACHE_SERVER: starts west beside the cache
#                                 sharded-test-server asked for (east, on its port 8012), both
#                                 peering; west listens on 8022 (etcd 8020, 8021).
#   kcp-regions.sh kcp ARGS...    KCP_ASSET_KCP: shard-1's --cache-kubeconfig points at west.
#   kcp-regions.sh vw ARGS...     KCP_ASSET_VIRTUAL_WORKSPACES: shard-1's virtual workspaces
#                                 read west as well.
#
# The real binaries come from KCP_REGIONS_CACHE_BIN (ours), KCP_REGIONS_KCP_BIN and
# KCP_REGIONS_VW_BIN; KCP_REGIONS_CACHE_ARGS adds arguments to every cache (e.g. -v=4).
#
# KCP_REGIONS_RELAY=1 puts a third cache, "middle" (port 8032, etcd 8030, 8031), between the
# two: east and west peer only with middle, which relays each one's partitions to the other (a
# chain east - middle - west), so shard-1 reads the root shard's APIExports through two hops.
#
# Every process runs under a supervisor that stays alive while its process is stopped on
# purpose, so sharded-test-server (which ends the whole environment when one of its children
# exits) does not notice a region going away:
#
#   kcp-regions.sh stop WORKDIR NAME   stop NAME (east, west, middle, kcp-root, kcp-shard-1, vw-0,
#                                      vw-1)
#                                      and keep it stopped
#   kcp-regions.sh start WORKDIR NAME  start it again with the same arguments
#   kcp-regions.sh pids WORKDIR        the supervisors' and their processes' ids, to end them
#
# sharded-test-server ends its children with SIGKILL, which a supervisor cannot catch: a
# watchdog beside each supervisor stops the process once the supervisor is gone.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)

# arg NAME ARGS...: the value of --NAME=VALUE in ARGS.
arg() {
	local name=$1 a
	shift
	for a in "$@"; do
		case $a in --"$name"=*) echo "${a#--"$name"=}"; return 0 ;; esac
	done
	return 1
}

# supervise STATE NAME CMD...: run CMD, again after `start` when `stop` ended it, and exit with
# its status when it ends otherwise.
supervise() {
	local state=$1 name=$2
	shift 2
	mkdir -p "$state"
	printf '%q ' "$@" >"$state/$name.cmd"
	echo $$ >"$state/$name.supervisor"
	local child=""
	trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 143' TERM INT
	# The watchdog: when the supervisor is killed (SIGKILL), stop its process.
	(
		sup=$$
		while kill -0 "$sup" 2>/dev/null; do sleep 1; done
		p=$(cat "$state/$name.pid" 2>/dev/null || true)
		[ -n "$p" ] && kill -TERM "$p" 2>/dev/null
		sleep 10
		[ -n "$p" ] && kill -KILL "$p" 2>/dev/null
	) </dev/null >/dev/null 2>&1 &
	echo $! >"$state/$name.watchdog"
	while true; do
		"$@" &
		child=$!
		echo "$child" >"$state/$name.pid"
		local rc=0
		wait "$child" || rc=$?
		if [ -e "$state/$name.stopped" ]; then
			echo "kcp-regions: $name stopped on purpose (exit $rc); waiting to be started again" >&2
			while [ -e "$state/$name.stopped" ]; do sleep 1; done
			echo "kcp-regions: starting $name again" >&2
			continue
		fi
		exit "$rc"
	done
}

# write_kubeconfig FILE SERVER CA CERT KEY: a kubeconfig whose current context is "cache", as
# kcp's own cache.kubeconfig is.
write_kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cache
  cluster:
    server: $2
    certificate-authority: $3
users:
- name: cache
  user:
    client-certificate: $4
    client-key: $5
contexts:
- name: cache
  context:
    cluster: cache
    user: cache
current-context: cache
EOF
}

# serving_cert DIR: a self-signed serving certificate for localhost, written where the cache
# server would write its own (DIR/apiserver.crt): it reuses it, and it must exist before either
# cache starts because each names the other's as the CA of its peer.
serving_cert() {
	[ -f "$1/apiserver.crt" ] && return 0
	openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=localhost" \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -addext "basicConstraints=critical,CA:TRUE" \
		-keyout "$1/apiserver.key" -out "$1/apiserver.crt" 2>/dev/null
}

# peer_cert CA_DIR OUT NAME: a client certificate of kcp's client CA for system:kcp:cache:NAME,
# the identity a cache presents to its peers.
peer_cert() {
	[ -f "$2.crt" ] && return 0
	openssl req -newkey rsa:2048 -nodes -subj "/CN=system:kcp:cache:$3" -keyout "$2.key" -out "$2.csr" 2>/dev/null
	openssl x509 -req -in "$2.csr" -CA "$1/client-ca.crt" -CAkey "$1/client-ca.key" -CAcreateserial \
		-out "$2.crt" -days 365 2>/dev/null
	rm -f "$2.csr"
}

cmd_cache() {
	local east_root ca work west_root delay state
	east_root=$(arg root-directory "$@")
	ca=$(arg client-ca-file "$@")
	delay=$(arg synthetic-delay "$@" || echo 0s)
	work=$(cd "$(dirname "$east_root")" && pwd)
	east_root="$work/$(basename "$east_root")"
	west_root="$work/.kcp-cache-west"
	state="$work/.kcp-regions"
	mkdir -p "$east_root" "$west_root" "$state"

	serving_cert "$east_root"
	serving_cert "$west_root"
	peer_cert "$(dirname "$ca")" "$east_root/peer-east" east
	peer_cert "$(dirname "$ca")" "$west_root/peer-west" west
	write_kubeconfig "$east_root/peer-west.kubeconfig" https://localhost:8022 "$west_root/apiserver.crt" \
		"$east_root/peer-east.crt" "$east_root/peer-east.key"
	write_kubeconfig "$west_root/peer-east.kubeconfig" https://localhost:8012 "$east_root/apiserver.crt" \
		"$west_root/peer-west.crt" "$west_root/peer-west.key"
	local east_peers=(--peer=west="$east_root/peer-west.kubeconfig")
	local west_peers=(--peer=east="$west_root/peer-east.kubeconfig")
	if [ "${KCP_REGIONS_RELAY:-}" = 1 ]; then
		local middle_root="$work/.kcp-cache-middle"
		mkdir -p "$middle_root"
		serving_cert "$middle_root"
		peer_cert "$(dirname "$ca")" "$middle_root/peer-middle" middle
		write_kubeconfig "$east_root/peer-middle.kubeconfig" https://localhost:8032 "$middle_root/apiserver.crt" \
			"$east_root/peer-east.crt" "$east_root/peer-east.key"
		write_kubeconfig "$west_root/peer-middle.kubeconfig" https://localhost:8032 "$middle_root/apiserver.crt" \
			"$west_root/peer-west.crt" "$west_root/peer-west.key"
		write_kubeconfig "$middle_root/peer-east.kubeconfig" https://localhost:8012 "$east_root/apiserver.crt" \
			"$middle_root/peer-middle.crt" "$middle_root/peer-middle.key"
		write_kubeconfig "$middle_root/peer-west.kubeconfig" https://localhost:8022 "$west_root/apiserver.crt" \
			"$middle_root/peer-middle.crt" "$middle_root/peer-middle.key"
		east_peers=(--peer=middle="$east_root/peer-middle.kubeconfig")
		west_peers=(--peer=middle="$west_root/peer-middle.kubeconfig")
	fi
	# shard-1's and its virtual workspaces' kubeconfig: west, with the cache-client certificate
	# sharded-test-server made for every shard.
	write_kubeconfig "$west_root/cache.kubeconfig" https://localhost:8022 "$west_root/apiserver.crt" \
		"$east_root/cache-client.crt" "$east_root/cache-client.key"

	local extra=()
	# shellcheck disable=SC2206 # KCP_REGIONS_CACHE_ARGS is a list of words
	[ -n "${KCP_REGIONS_CACHE_ARGS:-}" ] && extra=(${KCP_REGIONS_CACHE_ARGS})
	local bin=${KCP_REGIONS_CACHE_BIN:?KCP_REGIONS_CACHE_BIN: the cache server to run}

	# west: the same flags as east, on its own ports and directory; its log beside its data.
	("$0" supervise-bg "$state" west "$bin" --root-directory="$west_root" --bind-address=127.0.0.1 \
		--secure-port=8022 --synthetic-delay="$delay" --client-ca-file="$ca" \
		--embedded-etcd-client-port=8020 --embedded-etcd-peer-port=8021 \
		--cache-name=west "${west_peers[@]}" "${extra[@]}" \
		>>"$west_root/cache.log" 2>&1) &
	if [ "${KCP_REGIONS_RELAY:-}" = 1 ]; then
		# middle: the relay, peering with both.
		("$0" supervise-bg "$state" middle "$bin" --root-directory="$middle_root" --bind-address=127.0.0.1 \
			--secure-port=8032 --synthetic-delay="$delay" --client-ca-file="$ca" \
			--embedded-etcd-client-port=8030 --embedded-etcd-peer-port=8031 \
			--cache-name=middle --peer=east="$middle_root/peer-east.kubeconfig" \
			--peer=west="$middle_root/peer-west.kubeconfig" "${extra[@]}" \
			>>"$middle_root/cache.log" 2>&1) &
	fi
	# east: the cache sharded-test-server started, with its log where it reads it.
	supervise "$state" east "$bin" "$@" --cache-name=east "${east_peers[@]}" "${extra[@]}"
}

cmd_kcp() {
	local work shard state args=()
	shard=$(arg shard-name "$@" || echo root)
	work=$(dirname "$(dirname "$(arg cache-kubeconfig "$@")")")
	state="$work/.kcp-regions"
	for a in "$@"; do
		if [ "$shard" = shard-1 ] && [[ $a == --cache-kubeconfig=* ]]; then
			a="--cache-kubeconfig=$work/.kcp-cache-west/cache.kubeconfig"
		fi
		args+=("$a")
	done
	supervise "$state" "kcp-$shard" "${KCP_REGIONS_KCP_BIN:?}" "${args[@]}"
}

cmd_vw() {
	local work index state args=()
	work=$(dirname "$(dirname "$(arg cache-kubeconfig "$@")")")
	index=$(($(arg secure-port "$@") - 7444))
	state="$work/.kcp-regions"
	for a in "$@"; do
		if [ "$index" = 1 ] && [[ $a == --cache-kubeconfig=* ]]; then
			a="--cache-kubeconfig=$work/.kcp-cache-west/cache.kubeconfig"
		fi
		args+=("$a")
	done
	supervise "$state" "vw-$index" "${KCP_REGIONS_VW_BIN:?}" "${args[@]}"
}

case ${1:-} in
cache) shift; cmd_cache "$@" ;;
kcp) shift; cmd_kcp "$@" ;;
vw) shift; cmd_vw "$@" ;;
supervise-bg) shift; supervise "$@" ;;
stop)
	state="$2/.kcp-regions"
	touch "$state/$3.stopped"
	pid=$(cat "$state/$3.pid")
	kill -TERM "$pid"
	for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 1; done
	kill -KILL "$pid" 2>/dev/null || true
	;;
start)
	rm -f "$2/.kcp-regions/$3.stopped"
	;;
pids)
	for f in "$2"/.kcp-regions/*.supervisor "$2"/.kcp-regions/*.watchdog "$2"/.kcp-regions/*.pid; do
		[ -f "$f" ] && cat "$f"
	done
	;;
*)
	echo "usage: $0 cache|kcp|vw ARGS... | stop|start WORKDIR NAME | pids WORKDIR" >&2
	exit 2
	;;
esac
