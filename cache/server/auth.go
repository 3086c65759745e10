package server

import (
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	authnunion "k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	authzpath "k8s.io/apiserver/pkg/authorization/path"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authorization"
)

const (
	adminTokenFileName = "admin.token"
	// AdminUser is the user the admin kubeconfig authenticates as.
	AdminUser = "kcp-cache-admin"
)

// versionPath answers anonymous requests, like the health paths
// (cache.HealthPaths): clients probe it before they authenticate.
const versionPath = "/version"

// applyAuth sets explicit authentication and authorization. Both must be
// set: a nil authenticator or authorizer makes upstream skip the check.
//
// Authentication: the admin and loopback tokens (system:masters), then the
// operator's identities (--client-ca-file, --token-auth-file), then a
// host's authenticator, and anonymous only for health endpoints.
// Authorization: the cache's rules first, so that their denials are final
// for every identity (a host's authorizer cannot widen them), then health
// paths for anyone, then the host's authorizer, then a named default deny.
func applyAuth(c *genericapiserver.Config, auth *options.AuthenticationOptions, derived *derivedConfig, host *Host) error {
	authenticators := []authenticator.Request{authenticatorfactory.NewFromTokens(staticTokens(derived), nil)}
	identities, err := operatorIdentities(c, auth)
	if err != nil {
		return err
	}
	authenticators = append(authenticators, identities...)
	if host != nil && host.Authenticator != nil {
		authenticators = append(authenticators, host.Authenticator)
	}
	c.Authentication.Authenticator = authnunion.New(append(authenticators, anonymousHealthChecks)...)

	allowPaths := []string{versionPath}
	for _, p := range cache.HealthPaths {
		allowPaths = append(allowPaths, p, p+"/*")
	}
	pathAuthorizer, err := authzpath.NewAuthorizer(allowPaths)
	if err != nil {
		return err
	}
	authorization.RegisterMetrics()
	authorizers := []authzunion.NamedAuthorizer{
		{AuthorizerName: "cache", Authorizer: authorization.New()},
		{AuthorizerName: "health-paths", Authorizer: pathAuthorizer},
	}
	if host != nil && host.Authorizer != nil {
		authorizers = append(authorizers, authzunion.NamedAuthorizer{AuthorizerName: "host", Authorizer: host.Authorizer})
	}
	authorizers = append(authorizers, authzunion.NamedAuthorizer{AuthorizerName: "default-deny", Authorizer: authorization.NewDefaultDeny()})
	c.Authorization.Authorizer, err = authzunion.New(authorizers...)
	if err != nil {
		return fmt.Errorf("building the authorizer: %w", err)
	}
	genericapiserver.AuthorizeClientBearerToken(c.LoopbackClientConfig, &c.Authentication, &c.Authorization)
	return nil
}

// staticTokens are the tokens the server itself issues: the admin's and,
// for a mounted cache, the host shard's.
func staticTokens(derived *derivedConfig) map[string]*user.DefaultInfo {
	tokens := map[string]*user.DefaultInfo{
		derived.adminToken: {Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	}
	if derived.hostShardToken != "" {
		tokens[derived.hostShardToken] = &user.DefaultInfo{Name: cache.ShardUser(derived.hostShard), Groups: []string{user.AllAuthenticated}}
	}
	return tokens
}

// anonymousHealthChecks authenticates credential-less requests for health
// endpoints (and their individual checks, /readyz/<check>) as anonymous;
// any other request without credentials stays unauthenticated (401).
var anonymousHealthChecks = authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
	if !isHealthPath(req.URL.Path) {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
})

func isHealthPath(p string) bool {
	return p == versionPath || cache.IsHealthPath(p)
}

// loadOrCreateAdminToken keeps the admin token stable across restarts, so
// that a kubeconfig copied elsewhere keeps working.
func loadOrCreateAdminToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	} else if !os.IsNotExist(err) {
		return "", fmt.Errorf("reading admin token: %w", err)
	}
	token, err := randomToken()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing admin token: %w", err)
	}
	return token, nil
}
