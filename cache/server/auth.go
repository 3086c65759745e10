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
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authzpath "k8s.io/apiserver/pkg/authorization/path"
	authzunion "k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-cache/kcp-cache/cache"
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
// The admin token and the loopback token map to system:masters; anonymous
// requests may reach only the health endpoints; a host's authenticator and
// authorizer, when given, come last.
func applyAuth(c *genericapiserver.Config, adminToken string, host *Host) error {
	tokens := authenticatorfactory.NewFromTokens(map[string]*user.DefaultInfo{
		adminToken: {Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	}, nil)
	authenticators := []authenticator.Request{tokens}
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
	authorizers := []authzunion.NamedAuthorizer{
		{AuthorizerName: "privileged-groups", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		{AuthorizerName: "health-paths", Authorizer: pathAuthorizer},
	}
	if host != nil && host.Authorizer != nil {
		authorizers = append(authorizers, authzunion.NamedAuthorizer{AuthorizerName: "host", Authorizer: host.Authorizer})
	}
	c.Authorization.Authorizer, err = authzunion.New(authorizers...)
	if err != nil {
		return err
	}
	genericapiserver.AuthorizeClientBearerToken(c.LoopbackClientConfig, &c.Authentication, &c.Authorization)
	return nil
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
