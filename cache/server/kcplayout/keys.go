package kcplayout

import (
	"slices"
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

// key joins prefix, the group (none for the core group), the resource's
// segments and the object's partition, namespace and name.
func (k Key) key(prefix, group string, resourceSegments ...string) string {
	segs := []string{strings.TrimSuffix(prefix, "/")}
	if group != "" {
		segs = append(segs, group)
	}
	segs = append(segs, resourceSegments...)
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
	// shapeOurs is this server's layout, whatever the value holds.
	shapeOurs
	// shapeUnsure is kcp's layout, or one of ours with as many segments:
	// the value's namespace decides (parse).
	shapeUnsure
)

// shapeOf classifies a key by its segments below the prefix, without its
// value. The layouts, by number of segments (<x> is "customresources" or
// an identity, <id> an identity, [core] a resource of the core group, which
// has no group segment):
//
//	4  ours [core] <r>:<id>/<s>/<c>/<name>
//	5  ours <g>/<r>/<s>/<c>/<name>, ours [core] <r>:<id>/<s>/<c>/<ns>/<name>,
//	   kcp [core] <r>/<id>/<s>/<c>/<name>, CRDs of both
//	6  ours <g>/<r>/<s>/<c>/<ns>/<name>, kcp <g>/<r>/<x>/<s>/<c>/<name>,
//	   kcp [core] <r>/<id>/<s>/<c>/<ns>/<name>
//	7  kcp <g>/<r>/<x>/<s>/<c>/<ns>/<name>
//
// An identity is a SHA-256 in hex, 64 characters, longer than any resource
// name (a DNS label, at most 63): five segments whose second is an identity
// are kcp's; six whose second carries an identity (":") are ours. The
// bulk of a cache, cluster-scoped objects of ours, needs no value read.
func shapeOf(segs []string) keyShape {
	n := len(segs)
	switch {
	case n > 0 && segs[0] == bookkeeping:
		return shapeBookkeeping
	case n < 4 || n > 7 || slices.Contains(segs, ""):
		return shapeOther
	case segs[0] == crdGroup && segs[1] == crdResource:
		if n != 5 {
			return shapeOther
		}
		return shapeCRD
	case n == 4:
		if !strings.Contains(segs[0], ":") {
			return shapeOther
		}
		return shapeOurs
	case n == 5 && !isIdentity(segs[1]), n == 6 && strings.Contains(segs[1], ":"):
		return shapeOurs
	}
	return shapeUnsure
}

// isIdentity reports whether s is an identity as kcp makes them: the hex
// SHA-256 of an APIExport's or a CachedResource's secret.
func isIdentity(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parse reads the object's Key from its key and the name and namespace its
// value holds, in whichever layout they agree with; ok is false when they
// agree with neither, or a segment could not be a shard or a cluster.
// fromKCP tells which layout matched; both do for a CRD.
func parse(segs []string, m meta) (k Key, fromKCP, ok bool) {
	shape := shapeOf(segs)
	n := len(segs)
	tail := 1
	if m.Namespace != "" {
		tail = 2
	}
	if shape == shapeOther || shape == shapeBookkeeping || n <= tail || segs[n-1] != m.Name || (m.Namespace != "" && segs[n-2] != m.Namespace) {
		return Key{}, false, false
	}
	head := segs[:n-tail]
	colon := func(s string) bool { return strings.Contains(s, ":") }
	switch {
	case len(head) == 3 && colon(head[0]): // ours, core: <r>:<id>/<s>/<c>
		k = Key{Resource: head[0], Shard: head[1], Cluster: head[2]}
	case len(head) == 4 && isIdentity(head[1]) && !colon(head[0]): // kcp, core: <r>/<id>/<s>/<c>
		k = Key{Resource: head[0] + ":" + head[1], Shard: head[2], Cluster: head[3]}
		fromKCP = true
	case len(head) == 4 && !colon(head[0]): // ours, or a CRD of either: <g>/<r>/<s>/<c>
		k = Key{Group: head[0], Resource: head[1], Shard: head[2], Cluster: head[3]}
		fromKCP = k.isCRD()
	case len(head) == 5 && !colon(head[0]) && !colon(head[1]) && !colon(head[2]): // kcp: <g>/<r>/<x>/<s>/<c>
		k = Key{Group: head[0], Resource: head[1], Shard: head[3], Cluster: head[4]}
		if k.isCRD() {
			return Key{}, false, false
		}
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
	switch shapeOf(segs) {
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
