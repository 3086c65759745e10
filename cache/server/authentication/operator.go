package authentication

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/kcp-cache/kcp-cache/cache/options"
)

// Identities are the operator's identities: how they authenticate, and the
// loops that keep the files they come from current.
type Identities struct {
	Authenticators []authenticator.Request
	// Reloads each follow a file until their context ends; the server runs
	// them with its own loops.
	Reloads []func(context.Context)
}

// OperatorIdentities returns the authenticators for the identities an
// operator issues: client certificates signed by --client-ca-file (user =
// CommonName, groups = Organizations) and the static tokens of
// --token-auth-file. Both add system:authenticated, as kube-apiserver does.
// A standalone server asks TLS clients for a certificate when a client CA
// is set; a mounted cache relies on its host's TLS configuration.
//
// Both files are followed while the server runs. The client CA is
// upstream's dynamiccertificates.DynamicFileCAContent (from
// ClientCertAuthenticationOptions.GetClientCAContentProvider), which the
// x509 authenticator asks for its verify options at every request
// (x509request.NewDynamic). Its controller (fsnotify, and a full read every
// dynamiccertificates.FileRefreshDuration) is run by upstream's
// SecureServingInfo.Serve for a standalone server, once ApplyClientCert
// made it the listener's client CA, as kube-apiserver's is; a mounted cache
// has no listener of its own, so the controller is one of Reloads. The
// token file is a TokenFile, polled (package reload).
func OperatorIdentities(c *genericapiserver.Config, auth *options.AuthenticationOptions) (Identities, error) {
	var out Identities
	if auth == nil {
		return out, nil
	}
	ca, err := auth.ClientCert.GetClientCAContentProvider()
	if err != nil {
		return Identities{}, fmt.Errorf("loading --client-ca-file: %w", err)
	}
	if ca != nil {
		if c.SecureServing != nil {
			if err := c.Authentication.ApplyClientCert(ca, c.SecureServing); err != nil {
				return Identities{}, err
			}
		} else if controller, ok := ca.(dynamiccertificates.ControllerRunner); ok {
			out.Reloads = append(out.Reloads, func(ctx context.Context) { controller.Run(ctx, 1) })
		}
		out.Authenticators = append(out.Authenticators, group.NewAuthenticatedGroupAdder(x509request.NewDynamic(ca.VerifyOptions, x509request.CommonNameUserConversion)))
	}
	if auth.TokenAuthFile != "" {
		tokens, watcher, err := NewTokenFile(auth.TokenAuthFile)
		if err != nil {
			return Identities{}, fmt.Errorf("loading --token-auth-file: %w", err)
		}
		out.Reloads = append(out.Reloads, watcher.Run)
		out.Authenticators = append(out.Authenticators, group.NewAuthenticatedGroupAdder(bearertoken.New(tokens)))
	}
	return out, nil
}
