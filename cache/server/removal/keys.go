package removal

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// ShardResource is kcp's Shard type (in the kcp type profile,
// kcpcache.KcpTypes). kcp keeps one Shard object per shard, named after it, in
// the root logical cluster of the root shard; the root shard replicates
// them into its partition, cluster "root". The purger reads its keys even
// when the type is not served.
var ShardResource = schema.GroupResource{Group: "core.kcp.io", Resource: "shards"}

// ShardObjectCluster is the cluster holding kcp's Shard objects.
const ShardObjectCluster = "root"

// typePrefix is the etcd key prefix of every object of gr, ending in "/".
func typePrefix(prefix string, gr schema.GroupResource) string {
	return strings.TrimSuffix(prefix, "/") + "/" + gr.Group + "/" + gr.Resource + "/"
}

// heartbeatKey is where shard's heartbeat is stored.
func heartbeatKey(prefix, shard string) string {
	return typePrefix(prefix, kcpcache.HeartbeatResource.GroupResource()) + shard + "/" + kcpcache.HeartbeatCluster + "/" + shard
}

// objectKey splits a key below a type prefix into partition and object.
type objectKey struct {
	shard, cluster, rest string
}

func parseObjectKey(typePrefix, key string) (objectKey, bool) {
	rest, ok := strings.CutPrefix(key, typePrefix)
	if !ok {
		return objectKey{}, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return objectKey{}, false
	}
	return objectKey{shard: parts[0], cluster: parts[1], rest: parts[2]}, true
}

// typePrefixes returns the key prefix of every type that holds at least one
// key below prefix, whether or not it is served now (its CRD may be gone).
// It asks etcd for one key per type, skipping over each type's range.
func typePrefixes(ctx context.Context, kv clientv3.KV, prefix string) ([]string, error) {
	root := strings.TrimSuffix(prefix, "/") + "/"
	end := clientv3.GetPrefixRangeEnd(root)
	var out []string
	for from := root; ; {
		resp, err := kv.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return out, nil
		}
		key := string(resp.Kvs[0].Key)
		parts := strings.SplitN(strings.TrimPrefix(key, root), "/", 3)
		if len(parts) < 3 {
			// Not an object key (nothing of ours is stored like this); step over it.
			from = key + "\x00"
			continue
		}
		p := root + parts[0] + "/" + parts[1] + "/"
		out = append(out, p)
		from = clientv3.GetPrefixRangeEnd(p)
	}
}
