package options

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/pflag"
)

// MemoryGroupOptions make several --storage=memory servers of one cache
// one group: their in-memory etcd members form one etcd cluster, so that
// every server holds every write, whichever server received it, and a
// restarted server refills from the others.
type MemoryGroupOptions struct {
	// Peers is the whole group, this server included, as NAME=PEER_URL
	// (etcd's initial cluster). Empty: no group.
	Peers []string
	// MemberName names this server's member among Peers.
	MemberName string
	// ClientURL is where this server's member serves the others' requests
	// to change the group's membership.
	ClientURL string
	// PeerListenURL is where this server's member listens for its peers
	// when they reach its peer URL in Peers through something in between
	// (a NAT, a Service, a test's proxy). Empty: on its peer URL.
	PeerListenURL string
	// SecretFile holds the group's secret, the same at every server: the
	// group's traffic is TLS with certificates of a CA derived from it.
	SecretFile string
	// Plaintext makes the group speak plain HTTP, without authentication,
	// instead.
	Plaintext bool
}

// MemoryPeer is one member of the group: its name and peer URL.
type MemoryPeer struct {
	Name string
	URL  string
}

// NewMemoryGroupOptions returns options without a group.
func NewMemoryGroupOptions() *MemoryGroupOptions { return &MemoryGroupOptions{} }

// AddFlags adds the group's flags to fs.
func (o *MemoryGroupOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.Peers, "memory-peers", o.Peers,
		"With --storage=memory: every server of the cache's in-memory group, this one included, as NAME=https://HOST:PORT (the peer URL of its embedded etcd; http:// with --memory-peer-plaintext), comma-separated. The group is one etcd cluster: a write is acknowledged once a majority holds it, and a restarted server copies the data from the others. Replaces --embedded-etcd-peer-port.")
	fs.StringVar(&o.MemberName, "memory-member-name", o.MemberName,
		"This server's NAME in --memory-peers.")
	fs.StringVar(&o.ClientURL, "memory-client-url", o.ClientURL,
		"With --memory-peers: https://HOST:PORT (http:// with --memory-peer-plaintext) where this server's embedded etcd serves the other servers of the group, through which a restarted server rejoins. It listens there (on every interface when HOST is a name).")
	fs.StringVar(&o.PeerListenURL, "memory-peer-listen-url", o.PeerListenURL,
		"With --memory-peers: https://HOST:PORT (http:// with --memory-peer-plaintext) where this server's embedded etcd listens for the other servers when they reach its peer URL in --memory-peers through something in between (a NAT, a Service); empty: on its peer URL.")
	fs.StringVar(&o.SecretFile, "memory-group-secret-file", o.SecretFile,
		"With --memory-peers: a file holding the group's secret (at least 32 bytes, e.g. from head -c 32 /dev/urandom), the same at every server of the group. Each server derives the group's CA from it and issues its own certificate: the group's traffic (peer URLs and --memory-client-url) is TLS, and only servers holding the secret take part.")
	fs.BoolVar(&o.Plaintext, "memory-peer-plaintext", o.Plaintext,
		"With --memory-peers, instead of --memory-group-secret-file: the group speaks plain HTTP without authentication, and anyone who reaches its URLs can read and change the cache's data. Only on a network nobody else reaches.")
}

// Enabled says whether the server is a member of a group.
func (o *MemoryGroupOptions) Enabled() bool {
	return len(o.Peers) > 0 || o.MemberName != "" || o.ClientURL != "" || o.PeerListenURL != "" || o.SecretFile != "" || o.Plaintext
}

// scheme is the scheme of the group's URLs.
func (o *MemoryGroupOptions) scheme() string {
	if o.Plaintext {
		return "http"
	}
	return "https"
}

// Members parses Peers.
func (o *MemoryGroupOptions) Members() ([]MemoryPeer, error) {
	var peers []MemoryPeer
	for _, raw := range o.Peers {
		name, u, ok := strings.Cut(raw, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--memory-peers: %q is not NAME=%s://HOST:PORT", raw, o.scheme())
		}
		peers = append(peers, MemoryPeer{Name: name, URL: u})
	}
	return peers, nil
}

// Validate checks the group against the storage: a group is of in-memory
// embedded members only.
func (o *MemoryGroupOptions) Validate(storage string) []error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	if storage != StorageMemory {
		errs = append(errs, fmt.Errorf("--memory-peers, --memory-member-name and --memory-client-url need --storage=memory"))
	}
	peers, err := o.Members()
	if err != nil {
		return append(errs, err)
	}
	if len(peers) == 0 {
		errs = append(errs, fmt.Errorf("--memory-member-name and --memory-client-url need --memory-peers"))
	}
	switch {
	case o.SecretFile == "" && !o.Plaintext:
		errs = append(errs, fmt.Errorf("--memory-peers needs --memory-group-secret-file (TLS between the servers), or --memory-peer-plaintext to speak plain HTTP without authentication"))
	case o.SecretFile != "" && o.Plaintext:
		errs = append(errs, fmt.Errorf("--memory-group-secret-file and --memory-peer-plaintext exclude each other"))
	}
	names, urls := map[string]bool{}, map[string]bool{}
	for _, p := range peers {
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("--memory-peers: name %q appears twice", p.Name))
		}
		if urls[p.URL] {
			errs = append(errs, fmt.Errorf("--memory-peers: peer URL %s appears twice", p.URL))
		}
		names[p.Name], urls[p.URL] = true, true
		if err := hostPortURL(p.URL, o.scheme()); err != nil {
			errs = append(errs, fmt.Errorf("--memory-peers: %s's %w", p.Name, err))
		}
	}
	if len(peers) > 0 && !names[o.MemberName] {
		errs = append(errs, fmt.Errorf("--memory-member-name %q must be one of the names in --memory-peers", o.MemberName))
	}
	if o.ClientURL == "" {
		errs = append(errs, fmt.Errorf("--memory-peers needs --memory-client-url, through which a restarted server rejoins the group"))
	} else if err := hostPortURL(o.ClientURL, o.scheme()); err != nil {
		errs = append(errs, fmt.Errorf("--memory-client-url: %w", err))
	} else if urls[o.ClientURL] {
		errs = append(errs, fmt.Errorf("--memory-client-url %s is also a peer URL", o.ClientURL))
	}
	if o.PeerListenURL != "" {
		if err := hostPortURL(o.PeerListenURL, o.scheme()); err != nil {
			errs = append(errs, fmt.Errorf("--memory-peer-listen-url: %w", err))
		}
	}
	return errs
}

// hostPortURL accepts SCHEME://HOST:PORT only: https, or http for a group
// that speaks plain HTTP.
func hostPortURL(raw, scheme string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != scheme || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%q is not a %s://HOST:PORT URL", raw, scheme)
	}
	return nil
}
