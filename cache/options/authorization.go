package options

import (
	"fmt"

	"github.com/spf13/pflag"
	authzpath "k8s.io/apiserver/pkg/authorization/path"
)

// AuthorizationOptions widen who may reach non-resource paths. The cache's
// own rules (cache/server/authorization) decide everything else and are not
// configurable.
type AuthorizationOptions struct {
	// AlwaysAllowPaths are non-resource paths (a trailing * matches a
	// prefix) that anyone may GET, anonymous clients included, as with kcp's
	// cache-server flag of the same name. The health paths and /version are
	// always allowed.
	AlwaysAllowPaths []string
}

// NewAuthorizationOptions returns options that allow only the built-in paths.
func NewAuthorizationOptions() *AuthorizationOptions {
	return &AuthorizationOptions{}
}

// AddFlags adds --authorization-always-allow-paths to fs.
func (o *AuthorizationOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.AlwaysAllowPaths, "authorization-always-allow-paths", o.AlwaysAllowPaths,
		"Non-resource HTTP paths anyone may reach without credentials, in addition to /healthz, /livez, /readyz (and their checks) and /version, which always are; a trailing * matches a prefix, e.g. /metrics or /debug/*. Resource requests (objects) are never affected.")
}

// Validate checks the paths' syntax as the upstream path authorizer does.
func (o *AuthorizationOptions) Validate() []error {
	if _, err := authzpath.NewAuthorizer(o.AlwaysAllowPaths); err != nil {
		return []error{fmt.Errorf("--authorization-always-allow-paths: %w", err)}
	}
	return nil
}
