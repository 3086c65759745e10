package options

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/reload"
)

// DefaultFreshnessWait is --freshness-wait's default: how long a consistent
// read of a mirrored partition waits for the mirror, a question to the
// peers about a home claim for their answers, and a write of a shard being
// adopted for its claim, before each is given up (503).
const DefaultFreshnessWait = 5 * time.Second

// HierarchyOptions make the server one cache of a hierarchy: a named cache
// that mirrors the partitions whose home is one of its peers.
type HierarchyOptions struct {
	// CacheName is this cache's name, required with peers: shards whose
	// home it is are known to the peers by it, and it authenticates to
	// them as kcpcache.PeerUser(CacheName).
	CacheName string
	// Peers are NAME=KUBECONFIG pairs: each peer cache's name and a
	// kubeconfig (its current context) that reaches it.
	Peers []string
	// PeersKubeconfig is one kubeconfig holding every peer: each context is
	// a peer, named by the context's name.
	PeersKubeconfig string
	// FreshnessWait bounds how long a consistent read of a mirrored
	// partition waits for the mirror to catch up with the home, how long
	// the peers are asked about a home claim, and how long a write of a
	// shard being adopted waits for its claim.
	FreshnessWait time.Duration
	// AdoptShards are shards whose home moves to this cache: it claims
	// them at a higher generation (once) and accepts their writes; their
	// old home, reading the higher claim, turns into a mirror of them.
	AdoptShards []string
	// PassOn are PEER=RESOURCE[,RESOURCE...] entries: to that peer this
	// cache passes on only those resources ("<resource>.<group>"), of its
	// own partitions and of every home it relays.
	PassOn []string
}

// NewHierarchyOptions returns options for a cache without peers.
func NewHierarchyOptions() *HierarchyOptions {
	return &HierarchyOptions{FreshnessWait: DefaultFreshnessWait}
}

// AddFlags adds the flags to fs.
func (o *HierarchyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CacheName, "cache-name", o.CacheName,
		"This cache's name in a hierarchy of caches (a DNS label, e.g. the region). Required with --peer or --peers-kubeconfig. Answers carry it in the Kcp-Cache-Name header.")
	fs.StringArrayVar(&o.Peers, "peer", o.Peers,
		"A peer cache to mirror, as NAME=KUBECONFIG (repeatable): the partitions whose home is that cache are pulled from it and served here. The kubeconfig's current context reaches the peer; its credentials must authenticate as system:kcp:cache:<--cache-name>. The kubeconfig and the files it names are read again every "+reload.Interval.String()+": new credentials (token, client certificate, CA) are used without a restart; a new server address, or another set of peers, takes a restart.")
	fs.StringVar(&o.PeersKubeconfig, "peers-kubeconfig", o.PeersKubeconfig,
		"A kubeconfig in which every context is a peer cache to mirror, named by the context's name; combines with --peer. Its credentials are read again as --peer's are; contexts added or removed take a restart.")
	fs.StringSliceVar(&o.AdoptShards, "adopt-shard", o.AdoptShards,
		"Shards whose home moves to this cache (repeatable): it claims them with a generation above any it or a reachable peer knows (once per cache and shard: a restart with the same flag does not claim again) and accepts their writes; the shard then pushes its partition here in full, and the old home, reading the higher claim, gives the shard up and mirrors it from this cache. Also resolves a conflict (two claims of one generation).")
	fs.StringArrayVar(&o.PassOn, "pass-on", o.PassOn,
		"PEER=RESOURCE[,RESOURCE...] (repeatable; resources as <resource>.<group>, e.g. apiexports.apis.kcp.io): to that peer, this cache passes on only these resources of its own partitions and of every home it relays; the peer takes only them (copies it already held of the others stay in its storage), and answers reads of the others 503 NotPassedOn. A peer not named gets everything.")
	fs.DurationVar(&o.FreshnessWait, "freshness-wait", o.FreshnessWait,
		"How long this cache waits on its peers before it answers 503: a consistent read (no resourceVersion) of a partition whose home is a peer waits this long for this cache's mirror to reach the home's revision; every question to the peers about a shard's home claim (before this cache first claims a shard, and when it learns a claim from them) waits this long for their answers; a write of a shard being adopted (--adopt-shard) waits this long for the claim to be made.")
}

