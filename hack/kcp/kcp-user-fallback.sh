#!/usr/bin/env bash
# kcp-user-fallback.sh shows what kcp's users read of a lost shard through kcp's front-proxy with
# the read-only fallback (docs/fallback.md), and proves its authorization differentially against
# the shard's own.
#
# In kcp's sharded test environment split in two regions (hack/kcp/kcp-e2e.sh's "regions": the
# root shard pushes to cache east, shard-1 to west, the caches mirror each other), with kcp's
# front-proxy patched by hack/kcp/kcp-front-proxy-fallback.patch and started with
# --cache-fallback-kubeconfig at west (the front-proxy's region), it:
#
#   1. creates two organizations on the root shard, root:orga and root:orgb (orgb requires the
#      group orgb-members), with RBAC for a set of identities (client certificates of kcp's
#      client CA; see IDS below), and runs the user-read replicator (examples/replicator) beside
#      the root shard for root and every workspace of type root:organization;
#   2. asks every identity every request (REQS below) through the front-proxy while the root
#      shard answers, then with the root shard stopped (its region's cache east up), then with
#      cache east stopped too, then after both return;
#   3. prints the decision table and the differential summary: the fallback must never allow
#      what the shard denied; it says how many of the shard's allows the fallback keeps;
#   4. prints what kubectl shows a user in each phase (Warnings included).
#
#   FRONT_PROXY_BIN=/path/kcp-front-proxy hack/kcp/kcp-user-fallback.sh /path/to/kcp
#   FALLBACK=off FRONT_PROXY_BIN=... hack/kcp/kcp-user-fallback.sh /path/to/kcp   # the flag off:
#                                    # kcp's front-proxy as it is, what users get without the fallback
#   FALLBACK_CACHE=east FRONT_PROXY_BIN=... hack/kcp/kcp-user-fallback.sh /path/to/kcp
#                                    # the fallback reads east, the root shard's own region's cache
#
# FRONT_PROXY_BIN is kcp's front-proxy built from a tree with the patch applied (go mod edit
# -require/-replace of this module, go build -tags kcp ./cmd/kcp-front-proxy). kcp's other
# binaries come from KCP_DIR/bin (see kcp-e2e.sh). The environment uses kcp's fixed ports; the
# script holds /tmp/kcp-ports.lock while it runs.
set -euo pipefail

if [ -z "${KCP_FALLBACK_LOCKED:-}" ]; then
	KCP_FALLBACK_LOCKED=1 exec flock /tmp/kcp-ports.lock "$0" "$@"
fi

HERE=$(cd "$(dirname "$0")/../.." && pwd)
export OUT=${OUT:-$HERE/.kcp-user-fallback}
FRONT_PROXY_BIN=${FRONT_PROXY_BIN:?FRONT_PROXY_BIN: kcp-front-proxy built with hack/kcp/kcp-front-proxy-fallback.patch}
KCP_E2E_LIB=1
# shellcheck source=hack/kcp/kcp-e2e.sh
source "$HERE/hack/kcp/kcp-e2e.sh" "$@"

log "building the user-read replicator"
(cd "$HERE" && CGO_ENABLED=0 go build -o "$OUT/bin/replicator" ./examples/replicator)

# The front-proxy, with the fallback reading west (the cache of the front-proxy's region), or
# east (FALLBACK_CACHE=east: the root shard's own region, one region), or without the flag
# (FALLBACK=off: kcp's front-proxy as it is, for the table's baseline).
fallback_cache=.kcp-cache-west
[ "${FALLBACK_CACHE:-west}" = east ] && fallback_cache=.kcp-cache
flag="--cache-fallback-kubeconfig=\"\$work/$fallback_cache/cache.kubeconfig\""
[ "${FALLBACK:-on}" = off ] && flag=""
cat >"$OUT/bin/fallback-front-proxy" <<EOF
#!/usr/bin/env bash
for a in "\$@"; do case \$a in --root-directory=*) work=\$(dirname "\${a#--root-directory=}") ;; esac; done
exec $(printf %q "$FRONT_PROXY_BIN") "\$@" $flag
EOF
chmod +x "$OUT/bin/fallback-front-proxy"
export KCP_ASSET_KCP_FRONT_PROXY="$OUT/bin/fallback-front-proxy"

