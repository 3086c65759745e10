package cache

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/kcp-dev/logicalcluster/v3"
)

// Wildcard in the shard or the cluster position of a scope means "every one".
// A scope with a wildcard is read-only.
const Wildcard = "*"

const (
	// SystemShard is the shard of the reserved partition that requests without
	// the /services/cache prefix are served in: CRD management, the loopback
	// client, internal controllers. The name matches kcp's cache server.
	SystemShard = "system:cache:server"

	// SystemCluster is the cluster of the reserved system partition.
	SystemCluster = "system:system-crds"

	// maxShardNameLength keeps a shard name usable as one key segment and as a
	// label value in kcp (63 minus room for a prefix, as kcp does).
	maxShardNameLength = 61
)

// SystemScope is the scope of requests that do not name a partition.
var SystemScope = Scope{Shard: SystemShard, Cluster: SystemCluster}

var (
	shardNameRegExp   = regexp.MustCompile(`^[a-z0-9]([a-z0-9:-]*[a-z0-9])?$`)
	clusterNameRegExp = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// Scope is the partition a request addresses: one shard and one logical
// cluster, either of which may be Wildcard.
type Scope struct {
	Shard   string
	Cluster string
}

// NewScope builds a scope and validates both names, accepting wildcards.
func NewScope(shard, cluster string) (Scope, error) {
	s := Scope{Shard: shard, Cluster: cluster}
	if err := s.Validate(); err != nil {
		return Scope{}, err
	}
	return s, nil
}

// Validate reports whether both segments are valid names or wildcards.
func (s Scope) Validate() error {
	if s.Shard != Wildcard {
		if err := ValidateShardName(s.Shard); err != nil {
			return err
		}
	}
	if s.Cluster != Wildcard {
		if err := ValidateClusterName(s.Cluster); err != nil {
			return err
		}
	}
	return nil
}

// IsWildcard is true when the scope spans more than one partition; such a
// scope can be listed and watched but never written or read by name.
func (s Scope) IsWildcard() bool {
	return s.Shard == Wildcard || s.Cluster == Wildcard
}

// IsSystem is true for the reserved partition of unprefixed requests.
func (s Scope) IsSystem() bool {
	return s == SystemScope
}

// String renders the scope as "shard/cluster".
func (s Scope) String() string {
	return s.Shard + "/" + s.Cluster
}

// ValidateShardName checks that name can be a shard: lowercase alphanumerics,
// '-' and ':', at most 61 characters, starting and ending alphanumeric.
func ValidateShardName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("shard name must not be empty")
	case len(name) > maxShardNameLength:
		return fmt.Errorf("shard name %q is longer than %d characters", name, maxShardNameLength)
	case !shardNameRegExp.MatchString(name):
		return fmt.Errorf("shard name %q must consist of lowercase alphanumerics, '-' and ':', and start and end with an alphanumeric", name)
	}
	return nil
}

// ValidateClusterName checks that name is a logical cluster name (not a
// workspace path): what logicalcluster.Name.IsValid accepts, where a
// "system:" name must itself be followed by a valid name, so that no value can
// inject a key separator.
func ValidateClusterName(name string) error {
	if name == "" {
		return fmt.Errorf("cluster name must not be empty")
	}
	rest, isSystem := strings.CutPrefix(name, "system:")
	if !logicalcluster.Name(name).IsValid() || !clusterNameRegExp.MatchString(rest) {
		if !isSystem && strings.Contains(name, ":") {
			return fmt.Errorf("cluster %q looks like a workspace path; the cache is addressed by logical cluster name", name)
		}
		return fmt.Errorf("cluster name %q is not a valid logical cluster name", name)
	}
	return nil
}
