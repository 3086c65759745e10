package options

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/kcp-cache/kcp-cache/cache/server/reload"
)

// AuthenticationOptions say how clients other than the admin prove who they
// are. A shard is user system:kcp:shard:<shard-name>: the CommonName of a
// client certificate signed by --client-ca-file, or a line of
// --token-auth-file. Names match kube-apiserver's and kcp's flags.
type AuthenticationOptions struct {
	ClientCert *genericoptions.ClientCertAuthenticationOptions
	// TokenAuthFile is a CSV file of static tokens in kube-apiserver's format:
	// token,user,uid[,"group1,group2"].
	TokenAuthFile string
}

// NewAuthenticationOptions returns options with no client CA and no tokens:
// only the admin kubeconfig works until an operator issues identities.
func NewAuthenticationOptions() *AuthenticationOptions {
	return &AuthenticationOptions{ClientCert: &genericoptions.ClientCertAuthenticationOptions{}}
}

// AddFlags adds --client-ca-file and --token-auth-file to fs.
func (o *AuthenticationOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ClientCert.ClientCA, "client-ca-file", o.ClientCert.ClientCA,
		"CA bundle for client certificates. A certificate it signs authenticates as its CommonName, with its Organizations as groups; shards use CN=system:kcp:shard:<shard-name>. Read again when it changes: certificates of a CA it no longer holds are refused from then on.")
	fs.StringVar(&o.TokenAuthFile, "token-auth-file", o.TokenAuthFile,
		"CSV file of static bearer tokens (token,user,uid[,\"group1,group2\"]), as kube-apiserver reads it; a shard's user is system:kcp:shard:<shard-name>. Read again every "+reload.Interval.String()+": a changed file is in force within that time, tokens it no longer holds are refused, and content that does not parse leaves the tokens as they were.")
}

// Validate checks that the named files exist.
func (o *AuthenticationOptions) Validate() []error {
	var errs []error
	for flag, path := range map[string]string{"--client-ca-file": o.ClientCert.ClientCA, "--token-auth-file": o.TokenAuthFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", flag, err))
		}
	}
	return errs
}