env_start regions
REPLICATOR_PID=""
cleanup() {
	[ -n "$REPLICATOR_PID" ] && kill "$REPLICATOR_PID" 2>/dev/null || true
	env_stop
}
trap cleanup EXIT
W=$env_work
REGIONS="$HERE/hack/kcp/kcp-regions.sh"
FP=https://127.0.0.1:6443
CA="$OUT/front-proxy-ca.crt"
kubectl --kubeconfig="$W/.kcp/admin.kubeconfig" config view --raw --minify --context=root \
	-o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$CA"

# k PATH ARGS...: kubectl in workspace PATH through the front-proxy, as kcp-admin.
k() {
	local path=$1
	shift
	kubectl --kubeconfig="$W/.kcp/admin.kubeconfig" --context=root --request-timeout=15s \
		--server="$FP/clusters/$path" "$@"
}

until_ok() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 1
	done
}

# ---- identities: client certificates of kcp's client CA -------------------------------------
# IDS: name, then "CN/O1/O2..." of its certificate; "-" is a request without a certificate.
IDS=(
	"kcp-admin=kcp-admin/system:kcp:admin"
	"masters=master/system:masters"
	"orga-admin=alice"
	"orga-viewer=victor"
	"orga-dev=dora/orga-devs"
	"ns-reader=nina"
	"orgb-member=bob/orgb-members"
	"orgb-outsider=oscar"
	"other-org-admin=olga"
	"no-access=nobody"
	"anonymous=-"
	"service-account=token"
)
mkdir -p "$OUT/ids"
for id in "${IDS[@]}"; do
	name=${id%%=*} subj=${id#*=}
	[ "$subj" = - ] || [ "$subj" = token ] && continue
	cn=${subj%%/*} dn="/CN=${subj%%/*}"
	rest=${subj#"$cn"}
	IFS=/ read -ra groups <<<"${rest#/}"
	for g in "${groups[@]}"; do [ -n "$g" ] && dn="$dn/O=$g"; done
	openssl req -new -newkey rsa:2048 -nodes -subj "$dn" -keyout "$OUT/ids/$name.key" -out "$OUT/ids/$name.csr" 2>/dev/null
	openssl x509 -req -in "$OUT/ids/$name.csr" -CA "$W/.kcp/client-ca.crt" -CAkey "$W/.kcp/client-ca.key" \
		-CAcreateserial -days 1 -out "$OUT/ids/$name.crt" 2>/dev/null
done

# ---- the organizations and their RBAC --------------------------------------------------------
log "creating root:orga and root:orgb (type root:organization) on the root shard"
for org in orga orgb; do
	k root apply -f - >/dev/null <<EOF
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: $org
spec:
  type: {name: organization, path: root}
  location: {selector: {matchLabels: {name: root}}}
EOF
done
ws_ready() { [ "$(k root get workspace "$1" -o jsonpath='{.status.phase}')" = Ready ]; }
until_ok 300 ws_ready orga
until_ok 300 ws_ready orgb
ORGA=$(k root get workspace orga -o jsonpath='{.spec.cluster}')
ORGB=$(k root get workspace orgb -o jsonpath='{.spec.cluster}')
log "root:orga is logical cluster $ORGA, root:orgb is $ORGB"
k root:orgb annotate --overwrite logicalcluster cluster authorization.kcp.io/required-groups=orgb-members >/dev/null
k root:orga apply -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: org-viewer}
rules:
- {apiGroups: [tenancy.kcp.io, rbac.authorization.k8s.io, apis.kcp.io, core.kcp.io], resources: ["*"], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: workspace-lister}
rules:
- {apiGroups: [tenancy.kcp.io], resources: [workspaces], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: org-access}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kcp:workspace:access"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: victor}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: nina}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: orga-devs}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: victor-viewer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: org-viewer}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: victor}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: devs-list-workspaces}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workspace-lister}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: orga-devs}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: rbac-reader, namespace: default}
rules:
- {apiGroups: [rbac.authorization.k8s.io], resources: [roles, rolebindings], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: nina-rbac-reader, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: rbac-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: nina}]
EOF
k root:orgb apply -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: org-access}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kcp:workspace:access"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:authenticated}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: olga-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: olga}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: oscar}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: workspace-reader}
rules:
- {apiGroups: [tenancy.kcp.io, core.kcp.io], resources: ["*"], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: members-read}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workspace-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: orgb-members}]
EOF
k root:orga create workspace team1 >/dev/null 2>&1 || k root:orga apply -f - >/dev/null <<'EOF'
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata: {name: team1}
spec: {location: {selector: {matchLabels: {name: root}}}}
EOF

# A service account of root:orga that may read its workspaces and RBAC, with a token (kcp's
# front-proxy passes a token it cannot authenticate on to the shard, which can).
k root:orga create serviceaccount robot -n default >/dev/null
k root:orga create clusterrolebinding robot-viewer --clusterrole=org-viewer --serviceaccount=default:robot >/dev/null
k root:orga create clusterrolebinding robot-access --clusterrole=system:kcp:workspace:access --serviceaccount=default:robot >/dev/null
k root:orga create token robot -n default --duration=2h >"$OUT/ids/service-account.token"

# ---- the replicator beside the root shard ----------------------------------------------------
log "starting the user-read replicator beside the root shard"
"$OUT/bin/replicator" --shard-name=root \
	--kubeconfig="$W/.kcp-0/admin.kubeconfig" \
	--cache-kubeconfig="$W/.kcp-cache/cache.kubeconfig" \
	--user-read-workspaces=root --user-read-workspace-types=root:organization \
	>"$W/logs/replicator.log" 2>&1 &
REPLICATOR_PID=$!

# cache CACHE PATH: GET at a cache with the shards' certificate; prints the body.
cache() {
	local port=8012 root="$W/.kcp-cache"
	[ "$1" = west ] && port=8022 && root="$W/.kcp-cache-west"
	curl -sf --max-time 15 --cacert "$root/apiserver.crt" --cert "$W/.kcp-cache/cache-client.crt" \
		--key "$W/.kcp-cache/cache-client.key" "https://localhost:$port/services/cache$2"
}
# Converged at the fallback's cache: the heartbeat of root:readonly says converged, and orga's RBAC
# is there.
FB_CACHE=${FALLBACK_CACHE:-west}
converged_at_fallback_cache() {
	cache "$FB_CACHE" "/shards/root:readonly/clusters/system:cache-heartbeat/apis/cache.kcp.io/v1alpha1/shardheartbeats/root:readonly" |
		python3 -c 'import json,sys; s=json.load(sys.stdin)["spec"]; sys.exit(0 if s.get("converged") and s.get("epoch") else 1)' &&
		cache "$FB_CACHE" "/shards/root:readonly/clusters/$ORGA/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/victor-viewer" >/dev/null
}
until_ok 180 converged_at_fallback_cache || { log "root:readonly never converged at $FB_CACHE; see $W/logs/replicator.log"; exit 1; }
log "root's user-read partition is converged at $FB_CACHE"

# ---- the decision table ----------------------------------------------------------------------
REQS=(
	"list workspaces in root=root/apis/tenancy.kcp.io/v1alpha1/workspaces"
	"get workspace orga in root=root/apis/tenancy.kcp.io/v1alpha1/workspaces/orga"
	"list workspaces in root:orga=root:orga/apis/tenancy.kcp.io/v1alpha1/workspaces"
	"get LogicalCluster of root:orga=root:orga/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
	"list ClusterRoles in root:orga=root:orga/apis/rbac.authorization.k8s.io/v1/clusterroles"
	"list ClusterRoleBindings in root:orga=root:orga/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
	"list RoleBindings in root:orga/default=root:orga/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings"
	"list Roles in root:orga (all namespaces)=root:orga/apis/rbac.authorization.k8s.io/v1/roles"
	"list APIBindings in root:orga=root:orga/apis/apis.kcp.io/v1alpha2/apibindings"
	"discovery of root:orga=root:orga/apis"
	"list workspaces in root:orgb=root:orgb/apis/tenancy.kcp.io/v1alpha1/workspaces"
	"get LogicalCluster of root:orgb=root:orgb/apis/core.kcp.io/v1alpha1/logicalclusters/cluster"
)
TABLE="$OUT/decisions.tsv"
: >"$TABLE"
# ask PHASE: every identity, every request; records the HTTP code and whether a Warning came.
ask() {
	local phase=$1 id name subj req rname path code warn
	for id in "${IDS[@]}"; do
		name=${id%%=*} subj=${id#*=}
		local auth=()
		case $subj in
		-) ;;
		token) auth=(-H "Authorization: Bearer $(cat "$OUT/ids/$name.token")") ;;
		*) auth=(--cert "$OUT/ids/$name.crt" --key "$OUT/ids/$name.key") ;;
		esac
		for req in "${REQS[@]}"; do
			rname=${req%%=*} path=${req#*=}
			code=$(curl -s --max-time 20 --cacert "$CA" "${auth[@]}" -D "$OUT/h" -o "$OUT/b" -w '%{http_code}' "$FP/clusters/$path" || echo 000)
			warn=$(grep -ci '^warning: 299' "$OUT/h" || true)
			printf '%s\t%s\t%s\t%s\t%s\n' "$phase" "$name" "$rname" "$code" "$warn" >>"$TABLE"
		done
	done
	log "[$phase] asked ${#IDS[@]} identities x ${#REQS[@]} requests"
}

# show PHASE: what kubectl shows a user (alice) in this phase.
USER_ROWS="$OUT/user-rows.txt"
: >"$USER_ROWS"
show() {
	local phase=$1 t0 out rc
	local slug=${phase// /-}
	for cmd in "root get workspaces" "root:orga get workspaces" "root:orga get clusterrolebindings" "root:orga create clusterrole x-$slug --verb=get --resource=configmaps"; do
		read -r path verb rest <<<"$cmd"
		t0=$(date +%s.%N)
		rc=0
		out=$(kubectl --server="$FP/clusters/$path" --certificate-authority="$CA" \
			--client-certificate="$OUT/ids/orga-admin.crt" --client-key="$OUT/ids/orga-admin.key" \
			--request-timeout=20s $verb $rest -o name 2>&1) || rc=$?
		t1=$(date +%s.%N)
		# The same again with -v=6, for the time the request itself took (kubectl's own start-up
		# takes seconds here, with or without the fallback).
		took=$(kubectl --server="$FP/clusters/$path" --certificate-authority="$CA" -v=6 \
			--client-certificate="$OUT/ids/orga-admin.crt" --client-key="$OUT/ids/orga-admin.key" \
			--request-timeout=20s $verb $rest -o name 2>&1 | tee -a "$OUT/kubectl-v6.log" |
			sed -n 's/.*round_trippers.go.*\(GET\|POST\) \(.*\) \([0-9]* [A-Za-z ]*\) in \([0-9]*\) milliseconds/\1 \3 in \4 ms/p' | tail -1 || true)
		printf '[%s] kubectl %s (alice): exit %s in %.1f s (the request: %s)\n%s\n\n' "$phase" "$cmd" "$rc" \
			"$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$took" "$(printf '%s' "$out" | head -8)" >>"$USER_ROWS"
	done
}

ask "shard up"
show "shard up"

log "stopping the root shard"
"$REGIONS" stop "$W" kcp-root
ask "root shard lost"
show "root shard lost"

log "stopping cache east too (the root shard's region)"
"$REGIONS" stop "$W" east
ask "root shard and east lost"
show "root shard and east lost"

log "starting cache east and the root shard again"
"$REGIONS" start "$W" east
"$REGIONS" start "$W" kcp-root
until_ok 300 kubectl --kubeconfig="$W/.kcp-0/admin.kubeconfig" --context=base get --raw /readyz
back_at_shard() { [ "$(curl -s --cacert "$CA" --cert "$OUT/ids/orga-admin.crt" --key "$OUT/ids/orga-admin.key" -D - -o /dev/null "$FP/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces" | grep -ci '^warning: 299')" = 0 ]; }
until_ok 120 back_at_shard || true
ask "after the return"
show "after the return"

log "done; the tables:"
python3 - "$TABLE" <<'EOF'
import sys, collections
rows = collections.OrderedDict()
phases = []
for line in open(sys.argv[1]):
    phase, who, req, code, warn = line.rstrip("\n").split("\t")
    if phase not in phases:
        phases.append(phase)
    rows.setdefault((who, req), {})[phase] = (code, warn != "0")
print("| identity | request | " + " | ".join(phases) + " |")
print("|---|---|" + "---|" * len(phases))
for (who, req), by in rows.items():
    cells = []
    for p in phases:
        code, warned = by.get(p, ("", False))
        cells.append(code + (" W" if warned else ""))
    print(f"| {who} | {req} | " + " | ".join(cells) + " |")
up = "shard up"
ok = lambda c: c.startswith("2")
print()
for p in phases[1:]:
    widened = [(w, r) for (w, r), by in rows.items() if not ok(by[up][0]) and ok(by[p][0])]
    allowed = [(w, r) for (w, r), by in rows.items() if ok(by[up][0])]
    kept = [(w, r) for (w, r) in allowed if ok(rows[(w, r)][p][0])]
    unwarned = [(w, r) for (w, r), by in rows.items() if p != "after the return" and ok(by[p][0]) and not by[p][1]]
    print(f"- {p}: allows where the shard denied: {len(widened)} {widened if widened else ''}; "
          f"the shard's allows kept: {len(kept)} of {len(allowed)}; served without a Warning: {len(unwarned)}")
EOF
echo
cat "$USER_ROWS"
