package authentication

import (
	"fmt"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kcp-cache/kcp-cache/cache/options"
)

// OperatorIdentities returns the authenticators for the identities an
// operator issues: client certificates signed by --client-ca-file (user =
// CommonName, groups = Organizations) and the static tokens of
// --token-auth-file. Both add system:authenticated, as kube-apiserver does.
// A standalone server asks TLS clients for a certificate when a client CA
// is set; a mounted cache relies on its host's TLS configuration.
func OperatorIdentities(c *genericapiserver.Config, auth *options.AuthenticationOptions) ([]authenticator.Request, error) {
	if auth == nil {
		return nil, nil
	}
	var out []authenticator.Request
	ca, err := auth.ClientCert.GetClientCAContentProvider()
	if err != nil {
		return nil, fmt.Errorf("loading --client-ca-file: %w", err)
	}
	if ca != nil {
		if err := c.Authentication.ApplyClientCert(ca, c.SecureServing); err != nil {
			return nil, err
		}
		out = append(out, group.NewAuthenticatedGroupAdder(x509request.NewDynamic(ca.VerifyOptions, x509request.CommonNameUserConversion)))
	}
	if auth.TokenAuthFile != "" {
		tokens, err := tokenfile.NewCSV(auth.TokenAuthFile)
		if err != nil {
			return nil, fmt.Errorf("loading --token-auth-file: %w", err)
		}
		out = append(out, group.NewAuthenticatedGroupAdder(bearertoken.New(tokens)))
	}
	return out, nil
}
