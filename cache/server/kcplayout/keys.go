package kcplayout

import (
	"strings"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	// customResources is the segment kcp's fork inserts after the resource
	// of every custom resource without an identity.
	customResources = "customresources"
	// bookkeeping is the first segment of this server's own keys (the
	// epoch marker, the home claims), never an object.
	bookkeeping = "kcp-cache"

	crdGroup    = "apiextensions.k8s.io"
	crdResource = "customresourcedefinitions"
)

// Key is where one object lives, in terms both layouts share.
type Key struct {
	Group string
	// Resource is "<resource>:<identity>" for a resource with an identity,
	// as this server names it.
	Resource        string
	Shard, Cluster  string
	Namespace, Name string
}

// isCRD reports whether k is a CRD, kept at the same key in both layouts.
func (k Key) isCRD() bool { return k.Group == crdGroup && k.Resource == crdResource }

// Ours is k's key in this server's layout.
func (k Key) Ours(prefix string) string {
	return k.key(prefix, k.Group, k.Resource)
}

// KCP is k's key in kcp's cache-server's layout.
func (k Key) KCP(prefix string) string {
	if k.isCRD() {
		return k.Ours(prefix)
	}
	resource, identity, found := strings.Cut(k.Resource, ":")
	if !found {
		identity = customResources
	}
	return k.key(prefix, k.Group, resource, identity)
}

func (k Key) key(prefix string, resourceSegments ...string) string {
	segs := append([]string{strings.TrimSuffix(prefix, "/")}, resourceSegments...)
	segs = append(segs, k.Shard, k.Cluster)
	if k.Namespace != "" {
		segs = append(segs, k.Namespace)
	}
	return strings.Join(append(segs, k.Name), "/")
}

// segments splits key below prefix; false when key is not below it.
func segments(prefix, key string) ([]string, bool) {
	rest, ok := strings.CutPrefix(key, strings.TrimSuffix(prefix, "/")+"/")
	if !ok || rest == "" {
		return nil, false
	}
	return strings.Split(rest, "/"), true
}

// keyShape is what a key alone tells of its layout.
type keyShape int

const (
	// shapeOther is outside both layouts.
	shapeOther keyShape = iota
	// shapeBookkeeping is one of this server's own keys.
	shapeBookkeeping
	// shapeCRD is a CRD (the same key in both layouts).
	shapeCRD
	// shapeOurs is this server's layout; only the value can tell a
	// namespaced object of ours from a cluster-scoped one of kcp's when
	// ambiguous is set.
	shapeOurs
	// shapeKCP is kcp's layout.
	shapeKCP
)

// shapeOf classifies a key by its segments below the prefix. Six segments
// are ambiguous: a namespaced object of ours (<g>/<r>/<shard>/<cluster>/<ns>/<name>)
// or a cluster-scoped one of kcp's (<g>/<r>/<x>/<shard>/<cluster>/<name>),
// unless the resource carries an identity, which only ours writes into
// that segment; the value decides (parse).
func shapeOf(segs []string) (shape keyShape, ambiguous bool) {
	switch {
	case len(segs) > 0 && segs[0] == bookkeeping:
		return shapeBookkeeping, false
	case len(segs) < 5 || len(segs) > 7 || slicesContainEmpty(segs):
		return shapeOther, false
	case segs[0] == crdGroup && segs[1] == crdResource:
		if len(segs) != 5 {
			return shapeOther, false
		}
		return shapeCRD, false
	case len(segs) == 5:
		return shapeOurs, false
	case len(segs) == 7:
		return shapeKCP, false
	case strings.Contains(segs[1], ":"):
		return shapeOurs, false
	default:
		return shapeOurs, true
	}
}

func slicesContainEmpty(segs []string) bool {
	for _, s := range segs {
		if s == "" {
			return true
		}
	}
	return false
}

// parse reads the object's Key from its key and the name and namespace its
// value holds, in whichever layout they agree with; ok is false when they
// agree with neither, or a segment could not be a shard, a cluster or a
// resource. fromKCP tells which layout matched; both do for a CRD.
func parse(segs []string, m meta) (k Key, fromKCP, ok bool) {
	shape, _ := shapeOf(segs)
	n := len(segs)
	tail := 1
	if m.Namespace != "" {
		tail = 2
	}
	if shape == shapeOther || shape == shapeBookkeeping || segs[n-1] != m.Name || (m.Namespace != "" && segs[n-2] != m.Namespace) {
		return Key{}, false, false
	}
	head := segs[:n-tail]
	switch len(head) {
	case 4: // <g>/<r>/<shard>/<cluster>: ours, or a CRD of either
		k = Key{Group: head[0], Resource: head[1], Shard: head[2], Cluster: head[3]}
		fromKCP = shape == shapeCRD
	case 5: // <g>/<r>/<x>/<shard>/<cluster>: kcp's
		if shape == shapeCRD || strings.Contains(head[1], ":") || strings.Contains(head[2], ":") {
			return Key{}, false, false
		}
		k = Key{Group: head[0], Resource: head[1], Shard: head[3], Cluster: head[4]}
		if head[2] != customResources {
			k.Resource += ":" + head[2]
		}
		fromKCP = true
	default:
		return Key{}, false, false
	}
	k.Namespace, k.Name = m.Namespace, m.Name
	if kcpcache.ValidateShardName(k.Shard) != nil || kcpcache.ValidateClusterName(k.Cluster) != nil {
		return Key{}, false, false
	}
	return k, fromKCP, true
}

// Which layout a key is in, as Classify says.
const (
	LayoutKCP         = "kcp"
	LayoutOurs        = "ours"
	LayoutCRD         = "crd"
	LayoutBookkeeping = "bookkeeping"
	LayoutNeither     = "neither"
)

// Classify says which layout key, holding value, is in: kcp's
// cache-server's (LayoutKCP), this server's (LayoutOurs), a CRD's, the same
// in both (LayoutCRD), this server's bookkeeping, or neither. Tools that
// check a move use it.
func Classify(prefix, key string, value []byte) string {
	segs, ok := segments(prefix, key)
	if !ok {
		return LayoutNeither
	}
	shape, _ := shapeOf(segs)
	switch shape {
	case shapeBookkeeping:
		return LayoutBookkeeping
	case shapeOther:
		return LayoutNeither
	}
	m, err := readMeta(value)
	if err != nil {
		return LayoutNeither
	}
	k, fromKCP, ok := parse(segs, m)
	switch {
	case !ok:
		return LayoutNeither
	case k.isCRD():
		return LayoutCRD
	case fromKCP:
		return LayoutKCP
	}
	return LayoutOurs
}
