package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server"
	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
	"github.com/kcp-cache/kcp-cache/cache/server/homes"
	"github.com/kcp-cache/kcp-cache/examples/internal/run"
	"github.com/kcp-cache/kcp-cache/examples/shard/shardserver"
)

// The regions part: shard regionShard pushes to the cache "east" (its
// home); the cache "west" mirrors it.
const (
	regionShard   = "gamma"
	regionCluster = "orders"
	regionExport  = "orders"
	// freshnessWait is both caches' --freshness-wait: short, so that a
	// refused consistent read is answered quickly.
	freshnessWait = 3 * time.Second
)

// region is one cache of the hierarchy: a cache server with its own
// embedded etcd, whose directories and port outlive a stop so that it can
// come back on its data with its certificate (its peers' kubeconfigs stay
// valid).
type region struct {
	name  string
	root  string
	port  int
	flags func(*options.Options)
	srv   *cachetest.Server
}

// start starts (or starts again) the region's cache; its log lines carry
// the region's name.
func (r *region) start(ctx context.Context) error {
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("region", r.name))
	srv, err := run.Cache(ctx, r.root, r.port, r.flags)
	if err != nil {
		return fmt.Errorf("cache %s: %w", r.name, err)
	}
	r.srv, r.port = srv, srv.Options().Port
	return nil
}

// stop stops the region's cache and etcd; their data stays.
func (r *region) stop() error {
	if r.srv == nil {
		return nil
	}
	err := r.srv.Stop()
	r.srv = nil
	return err
}

