package homes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// Peer is another cache of the hierarchy as this cache reaches it: its name
// and one HTTP client, built once, through which every request to it goes
// (its claims table, its revisions, the mirror's lists and watches).
type Peer struct {
	// Name is the peer's --cache-name: the home its shards' copies name.
	Name string
	// Config reaches the peer, authenticated as kcpcache.PeerUser(self);
	// the client is built from it by NewPeer.
	Config *rest.Config

	http   *http.Client
	client *client.ClusterClient
}

// NewPeer builds a peer's client from cfg. The client has no client-side
// rate limit: a kubeconfig cannot set one, and client-go's default (5
// requests a second) would make a mirror of some twenty types wait seconds
// to list and watch them after every start or outage. The requests to a
// peer are few and bounded (a list and a watch per type, a revision check
// per consistent read, a table read every few seconds); the peer's own
// in-flight limits protect it.
func NewPeer(name string, cfg *rest.Config) (*Peer, error) {
	unthrottled := client.Unthrottled(cfg)
	hc, err := rest.HTTPClientFor(unthrottled)
	if err != nil {
		return nil, fmt.Errorf("peer %q: %w", name, err)
	}
	c, err := client.NewForConfigAndClient(unthrottled, hc)
	if err != nil {
		return nil, fmt.Errorf("peer %q: %w", name, err)
	}
	return &Peer{Name: name, Config: cfg, http: hc, client: c}, nil
}

// Client is the peer's cluster client: its requests go through the peer's
// one HTTP client, and it records the epoch the peer answers them in.
func (p *Peer) Client() *client.ClusterClient { return p.client }

// GetJSON GETs path (with query, if any) from the peer and decodes its JSON
// answer into out, reading at most limit bytes; what names the answer in
// errors. A status other than 200 is an error carrying the peer's message.
func (p *Peer) GetJSON(ctx context.Context, path string, query url.Values, limit int64, what string, out any) error {
	u := kcpcache.JoinHostPath(p.Config.Host, path)
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &PeerStatusError{Status: resp.Status, Body: body}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding %s: %w", what, err)
	}
	return nil
}

// PeerStatusError is a peer's answer other than 200: its status line and
// body (a Kubernetes Status, for the paths a cache serves), so that a
// relay's refusal can be passed on with its causes.
type PeerStatusError struct {
	Status string
	Body   []byte
}

func (e *PeerStatusError) Error() string {
	return fmt.Sprintf("%s: %s", e.Status, strings.TrimSpace(string(e.Body)))
}
