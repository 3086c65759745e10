package server

import (
	"fmt"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	authnunion "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authzpath "k8s.io/apiserver/pkg/authorization/path"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authentication"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
)

// applyAuth sets explicit authentication and authorization. Both must be
// set: a nil authenticator or authorizer makes upstream skip the check.
//
// Authentication: the admin and loopback tokens (system:masters), then the
// operator's identities (--client-ca-file, --token-auth-file), then a
// host's authenticator, and anonymous only where anyone may go: the health
// endpoints, /version and --authorization-always-allow-paths.
// Authorization: the cache's rules first, so that their denials are final
// for every identity (a host's authorizer cannot widen them), then those
// paths for anyone, then the host's authorizer, then a named default deny.
func applyAuth(c *genericapiserver.Config, auth *options.AuthenticationOptions, derived *derivedConfig, host *Host) error {
	tokens := authentication.StaticTokens{Admin: derived.adminToken, HostShard: derived.hostShard, HostShardToken: derived.hostShardToken}
	authenticators := []authenticator.Request{tokens.Authenticator()}
	identities, err := authentication.OperatorIdentities(c, auth)
	if err != nil {
		return err
	}
	authenticators = append(authenticators, identities.Authenticators...)
	derived.reloads = append(derived.reloads, identities.Reloads...)
	if host != nil && host.Authenticator != nil {
		authenticators = append(authenticators, host.Authenticator)
	}
	pathAuthorizer, err := authzpath.NewAuthorizer(append(authentication.PublicPaths(), derived.alwaysAllowPaths...))
	if err != nil {
		return fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	c.Authentication.Authenticator = authnunion.New(append(authenticators, authentication.AnonymousWhereAllowed(pathAuthorizer))...)
	// Order matters: the cache's own rules first, then the health paths, then
	// the host's authorizer (mounted), and a final deny with a reason.
	authorizers := []authorizer.Authorizer{authorization.New(), pathAuthorizer}
	if host != nil && host.Authorizer != nil {
		authorizers = append(authorizers, host.Authorizer)
	}
	authorizers = append(authorizers, authorization.NewDefaultDeny())
	c.Authorization.Authorizer = authzunion.New(authorizers...)
	genericapiserver.AuthorizeClientBearerToken(c.LoopbackClientConfig, &c.Authentication, &c.Authorization)
	return nil
}