// runRegions shows a hierarchy of two caches: what a mirror serves while
// the home of a partition is lost, and that it confirms reads again once
// the home is back.
func (d *demo) runRegions(ctx context.Context) error {
	d.say("Starting two regions, caches %q and %q, each with its own embedded etcd; they peer with each other", "east", "west")
	dir := filepath.Join(d.root, "regions")
	ids, err := run.NewIdentities(filepath.Join(dir, "identities"))
	if err != nil {
		return err
	}
	east, west := &region{name: "east", root: filepath.Join(dir, "east")}, &region{name: "west", root: filepath.Join(dir, "west")}
	d.regions = []*region{east, west}
	// Each cache accepts the other's peer identity by a bearer token.
	tokens := map[string]string{} // tokens[c]: the token cache c reads its peer with
	for _, r := range d.regions {
		if tokens[r.name], err = randomToken(); err != nil {
			return err
		}
	}
	for _, r := range d.regions {
		peer := east
		if r == east {
			peer = west
		}
		if err := os.MkdirAll(r.root, 0o700); err != nil {
			return err
		}
		tokenFile := filepath.Join(r.root, "peer-tokens.csv")
		line := fmt.Sprintf("%s,%s,%s\n", tokens[peer.name], kcpcache.PeerUser(peer.name), peer.name)
		if err := os.WriteFile(tokenFile, []byte(line), 0o600); err != nil {
			return err
		}
		name := r.name
		r.flags = func(o *options.Options) {
			ids.TrustedBy(o)
			o.Authentication.TokenAuthFile = tokenFile
			o.Hierarchy.CacheName = name
			o.Hierarchy.FreshnessWait = freshnessWait
		}
	}
	// A peer's kubeconfig needs its serving certificate, which a cache
	// creates when it first starts: east starts alone, west starts with
	// east as its peer, and east is restarted with west as its peer.
	if err := east.start(ctx); err != nil {
		return err
	}
	if err := d.peerWith(ctx, west, east, tokens[west.name]); err != nil {
		return err
	}
	if err := west.start(ctx); err != nil {
		return err
	}
	if err := d.peerWith(ctx, east, west, tokens[east.name]); err != nil {
		return err
	}
	if err := east.srv.Restart(ctx, func(o *cachetest.Options) { o.Flags = east.flags }); err != nil {
		return fmt.Errorf("restarting cache east with its peer: %w", err)
	}
	for _, r := range d.regions {
		detail("cache %-4s serves %s (--cache-name=%s --freshness-wait=%s)", r.name, r.srv.Config().Host, r.name, freshnessWait)
	}

	d.say("Shard %s, whose home is east, writes APIExport %q in logical cluster %q there with its own identity", regionShard, regionExport, regionCluster)
	kubeconfig, err := ids.ShardKubeconfig(east.srv, regionShard)
	if err != nil {
		return err
	}
	shardCfg, err := client.ConfigFromKubeconfig(kubeconfig, "")
	if err != nil {
		return err
	}
	atHome := scoped(shardCfg, kcpcache.ScopedPathPrefix(kcpcache.Scope{Shard: regionShard, Cluster: regionCluster})).Resource(shardserver.APIExports)
	export, err := atHome.Create(ctx, object(shardserver.APIExports, "APIExport", regionExport, map[string]interface{}{}), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("shard %s writing at east: %w", regionShard, err)
	}
	detail("east: shards/%s/clusters/%s apiexports %s uid=%s resourceVersion=%s", regionShard, regionCluster, regionExport, export.GetUID(), export.GetResourceVersion())

	partition := kcpcache.ScopedPath(kcpcache.Scope{Shard: regionShard, Cluster: kcpcache.Wildcard}, "/apis/"+shardserver.APIExports.GroupVersion().String()+"/"+shardserver.APIExports.Resource)
	d.say("West mirrors east's partition: a consistent read at west (no resourceVersion) is confirmed with east")
	var confirmed *reply
	if err := cachetest.Poll(ctx, func(ctx context.Context) error {
		got, err := getPath(ctx, west.srv.Config(), partition)
		if err != nil {
			return err
		}
		confirmed = got
		return got.expectCopy(string(export.GetUID()), "east")
	}); err != nil {
		return fmt.Errorf("consistent read of shard %s at west: %w", regionShard, err)
	}
	homeRevision := confirmed.header.Get(kcpcache.HomeRevisionHeader)
	before, err := homeEntry(homeRevision, "east")
	if err != nil {
		return err
	}
	detail("GET %s at west: %d, the copy of uid %s (annotation %s=%s)", partition, confirmed.code, export.GetUID(), kcpcache.AnnotationHome, confirmed.items[0].Annotations[kcpcache.AnnotationHome])
	detail("%s: %s (east's epoch/revision the answer reflects)", kcpcache.HomeRevisionHeader, homeRevision)

	d.say("Region east is lost: its cache and etcd stop")
	eastCfg := east.srv.Config()
	if err := east.stop(); err != nil {
		return fmt.Errorf("stopping cache east: %w", err)
	}
	if _, err := run.Get(ctx, eastCfg, "/readyz"); err == nil {
		return fmt.Errorf("cache east still answers after stopping")
	}
	detail("cache east no longer answers")

	d.say("West still serves east's partition: a stale read (resourceVersion=0) is answered from its copy, with its age")
	stale, err := getPath(ctx, west.srv.Config(), partition+"?resourceVersion=0")
	if err != nil {
		return err
	}
	if err := stale.expectCopy(string(export.GetUID()), "east"); err != nil {
		return fmt.Errorf("stale read of shard %s at west with east lost: %w", regionShard, err)
	}
	age := stale.header.Get(kcpcache.FreshnessAgeHeader)
	if !strings.HasPrefix(age, "east=") {
		return fmt.Errorf("stale read at west: %s %q, want east's age", kcpcache.FreshnessAgeHeader, age)
	}
	detail("GET ...?resourceVersion=0 at west: %d, the copy of uid %s", stale.code, export.GetUID())
	detail("%s: %s (seconds since east last confirmed west's copy)", kcpcache.FreshnessAgeHeader, age)
	detail("%s: %s", kcpcache.HomeRevisionHeader, stale.header.Get(kcpcache.HomeRevisionHeader))

	d.say("A consistent read at west is refused: west cannot confirm its copy with east")
	refused, err := getPath(ctx, west.srv.Config(), partition)
	if err != nil {
		return err
	}
	if err := refused.expectRefused(homes.ReasonHomeUnreachable, "east"); err != nil {
		return fmt.Errorf("consistent read of shard %s at west with east lost: %w", regionShard, err)
	}
	cause := refused.status.Details.Causes[0]
	detail("GET %s at west: %d %s", partition, refused.code, refused.status.Reason)
	detail("message: %s", refused.status.Message)
	detail("cause: type=%s field=%s", cause.Type, cause.Field)

	d.say("Region east comes back on its data; west confirms consistent reads with it again")
	if err := east.start(ctx); err != nil {
		return err
	}
	if err := cachetest.Poll(ctx, func(ctx context.Context) error {
		got, err := getPath(ctx, west.srv.Config(), partition)
		if err != nil {
			return err
		}
		confirmed = got
		return got.expectCopy(string(export.GetUID()), "east")
	}); err != nil {
		return fmt.Errorf("consistent read of shard %s at west after east returned: %w", regionShard, err)
	}
	homeRevision = confirmed.header.Get(kcpcache.HomeRevisionHeader)
	after, err := homeEntry(homeRevision, "east")
	if err != nil {
		return err
	}
	if after.Epoch != before.Epoch || after.Revision < before.Revision {
		return fmt.Errorf("east came back on its data at epoch/revision %s/%d, before it was lost %s/%d", after.Epoch, after.Revision, before.Epoch, before.Revision)
	}
	detail("GET %s at west: %d, the copy of uid %s", partition, confirmed.code, export.GetUID())
	detail("%s: %s (east's epoch unchanged: it kept its data)", kcpcache.HomeRevisionHeader, homeRevision)
	return nil
}

