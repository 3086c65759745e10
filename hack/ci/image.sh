#!/usr/bin/env bash
# Builds the cache server's image with podman, without any registry, and
# starts it as kcp-operator starts kcp's cache-server: command /cache-server
# with the operator's arguments, uid 65532, a read-only root file system, the
# etcd directory an emptyDir (here a tmpfs), TLS files mounted where the
# operator mounts its secrets. It waits for /readyz and /livez to answer 200
# over HTTPS, lists through the operator's shared client certificate, stops
# the container and checks that it exited 0. It prints the image's size and
# the /readyz answer. Then it starts it again under a memory limit
# (MEMORY_LIMIT_MIB, default 256) and loads objects until the server refuses
# them (507), checking that it is never OOM-killed.
#
#   hack/ci/image.sh          # build, start, probe, stop (.ci/run runs this)
#   hack/ci/image.sh build    # build only
#
# Needs podman and runc (Debian: apt-get install podman runc), openssl, curl.
# IMAGE (default localhost/kcp-cache:dev) names the image; BASE a base image
# instead of the empty one (see Dockerfile); KEEP=1 keeps the work directory.
#
# Two settings these machines need, given in a containers.conf of our own
# (CONTAINERS_CONF): runc as the runtime (crun refuses a hybrid cgroup set-up)
# with cgroupfs, and ulimits within the machine's hard limits (podman's
# defaults exceed them). Networking is loopback only: the container's port
# 6443 is published on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-localhost/kcp-cache:dev}
BASE=${BASE:-scratch}
mode=${1:-run}
case "$mode" in run | build) ;; *) echo "usage: $0 [build]" >&2; exit 2 ;; esac

