//go:build kcp

package partition

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// This file is the kcp build; answercodec_upstream.go is the upstream one.

// crds is the resource of the only objects upstream's registry stores in the
// system partition.
var crds = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// answerCodec is the storage codec of resource. For CRDs it stamps the
// system partition's annotations on what it decodes. kcp's fork drops
// kcp.io/shard from a created object before storage, and a dry run's answer
// is the created object passed through this codec (the registry's
// DryRunnableStorage encodes and decodes it), not what storage stamps and
// decodes; the data plane's types get the same from the data plane
// (StampAnswer), CRDs are apiextensions' own registry. Every other decode
// of a CRD already carries both annotations, and is left as it is.
func answerCodec(resource schema.GroupResource, codec runtime.Codec) runtime.Codec {
	if resource != crds {
		return codec
	}
	return systemPartitionCodec{codec}
}

type systemPartitionCodec struct {
	runtime.Codec
}

func (c systemPartitionCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if err != nil {
		return obj, gvk, err
	}
	if m, merr := meta.Accessor(obj); merr == nil {
		// Refuses only an object naming another partition, which no CRD
		// the registry decodes does.
		_ = stampPartition(m, kcpcache.SystemScope)
	}
	return obj, gvk, nil
}