// peerWith writes the kubeconfig with which cache from reads its peer to
// (to's address and serving CA, from's token) and adds it to from's peers.
func (d *demo) peerWith(ctx context.Context, from, to *region, token string) error {
	cfg := rest.AnonymousClientConfig(to.srv.Config())
	cfg.BearerToken = token
	file := filepath.Join(from.root, "peer-"+to.name+".kubeconfig")
	if err := server.WriteKubeconfig(file, cfg); err != nil {
		return err
	}
	base := from.flags
	from.flags = func(o *options.Options) {
		base(o)
		o.Hierarchy.Peers = []string{to.name + "=" + file}
	}
	detail("cache %-4s --peer %s=%s (authenticates as %s)", from.name, to.name, file, kcpcache.PeerUser(from.name))
	return nil
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", b), nil
}

// reply is a cache's answer to a list, read over plain HTTP so that its
// headers can be shown.
type reply struct {
	code   int
	header http.Header
	items  []metav1.ObjectMeta
	status *metav1.Status
}

// getPath lists path with cfg's credentials; a non-200 answer is decoded
// as a Status.
func getPath(ctx context.Context, cfg *rest.Config, path string) (*reply, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(cfg.Host, path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	// The demo shows where each copy came from: its bookkeeping, which a
	// reader gets only when it asks (kcp's shards do not).
	req.Header.Set(kcpcache.CopyBookkeepingHeader, "keep")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	r := &reply{code: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		r.status = &metav1.Status{}
		if err := json.Unmarshal(body, r.status); err != nil {
			return nil, fmt.Errorf("GET %s: %d, not a Status: %w", path, resp.StatusCode, err)
		}
		return r, nil
	}
	var list metav1.PartialObjectMetadataList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	for _, item := range list.Items {
		r.items = append(r.items, item.ObjectMeta)
	}
	return r, nil
}

// expectCopy checks that the answer is the one mirrored copy of uid whose
// home is home.
func (r *reply) expectCopy(uid, home string) error {
	if r.code != http.StatusOK {
		return fmt.Errorf("%d %s: %s", r.code, r.status.Reason, r.status.Message)
	}
	if len(r.items) != 1 || string(r.items[0].UID) != uid || r.items[0].Annotations[kcpcache.AnnotationHome] != home {
		return fmt.Errorf("got %d objects %v, want the copy of uid %s with %s=%s", len(r.items), r.items, uid, kcpcache.AnnotationHome, home)
	}
	return nil
}

// expectRefused checks that the answer is a 503 whose one cause names home
// and reason.
func (r *reply) expectRefused(reason, home string) error {
	if r.code != http.StatusServiceUnavailable {
		return fmt.Errorf("got %d, want 503", r.code)
	}
	var causes []metav1.StatusCause
	if r.status.Details != nil {
		causes = r.status.Details.Causes
	}
	if len(causes) != 1 || string(causes[0].Type) != reason || causes[0].Field != home {
		return fmt.Errorf("got 503 %q with causes %+v, want one cause %s naming %s", r.status.Message, causes, reason, home)
	}
	return nil
}

// homeEntry returns home's entry of a HomeRevisionHeader value.
func homeEntry(value, home string) (kcpcache.HomeRevision, error) {
	entries, err := kcpcache.ParseHomeRevisions(value)
	if err != nil {
		return kcpcache.HomeRevision{}, err
	}
	for _, e := range entries {
		if e.Home == home && e.Revision > 0 {
			return e, nil
		}
	}
	return kcpcache.HomeRevision{}, fmt.Errorf("%s %q has no revision of %s", kcpcache.HomeRevisionHeader, value, home)
}