for tool in podman runc openssl curl; do
  command -v "$tool" >/dev/null || { echo "hack/ci/image.sh: $tool is missing (Debian: apt-get install podman runc openssl curl)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/kcp-cache-image.XXXXXX)
name=kcp-cache-image-$$
cleanup() {
  podman rm -f --time 5 "$name" >/dev/null 2>&1 || true
  if [ "${KEEP:-}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF=$work/containers.conf

elapsed() { echo "$(($(date +%s) - $1))s"; }
t0=$(date +%s)

# The build context: rootfs/ holds everything the image has.
rootfs=$work/context/rootfs
mkdir -p "$rootfs/etc/ssl/certs"
echo "== building the static binary (CGO_ENABLED=0)"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$rootfs/cache-server" ./examples/cache-server
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
# The CA bundle, for an external etcd or webhook with a public certificate.
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"

echo "== podman build $IMAGE (FROM $BASE, no pull)"
previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
podman build --pull=never --quiet --build-arg "BASE=$BASE" -f Dockerfile -t "$IMAGE" "$work/context" >/dev/null
# The image this build replaced under the same name is removed, so that
# repeated runs do not pile up untagged images.
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
echo "image $IMAGE: $((size / 1000000)) MB ($size bytes), built in $(elapsed "$t0")"
[ "$mode" = build ] && exit 0

# What the operator mounts: the serving certificate and key
# (/etc/cache-server/tls/server) and the client CA of the shards
# (/etc/cache-server/tls/ca/root), and it gives every shard one client
# certificate, CN=cache-client, O=system:masters.
tls=$work/tls
mkdir -p "$tls/server" "$tls/ca" "$tls/client"
ossl() { openssl "$@" 2>/dev/null; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=kcp-cache-image-serving-ca" \
  -keyout "$tls/serving-ca.key" -out "$tls/serving-ca.crt"
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=cache-server" \
  -keyout "$tls/server/tls.key" -out "$tls/server.csr"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$tls/server.ext"
ossl x509 -req -in "$tls/server.csr" -CA "$tls/serving-ca.crt" -CAkey "$tls/serving-ca.key" -CAcreateserial \
  -days 1 -extfile "$tls/server.ext" -out "$tls/server/tls.crt"
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=kcp-cache-image-client-ca" \
  -keyout "$tls/client-ca.key" -out "$tls/ca/tls.crt"
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=system:masters/CN=cache-client" \
  -keyout "$tls/client/tls.key" -out "$tls/client.csr"
printf 'extendedKeyUsage=clientAuth\n' >"$tls/client.ext"
ossl x509 -req -in "$tls/client.csr" -CA "$tls/ca/tls.crt" -CAkey "$tls/client-ca.key" -CAcreateserial \
  -days 1 -extfile "$tls/client.ext" -out "$tls/client/tls.crt"
# Secrets are mounted readable by the container's user, as the operator's are.
chmod 0755 "$tls" "$tls/server" "$tls/ca"
chmod 0644 "$tls/server/tls.key"

port=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || shuf -i 20000-29999 -n 1)}

echo "== podman run $IMAGE as kcp-operator runs it (uid 65532, read-only root, 127.0.0.1:$port)"
t1=$(date +%s)
# run_server PODMAN_ARGS... -- SERVER_ARGS...: the container as the operator
# starts it (uid 65532, read-only root, its TLS files and arguments), with
# the etcd directory and any limits given in PODMAN_ARGS.
run_server() {
  local podman_args=()
  while [ "$1" != -- ]; do podman_args+=("$1"); shift; done
  shift
  podman run -d --name "$name" \
    --user 65532:65532 --read-only \
    "${podman_args[@]}" \
    --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
    -p "127.0.0.1:$port:6443" \
    -v "$tls/server:/etc/cache-server/tls/server:ro" \
    -v "$tls/ca:/etc/cache-server/tls/ca/root:ro" \
    "$IMAGE" \
    --tls-cert-file=/etc/cache-server/tls/server/tls.crt \
    --tls-private-key-file=/etc/cache-server/tls/server/tls.key \
    --root-directory= \
    --client-ca-file=/etc/cache-server/tls/ca/root/tls.crt \
    --embedded-etcd-directory=/var/etcd \
    "$@" >/dev/null
}
run_server --tmpfs /var/etcd:rw,mode=0700,U -- -v=2

fail() {
  echo "hack/ci/image.sh: $*" >&2
  echo "--- container log (last 40 lines)" >&2
  podman logs --tail 40 "$name" >&2 || true
  exit 1
}

base=https://127.0.0.1:$port
probe() { curl -sS --max-time 5 --cacert "$tls/serving-ca.crt" -o "$work/body" -w '%{http_code}' "$base$1" 2>/dev/null || true; }
deadline=$(($(date +%s) + ${READY_TIMEOUT:-180}))
while :; do
  [ "$(podman inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || fail "the container stopped before it was ready"
  ready=$(probe /readyz)
  if [ "$ready" = 200 ]; then
    readyz=$(cat "$work/body")
    [ "$(probe /livez)" = 200 ] && break
  fi
  [ "$(date +%s)" -lt "$deadline" ] || fail "/readyz or /livez not 200 within ${READY_TIMEOUT:-180}s (last /readyz: $ready)"
  sleep 1
done
echo "/readyz and /livez 200 over HTTPS $(elapsed "$t1") after podman run; /readyz answered: $readyz"

user=$(podman top "$name" user | awk 'NR == 2 { print $1 }')
[ "$user" = 65532 ] || [ "$user" = nonroot ] || fail "the server runs as $user, not uid 65532"

# The operator's one client certificate for every shard reads every partition.
code=$(curl -sS --max-time 10 --cacert "$tls/serving-ca.crt" --cert "$tls/client/tls.crt" --key "$tls/client/tls.key" \
  -o "$work/body" -w '%{http_code}' "$base/services/cache/shards/*/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports" || true)
[ "$code" = 200 ] || fail "listing apiexports with the operator's client certificate answered $code: $(head -c 300 "$work/body")"

echo "== podman stop"
podman stop --time 30 "$name" >/dev/null
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
[ "$exit_code" = 0 ] || fail "the server exited $exit_code on SIGTERM"

# Under a memory limit, as a container with resources.limits.memory runs it:
# the server reads the limit from its cgroup (--memory-limit=auto), collects
# before it is reached, and refuses new objects (507) before its data can no
# longer fit; it is never OOM-killed. The etcd directory is on disk here (an
# emptyDir's default medium): a tmpfs's pages would count against the limit.
limit_mib=${MEMORY_LIMIT_MIB:-256}
echo "== podman run $IMAGE with --memory=${limit_mib}m, loading objects until it refuses them"
t2=$(date +%s)
etcd_dir=$work/etcd
mkdir -p "$etcd_dir" && chown 65532:65532 "$etcd_dir" && chmod 0700 "$etcd_dir"
podman rm -f --time 5 "$name" >/dev/null 2>&1 || true
run_server --memory="${limit_mib}m" --memory-swap="${limit_mib}m" -v "$etcd_dir:/var/etcd" --
deadline=$(($(date +%s) + ${READY_TIMEOUT:-180}))
until [ "$(probe /readyz)" = 200 ]; do
  [ "$(podman inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || fail "the memory-limited container stopped before it was ready"
  [ "$(date +%s)" -lt "$deadline" ] || fail "the memory-limited container was not ready within ${READY_TIMEOUT:-180}s"
  sleep 1
done
want_bytes=$((limit_mib * 1024 * 1024))
# (The log is read whole first: grep -q closing the pipe early would fail the
# pipeline under pipefail.)
podman logs "$name" >"$work/memlog" 2>&1 || true
grep -q "\"Memory limit\".* limitBytes=$want_bytes " "$work/memlog" ||
  fail "the server did not take its memory limit ($want_bytes bytes) from its cgroup"
# Objects of 256 KiB, four at a time, until the server answers 507 (at most
# 4,000 of them: 1 GiB, four times the limit).
# One body for all (a generated name each): 256 KiB of payload.
printf '{"apiVersion":"apis.kcp.io/v1alpha2","kind":"APIExport","metadata":{"generateName":"big-"},"spec":{"payload":"%s"}}' \
  "$(head -c 196608 /dev/zero | base64 -w0)" >"$work/big.json"
for i in $(seq 1 4000); do echo "$i"; done >"$work/seq"
post() {
  curl -sS --max-time 60 --cacert "$tls/serving-ca.crt" --cert "$tls/client/tls.crt" --key "$tls/client/tls.key" \
    -H 'Content-Type: application/json' --data-binary @"$work/big.json" -o /dev/null -w '%{http_code}\n' \
    "$base/services/cache/shards/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports" 2>/dev/null || echo 000
}
export -f post
export base tls work
created=0
refused=0
while read -r batch; do
  codes=$(echo "$batch" | tr ' ' '\n' | xargs -P 4 -I{} bash -c 'post {}')
  created=$((created + $(echo "$codes" | grep -c '^201$' || true)))
  if echo "$codes" | grep -q '^507$'; then refused=1; break; fi
  bad=$(echo "$codes" | grep -v '^201$' | head -1 || true)
  [ -z "$bad" ] || fail "a create under the memory limit answered $bad after $created objects"
done < <(xargs -n 40 <"$work/seq")
[ "$refused" = 1 ] || fail "4000 objects of 256 KiB created under a ${limit_mib} MiB limit and none refused"
[ "$(podman inspect --format '{{.State.OOMKilled}}' "$name")" = false ] || fail "the server was OOM-killed"
[ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the server stopped after $created objects"
[ "$(probe /readyz)" = 200 ] || fail "/readyz is not 200 once the server refuses new objects"
code=$(curl -sS --max-time 30 --cacert "$tls/serving-ca.crt" --cert "$tls/client/tls.crt" --key "$tls/client/tls.key" \
  -o /dev/null -w '%{http_code}' "$base/services/cache/shards/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports?limit=1" || true)
[ "$code" = 200 ] || fail "listing objects once the server refuses new ones answered $code"
rss=$(podman stats --no-stream --format '{{.MemUsage}}' "$name" 2>/dev/null | head -1 || true)
echo "under --memory=${limit_mib}m: $created objects of 256 KiB taken, then 507 InsufficientStorage; not OOM-killed, still ready, reads served (memory: ${rss:-unknown}); $(elapsed "$t2")"
podman stop --time 30 "$name" >/dev/null
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
[ "$exit_code" = 0 ] || fail "the memory-limited server exited $exit_code on SIGTERM"

# A volume (here the host directory) keeps everything across a restart of the
# pod: the same container started again holds every object it had taken.
echo "== podman start again on the same etcd directory (a persistent volume)"
podman start "$name" >/dev/null
deadline=$(($(date +%s) + ${READY_TIMEOUT:-180}))
until [ "$(probe /readyz)" = 200 ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "the restarted container was not ready within ${READY_TIMEOUT:-180}s"
  sleep 1
done
curl -sS --max-time 60 --cacert "$tls/serving-ca.crt" --cert "$tls/client/tls.crt" --key "$tls/client/tls.key" \
  -o "$work/list" "$base/services/cache/shards/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports?resourceVersion=0" ||
  fail "listing after the restart failed"
kept=$(grep -o '"generateName":"big-"' "$work/list" | wc -l)
[ "$kept" = "$created" ] || fail "after a restart on the same volume the server holds $kept of the $created objects it had taken"
echo "restarted on its volume: all $created objects kept"
podman stop --time 30 "$name" >/dev/null

echo "image $IMAGE: $((size / 1000000)) MB; /readyz: $readyz; ran as uid 65532 on a read-only root; exited 0 on SIGTERM; refused objects at its memory limit without being killed; $(elapsed "$t0") in all"
