package options

import (
	"fmt"

	"github.com/spf13/pflag"
)

// EmbeddedEtcdOptions configure the etcd member that runs inside the cache
// server when no --etcd-servers are given.
type EmbeddedEtcdOptions struct {
	// Enabled is derived by Complete: true when no external etcd is configured.
	Enabled bool

	Directory  string
	ClientPort int
	PeerPort   int
}

// NewEmbeddedEtcdOptions returns kcp-compatible defaults.
func NewEmbeddedEtcdOptions() *EmbeddedEtcdOptions {
	return &EmbeddedEtcdOptions{ClientPort: 2379, PeerPort: 2380}
}

// AddFlags adds the embedded etcd's flags to fs.
func (o *EmbeddedEtcdOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Directory, "embedded-etcd-directory", o.Directory,
		"Directory of the embedded etcd's data. Relative to --root-directory unless absolute; defaults to <root-directory>/etcd-server. Used only when --etcd-servers is empty.")
	fs.IntVar(&o.ClientPort, "embedded-etcd-client-port", o.ClientPort, "Loopback port the embedded etcd serves clients on; 0 picks a free port.")
	fs.IntVar(&o.PeerPort, "embedded-etcd-peer-port", o.PeerPort, "Loopback port the embedded etcd uses for peer traffic; 0 picks a free port.")
}

// Validate checks the ports.
func (o *EmbeddedEtcdOptions) Validate() []error {
	var errs []error
	for name, port := range map[string]int{"--embedded-etcd-client-port": o.ClientPort, "--embedded-etcd-peer-port": o.PeerPort} {
		if port < 0 || port > 65535 {
			errs = append(errs, fmt.Errorf("%s must be between 0 and 65535, got %d", name, port))
		}
	}
	if o.ClientPort != 0 && o.ClientPort == o.PeerPort {
		errs = append(errs, fmt.Errorf("--embedded-etcd-client-port and --embedded-etcd-peer-port must differ"))
	}
	return errs
}
