package authentication

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	// AdminTokenFileName is the file below the root directory that keeps
	// the admin token across restarts.
	AdminTokenFileName = "admin.token"
	// AdminUser is the user the admin kubeconfig authenticates as.
	AdminUser = "kcp-cache-admin"
)

// VersionPath answers anonymous requests, like the health paths
// (kcpcache.HealthPaths): clients probe it before they authenticate.
const VersionPath = "/version"

// PublicPaths are the paths anyone may request, credentials or not: the
// version and every health endpoint with its individual checks.
func PublicPaths() []string {
	paths := []string{VersionPath}
	for _, p := range kcpcache.HealthPaths {
		paths = append(paths, p, p+"/*")
	}
	return paths
}

// StaticTokens are the tokens the server itself issues: the admin's and,
// for a mounted cache whose host names its shard, the host shard's.
type StaticTokens struct {
	Admin string
	// HostShard and HostShardToken identify the host's own shard; both
	// empty without one.
	HostShard, HostShardToken string
}

// Authenticator authenticates the tokens.
func (t StaticTokens) Authenticator() authenticator.Request {
	tokens := map[string]*user.DefaultInfo{
		t.Admin: {Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	}
	if t.HostShardToken != "" {
		tokens[t.HostShardToken] = &user.DefaultInfo{Name: kcpcache.ShardUser(t.HostShard), Groups: []string{user.AllAuthenticated}}
	}
	return authenticatorfactory.NewFromTokens(tokens, nil)
}

// AnonymousWhereAllowed authenticates credential-less requests as anonymous
// where paths lets anyone in: the server's path authorizer of PublicPaths
// and --authorization-always-allow-paths. Any other request without
// credentials stays unauthenticated (401). The same authorizer decides both,
// so that what anonymous clients may reach and what anyone is allowed
// cannot drift apart.
func AnonymousWhereAllowed(paths authorizer.Authorizer) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		d, _, err := paths.Authorize(req.Context(), authorizer.AttributesRecord{Path: req.URL.Path, ResourceRequest: false})
		if err != nil || d != authorizer.DecisionAllow {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
	})
}

// LoadOrCreateAdminToken keeps the admin token stable across restarts, so
// that a kubeconfig copied elsewhere keeps working. Without a path (no root
// directory) the token lives only as long as the process.
func LoadOrCreateAdminToken(path string) (string, error) {
	if path == "" {
		return RandomToken()
	}
	if b, err := os.ReadFile(path); err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	} else if !os.IsNotExist(err) {
		return "", fmt.Errorf("reading admin token: %w", err)
	}
	token, err := RandomToken()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing admin token: %w", err)
	}
	return token, nil
}

// RandomToken returns a new bearer token: 32 random bytes in hex.
func RandomToken() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return hex.EncodeToString(raw), nil
}
