package cache

import "github.com/kcp-dev/logicalcluster/v3"

const (
	// AnnotationShard names the shard that owns a copy. The server fills it from
	// the request path and refuses a body that disagrees.
	AnnotationShard = "kcp.io/shard"

	// AnnotationCluster names the logical cluster a copy belongs to. It is the
	// same key logicalcluster.From reads, so kcp code works on cached objects.
	AnnotationCluster = logicalcluster.AnnotationKey

	// AnnotationPath carries the workspace path of an object's logical cluster,
	// when the origin knows it; consumers index by it for path+name lookups.
	AnnotationPath = "kcp.io/path"

	// AnnotationOriginalResourceVersion records the resourceVersion of the
	// source object on its shard when the copy was last written.
	AnnotationOriginalResourceVersion = "cache.kcp.io/original-resource-version"

	// AnnotationOriginalResourceUID records the UID of the source object.
	AnnotationOriginalResourceUID = "cache.kcp.io/original-resource-UID"
)
