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
	// to change the group's membership (plain HTTP).
	ClientURL string
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
		"With --storage=memory: every server of the cache's in-memory group, this one included, as NAME=http://HOST:PORT (the peer URL of its embedded etcd), comma-separated. The group is one etcd cluster: a write is acknowledged once a majority holds it, and a restarted server copies the data from the others. Peer traffic is plain HTTP: keep it on a private network. Replaces --embedded-etcd-peer-port.")
	fs.StringVar(&o.MemberName, "memory-member-name", o.MemberName,
		"This server's NAME in --memory-peers.")
	fs.StringVar(&o.ClientURL, "memory-client-url", o.ClientURL,
		"With --memory-peers: http://HOST:PORT where this server's embedded etcd serves the other servers of the group (plain HTTP), through which a restarted server rejoins. It listens there (on every interface when HOST is a name).")
}

// Enabled says whether the server is a member of a group.
func (o *MemoryGroupOptions) Enabled() bool {
	return len(o.Peers) > 0 || o.MemberName != "" || o.ClientURL != ""
}

// Members parses Peers.
func (o *MemoryGroupOptions) Members() ([]MemoryPeer, error) {
	var peers []MemoryPeer
	for _, raw := range o.Peers {
		name, u, ok := strings.Cut(raw, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--memory-peers: %q is not NAME=http://HOST:PORT", raw)
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
	names, urls := map[string]bool{}, map[string]bool{}
	for _, p := range peers {
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("--memory-peers: name %q appears twice", p.Name))
		}
		if urls[p.URL] {
			errs = append(errs, fmt.Errorf("--memory-peers: peer URL %s appears twice", p.URL))
		}
		names[p.Name], urls[p.URL] = true, true
		if err := plainHostPortURL(p.URL); err != nil {
			errs = append(errs, fmt.Errorf("--memory-peers: %s's %w", p.Name, err))
		}
	}
	if len(peers) > 0 && !names[o.MemberName] {
		errs = append(errs, fmt.Errorf("--memory-member-name %q must be one of the names in --memory-peers", o.MemberName))
	}
	if o.ClientURL == "" {
		errs = append(errs, fmt.Errorf("--memory-peers needs --memory-client-url, through which a restarted server rejoins the group"))
	} else if err := plainHostPortURL(o.ClientURL); err != nil {
		errs = append(errs, fmt.Errorf("--memory-client-url: %w", err))
	} else if urls[o.ClientURL] {
		errs = append(errs, fmt.Errorf("--memory-client-url %s is also a peer URL", o.ClientURL))
	}
	return errs
}

// plainHostPortURL accepts http://HOST:PORT only: the group's traffic is
// plain HTTP.
func plainHostPortURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("%q is not an http://HOST:PORT URL (the group speaks plain HTTP)", raw)
	}
	return nil
}
