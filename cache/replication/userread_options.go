package replication

import (
	"fmt"
	"strings"

	"github.com/kcp-dev/logicalcluster/v3"
	"github.com/spf13/pflag"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// UserReadOptions are the command-line settings of the user-read partition:
// which workspaces are marked, and which types are pushed for them. Nothing
// is pushed unless a workspace or a workspace type is given.
type UserReadOptions struct {
	// Workspaces are workspace paths (Marking.Paths).
	Workspaces []string
	// WorkspaceTypes are workspace types (Marking.Types).
	WorkspaceTypes []string
	// Resources name the pushed types as "resource.group" (Type.Name),
	// among the served types (kcpcache.ServedTypes).
	Resources []string
}

// NewUserReadOptions returns the defaults: nothing marked, the default
// user-read types.
func NewUserReadOptions() *UserReadOptions {
	return &UserReadOptions{Resources: kcpcache.TypeNames(kcpcache.UserReadTypes())}
}

// AddFlags adds the options' flags to fs.
func (o *UserReadOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Workspaces, "user-read-workspaces", o.Workspaces,
		"Workspaces whose objects of --user-read-resources are pushed into the shard's user-read partition <shard-name>"+kcpcache.UserReadSuffix+
			" of the cache, by path (root, root:org-a) or logical cluster name: what users read there, for a read-only fallback while the shard is down. "+
			"A workspace's child Workspaces live in it, so marking root pushes the list of organizations. The RBAC of "+kcpcache.UserReadAdminCluster+
			" (the shard's bootstrap policy) is pushed whenever anything is marked. Empty, with --user-read-workspace-types empty, pushes nothing.")
	fs.StringSliceVar(&o.WorkspaceTypes, "user-read-workspace-types", o.WorkspaceTypes,
		"Workspace types whose every workspace is marked as with --user-read-workspaces, as kcp records them (root:organization).")
	fs.StringSliceVar(&o.Resources, "user-read-resources", o.Resources,
		"Types pushed for every marked workspace, as resource.group; the cache must serve them (--bootstrap-types).")
}

// Enabled reports whether anything is marked.
func (o *UserReadOptions) Enabled() bool { return !o.marking().Empty() }

func (o *UserReadOptions) marking() Marking {
	return Marking{Paths: nonEmpty(o.Workspaces), Types: nonEmpty(o.WorkspaceTypes)}
}

// Validate reports every invalid option.
func (o *UserReadOptions) Validate() []error {
	var errs []error
	for _, p := range nonEmpty(o.Workspaces) {
		if !logicalcluster.NewPath(p).IsValid() {
			errs = append(errs, fmt.Errorf("--user-read-workspaces: %q is neither a workspace path nor a logical cluster name", p))
		}
	}
	for _, t := range nonEmpty(o.WorkspaceTypes) {
		if !logicalcluster.NewPath(t).IsValid() || !strings.Contains(t, ":") {
			errs = append(errs, fmt.Errorf("--user-read-workspace-types: %q is not a workspace type as kcp records it, <workspace path>:<type name> (root:organization)", t))
		}
	}
	if _, err := o.types(); err != nil {
		errs = append(errs, fmt.Errorf("--user-read-resources: %w", err))
	}
	return errs
}

func (o *UserReadOptions) types() ([]kcpcache.Type, error) {
	names := nonEmpty(o.Resources)
	if len(names) == 0 {
		return nil, fmt.Errorf("no type given")
	}
	return kcpcache.KcpTypesNamed(names)
}

// ApplyTo sets cfg's marking and types.
func (o *UserReadOptions) ApplyTo(cfg *UserReadConfig) error {
	types, err := o.types()
	if err != nil {
		return fmt.Errorf("--user-read-resources: %w", err)
	}
	cfg.Marking, cfg.Types = o.marking(), types
	return nil
}

// nonEmpty drops empty and blank entries (a flag given as "").
func nonEmpty(in []string) []string {
	var out []string
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