// Validate checks names and files without reading the peers' kubeconfigs
// more than needed to list their contexts.
func (o *HierarchyOptions) Validate() []error {
	var errs []error
	if o.CacheName != "" {
		if err := kcpcache.ValidateCacheName(o.CacheName); err != nil {
			errs = append(errs, fmt.Errorf("--cache-name: %w", err))
		}
	}
	for _, s := range o.AdoptShards {
		if err := kcpcache.ValidateShardName(s); err != nil {
			errs = append(errs, fmt.Errorf("--adopt-shard %q: %w", s, err))
		}
	}
	if len(o.AdoptShards) > 0 && o.CacheName == "" {
		errs = append(errs, fmt.Errorf("--adopt-shard needs --cache-name: the shard's new home is known to the peers by it"))
	}
	if o.FreshnessWait <= 0 {
		errs = append(errs, fmt.Errorf("--freshness-wait must be positive, got %s", o.FreshnessWait))
	}
	peers, err := o.peerFiles()
	if err != nil {
		errs = append(errs, err)
	}
	passOn, err := o.PassOnResources()
	if err != nil {
		errs = append(errs, err)
	}
	for peer := range passOn {
		if _, ok := peers[peer]; !ok {
			errs = append(errs, fmt.Errorf("--pass-on names %q, which is not a peer (--peer, --peers-kubeconfig)", peer))
		}
	}
	if len(peers) > 0 && o.CacheName == "" {
		errs = append(errs, fmt.Errorf("--cache-name is required with --peer or --peers-kubeconfig: peers know this cache's partitions by it"))
	}
	if _, ok := peers[o.CacheName]; ok && o.CacheName != "" {
		errs = append(errs, fmt.Errorf("peer %q is this cache itself (--cache-name)", o.CacheName))
	}
	return errs
}

// PeerSource is where one peer cache's client configuration comes from:
// options only name the file and the context; the server's configuration
// loads them.
type PeerSource struct {
	Name       string
	Kubeconfig string
	// Context is the context to use; empty means the current one.
	Context string
}

// peerFiles maps each peer name to where its configuration comes from.
func (o *HierarchyOptions) peerFiles() (map[string]PeerSource, error) {
	out := map[string]PeerSource{}
	var errs []string
	for _, p := range o.Peers {
		name, file, ok := strings.Cut(p, "=")
		switch {
		case !ok || file == "":
			errs = append(errs, fmt.Sprintf("--peer %q is not NAME=KUBECONFIG", p))
			continue
		case kcpcache.ValidateCacheName(name) != nil:
			errs = append(errs, fmt.Sprintf("--peer %q: %v", p, kcpcache.ValidateCacheName(name)))
			continue
		}
		if _, dup := out[name]; dup {
			errs = append(errs, fmt.Sprintf("peer %q is given twice", name))
			continue
		}
		out[name] = PeerSource{Name: name, Kubeconfig: file}
	}
	if o.PeersKubeconfig != "" {
		cfg, err := clientcmd.LoadFromFile(o.PeersKubeconfig)
		if err != nil {
			errs = append(errs, fmt.Sprintf("--peers-kubeconfig: %v", err))
		} else {
			for name := range cfg.Contexts {
				if err := kcpcache.ValidateCacheName(name); err != nil {
					errs = append(errs, fmt.Sprintf("--peers-kubeconfig context %q: %v", name, err))
					continue
				}
				if _, dup := out[name]; dup {
					errs = append(errs, fmt.Sprintf("peer %q is given twice", name))
					continue
				}
				out[name] = PeerSource{Name: name, Kubeconfig: o.PeersKubeconfig, Context: name}
			}
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// PeerSources lists where every peer's configuration comes from, sorted by
// name.
func (o *HierarchyOptions) PeerSources() ([]PeerSource, error) {
	sources, err := o.peerFiles()
	if err != nil {
		return nil, err
	}
	out := make([]PeerSource, 0, len(sources))
	for _, src := range sources {
		out = append(out, src)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// PassOnResources parses --pass-on: per peer, the resources passed on to
// it ("<resource>.<group>"), sorted.
func (o *HierarchyOptions) PassOnResources() (map[string][]string, error) {
	out := map[string][]string{}
	var errs []string
	for _, entry := range o.PassOn {
		peer, list, ok := strings.Cut(entry, "=")
		if !ok || list == "" {
			errs = append(errs, fmt.Sprintf("--pass-on %q is not PEER=RESOURCE[,RESOURCE...]", entry))
			continue
		}
		if err := kcpcache.ValidateCacheName(peer); err != nil {
			errs = append(errs, fmt.Sprintf("--pass-on %q: %v", entry, err))
			continue
		}
		if _, dup := out[peer]; dup {
			errs = append(errs, fmt.Sprintf("--pass-on names peer %q twice; list its resources in one entry", peer))
			continue
		}
		var resources []string
		for _, r := range strings.Split(list, ",") {
			r = strings.TrimSpace(r)
			gr := schema.ParseGroupResource(r)
			if msgs := validation.IsDNS1123Label(gr.Resource); len(msgs) > 0 || r == "" {
				errs = append(errs, fmt.Sprintf("--pass-on %q: resource %q is not <resource>.<group>: %s", entry, r, strings.Join(msgs, "; ")))
				continue
			}
			if gr.Group != "" {
				if msgs := validation.IsDNS1123Subdomain(gr.Group); len(msgs) > 0 {
					errs = append(errs, fmt.Sprintf("--pass-on %q: group of %q: %s", entry, r, strings.Join(msgs, "; ")))
					continue
				}
			}
			resources = append(resources, gr.String())
		}
		sort.Strings(resources)
		out[peer] = resources
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}
