package kcplayout

import (
	"encoding/json"
	"fmt"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// meta is what the layouts need of a stored object.
type meta struct {
	Name, Namespace string
	Shard, Cluster  string
}

// readMeta reads a stored object's metadata. Both servers store JSON (kcp's
// cache serves custom resources only, which are always JSON); anything else
// is not an object of either layout.
func readMeta(value []byte) (meta, error) {
	var obj struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(value, &obj); err != nil {
		return meta{}, err
	}
	if obj.Metadata.Name == "" {
		return meta{}, fmt.Errorf("no metadata.name")
	}
	return meta{
		Name:      obj.Metadata.Name,
		Namespace: obj.Metadata.Namespace,
		Shard:     obj.Metadata.Annotations[kcpcache.AnnotationShard],
		Cluster:   obj.Metadata.Annotations[kcpcache.AnnotationCluster],
	}, nil
}

// withPartition returns value with the kcp.io/shard and kcp.io/cluster
// annotations of k, the partition its key names (kcp's read path sets both
// from the key as well, whatever was stored), and everything else as it
// was: fields are re-encoded from their own bytes, never through Go
// values, so numbers and unknown fields stay exact.
func withPartition(value []byte, k Key) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(value, &obj); err != nil {
		return nil, err
	}
	var metadata map[string]json.RawMessage
	if err := json.Unmarshal(obj["metadata"], &metadata); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	annotations := map[string]string{}
	if raw, ok := metadata["annotations"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &annotations); err != nil {
			return nil, fmt.Errorf("metadata.annotations: %w", err)
		}
	}
	annotations[kcpcache.AnnotationShard] = k.Shard
	annotations[kcpcache.AnnotationCluster] = k.Cluster
	var err error
	if metadata["annotations"], err = json.Marshal(annotations); err != nil {
		return nil, err
	}
	if obj["metadata"], err = json.Marshal(metadata); err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}

// hasPartition reports whether m carries k's partition as its annotations.
func (m meta) hasPartition(k Key) bool {
	return m.Shard == k.Shard && m.Cluster == k.Cluster
}
