#!/usr/bin/env bash
# wire.sh ROOT sends a fixed set of requests to a running cache server whose --root-directory is
# ROOT (it reads ROOT/cache.kubeconfig and ROOT/admin.token) and prints the answers, one line each,
# so that two builds can be compared with diff: the upstream build (go run ./examples/cache-server)
# and the kcp build (go build -tags kcp ./cache-server here). Needs curl, jq and kubectl; run it on
# fresh servers (it creates objects).
set -u
KC=$1/cache.kubeconfig
B=$(kubectl --kubeconfig $KC config view -o jsonpath='{.clusters[0].cluster.server}')
T=$(cat $1/admin.token)
c() { curl -sk -H "Authorization: Bearer $T" -H 'Content-Type: application/json' "$@"; }
P=$B/services/cache/shards
body='{"apiVersion":"apis.kcp.io/v1alpha2","kind":"APIExport","metadata":{"name":"e1","annotations":{"kcp.io/path":"root:org"}},"spec":{}}'
echo "create amber/root:"; c -X POST -d "$body" $P/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports | jq -c '{kind,name:.metadata.name,ann:.metadata.annotations,code}'
echo "create amber/org1:"; c -X POST -d "$body" $P/amber/clusters/org1/apis/apis.kcp.io/v1alpha2/apiexports | jq -c '{kind,name:.metadata.name,ann:.metadata.annotations,code}'
echo "create jade/root:"; c -X POST -d "$body" $P/jade/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports | jq -c '{kind,name:.metadata.name,ann:.metadata.annotations,code}'
bad='{"apiVersion":"apis.kcp.io/v1alpha2","kind":"APIExport","metadata":{"name":"e2","annotations":{"kcp.io/shard":"jade"}},"spec":{}}'
echo "create amber/root naming shard jade:"; c -X POST -d "$bad" $P/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports | jq -c '{kind,code,reason,message}'
for s in amber/clusters/root 'amber/clusters/*' '*/clusters/root' '*/clusters/*'; do
  echo "list $s:"; c "$P/$s/apis/apis.kcp.io/v1alpha2/apiexports" | jq -c '[.items[].metadata|{n:.name,s:.annotations["kcp.io/shard"],c:.annotations["kcp.io/cluster"]}]'
done
echo "get amber/org1/e1:"; c $P/amber/clusters/org1/apis/apis.kcp.io/v1alpha2/apiexports/e1 | jq -c '{kind,name:.metadata.name,s:.metadata.annotations["kcp.io/shard"],c:.metadata.annotations["kcp.io/cluster"]}'
echo "get */*/e1:"; c "$P/*/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports/e1" | jq -c '{kind,code,reason}'
echo "update amber/root/e1:"; u=$(c $P/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports/e1 | jq -c '.metadata.labels={"x":"y"}'); c -X PUT -d "$u" $P/amber/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports/e1 | jq -c '{kind,labels:.metadata.labels,s:.metadata.annotations["kcp.io/shard"],c:.metadata.annotations["kcp.io/cluster"]}'
echo "partial metadata list */*:"; c -H 'Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1' "$P/*/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports" | jq -c '{kind,items:[.items[]?.metadata|{n:.name,s:.annotations["kcp.io/shard"],c:.annotations["kcp.io/cluster"]}],code}'
echo "watch */* (initial events, 3s):"; c -m 3 "$P/*/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports?watch=true&resourceVersion=0" | jq -c '{type,n:.object.metadata.name,s:.object.metadata.annotations["kcp.io/shard"],c:.object.metadata.annotations["kcp.io/cluster"]}'
echo "watch amber/* from now, then delete amber/org1/e1:"; rv=$(c "$P/amber/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports" | jq -r .metadata.resourceVersion)
( c -m 4 "$P/amber/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports?watch=true&resourceVersion=$rv" | jq -c '{type,n:.object.metadata.name,s:.object.metadata.annotations["kcp.io/shard"],c:.object.metadata.annotations["kcp.io/cluster"]}' ) &
sleep 1; c -X DELETE $P/amber/clusters/org1/apis/apis.kcp.io/v1alpha2/apiexports/e1 | jq -c '{kind,code}'; wait
echo "crd list (system partition):"; c $B/apis/apiextensions.k8s.io/v1/customresourcedefinitions | jq -c '[(.items|length), (.items[0].metadata.annotations|tostring)]'
echo "aggregated discovery amber/root:"; c -H 'Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json' "$P/amber/clusters/root/apis" | jq -c '{kind, groups:(.items|length), kcp:[.items[]|select(.metadata.name=="apis.kcp.io")|.versions[]|{v:.version,r:([.resources[].resource]|sort)}]}'
echo "legacy discovery amber/root apis.kcp.io/v1alpha1:"; c "$P/amber/clusters/root/apis/apis.kcp.io/v1alpha1" | jq -c '[.resources[].name]|sort'
