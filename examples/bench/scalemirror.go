package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
	"github.com/kcp-cache/kcp-cache/cache/server"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rows 11n–11s: a second process of our server, a mirror of the measured
// one (its home, named "home"), started empty once the home holds the data
// set: how long until it holds a copy of every object, what the copies
// cost, and how far behind the home its copy runs while a shard writes at
// a steady pace.

// scaleMirrorWrites objects are created at the home, one every
// scaleMirrorInterval, for the lag rows.
const (
	scaleMirrorWrites   = 200
	scaleMirrorInterval = 50 * time.Millisecond
)

// scaleMirrorPoll is how often the mirror's copies are counted.
const scaleMirrorPoll = time.Second

// The seconds -scale-cpuprofile's profiles cover: a restart's first (its
// target is 5 s at 250,000 objects), and a mirror's copying from a third
// of the objects on.
const (
	scaleRestartProfileSeconds = 8
	scaleMirrorProfileSeconds  = 30
)

// scaleMirrorResult is what the mirror measured.
type scaleMirrorResult struct {
	copies    int64
	firstSync time.Duration
	// Create sent at the home → first watch event of the object, at the
	// home and at the mirror.
	lagHome, lagMirror      summary
	heapPerCopy, rssPerCopy float64
	// rssPeak is the mirror's highest RSS seen during its first sync, and
	// rssRest its RSS at rest after it.
	rssPeak, rssRest uint64
}

// scaleMirror starts a mirror of home under root and measures it. The
// mirror's memory per copy is net of the home's empty figures (the same
// binary; the mirror's streams add a few megabytes, which this counts
// against the copies). On failure, how says in a few words how the mirror
// failed (killed for its memory limit, ...).
func scaleMirror(ctx context.Context, cfg config, home *scaleServer, l layout, root string, empty memorySample) (res *scaleMirrorResult, how string, err error) {
	how = "mirror failed (see the notes)"
	res = &scaleMirrorResult{}
	if res.copies, err = storedObjects(ctx, home); err != nil {
		return nil, how, fmt.Errorf("counting the home's objects: %w", err)
	}
	peerCfg, err := scalePeerConfig(home, "mirror")
	if err != nil {
		return nil, how, err
	}
	kubeconfig := filepath.Join(filepath.Dir(root), "mirror-reads-home.kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig, peerCfg); err != nil {
		return nil, how, err
	}
	progress("scale: a mirror copies %d objects from the home", res.copies)
	t0 := time.Now()
	m, err := startScaleServer(ctx, "mirror", cfg.scaleServerBinary, root, cfg.scaleMemoryLimit, true, "--cache-name=mirror", "--peer=home="+kubeconfig)
	if m != nil {
		defer m.stop()
		// Before the stop above: how the mirror failed, not how it was
		// stopped.
		defer func() {
			if err != nil && m.exited != nil {
				how = "mirror " + m.how()
			}
		}()
	}
	if err != nil {
		return nil, how, err
	}
	// The CPU profile (-scale-cpuprofile) starts once a third of the
	// objects are copied: a copy's cost at that size, not the start's.
	var profiled chan error
	startProfile := func() {
		profiled = make(chan error, 1)
		file := fmt.Sprintf("%s-mirror-%d.pprof", cfg.scaleCPUProfile, res.copies)
		go func() { profiled <- fetchStartProfile(ctx, m, file, scaleMirrorProfileSeconds) }()
	}
	// Waited for before the mirror stops (the defer above runs after
	// this one).
	defer func() {
		if profiled == nil {
			return
		}
		if perr := <-profiled; perr != nil && err == nil {
			err = fmt.Errorf("CPU profile of the mirror: %w", perr)
		}
	}()
	last := int64(-1)
	// Once a second: each poll counts every key of the mirror's etcd, work
	// the copy's time would include (five a second took 4.8% of the
	// mirror's CPU at 250,000 objects). The copy's time is known to within
	// a second.
	if err := wait.PollUntilContextTimeout(ctx, scaleMirrorPoll, cfg.phaseTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-m.exited:
			return false, fmt.Errorf("the mirror %s", m.how())
		default:
		}
		if rss, err := m.rss(); err == nil {
			res.rssPeak = max(res.rssPeak, rss)
		}
		// Bounded: a client of a process that just died would retry
		// until the phase's end.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := storedObjects(cctx, m)
		if err != nil {
			return false, nil
		}
		last = n
		if cfg.scaleCPUProfile != "" && profiled == nil && n >= res.copies/3 {
			startProfile()
		}
		return n == res.copies, nil
	}); err != nil {
		return nil, how, fmt.Errorf("%d of %d objects copied: %w", last, res.copies, err)
	}
	res.firstSync = time.Since(t0)

	settled, err := m.settledMemory(ctx)
	if err != nil {
		return nil, how, err
	}
	res.heapPerCopy = (settled.heap() - empty.heap()) / float64(res.copies)
	res.rssPerCopy = (settled.rss() - empty.rss()) / float64(res.copies)
	res.rssRest = settled.status["VmRSS"]

	if res.lagHome, res.lagMirror, err = scaleMirrorLag(ctx, home, m, l.scopeOf(0)); err != nil {
		return nil, how, err
	}
	return res, "", nil
}

// scalePeerConfig is how cache name reads home: a client certificate of
// the peer's user issued by home's client CA.
func scalePeerConfig(home *scaleServer, name string) (*rest.Config, error) {
	certPEM, keyPEM, err := home.ca.IssueClient(kcpcache.PeerUser(name), nil)
	if err != nil {
		return nil, err
	}
	return &rest.Config{Host: home.cfg.Host, TLSClientConfig: rest.TLSClientConfig{CAData: home.cfg.CAData, CertData: certPEM, KeyData: keyPEM}}, nil
}

// storedObjects counts the data set's keys in s's etcd (every type of
// scaleMix under the /cache prefix both servers use).
func storedObjects(ctx context.Context, s *scaleServer) (int64, error) {
	etcd, err := s.etcdClient()
	if err != nil {
		return 0, err
	}
	defer func() { _ = etcd.Close() }()
	var n int64
	for _, t := range scaleMix {
		resp, err := etcd.Get(ctx, "/cache/"+t.gvr.Group+"/"+t.gvr.Resource+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		n += resp.Count
	}
	return n, nil
}

// scaleMirrorLag creates scaleMirrorWrites objects of the second type of
// the mix in partition sc at the home at a steady pace, while a watch at
// the home and one at the mirror (resourceVersion=0, each from its own
// copy) record each object's first event.
func scaleMirrorLag(ctx context.Context, home, mirror *scaleServer, sc kcpcache.Scope) (atHome, atMirror summary, err error) {
	t := scaleMix[1]
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	var seen [2]*sightings
	var errcs [2]<-chan error
	for i, s := range []*scaleServer{home, mirror} {
		c, err := client.NewForConfig(s.cfg)
		if err != nil {
			return summary{}, summary{}, err
		}
		if seen[i], errcs[i], err = watchSightings(watchCtx, c.Cluster(sc.Shard, sc.Cluster).Resource(t.gvr)); err != nil {
			return summary{}, summary{}, fmt.Errorf("watching at the %s: %w", s.name, err)
		}
	}
	writer, err := client.NewForConfig(home.cfg)
	if err != nil {
		return summary{}, summary{}, err
	}
	progress("scale: the home takes %d creates, one every %s; watches at the home and the mirror", scaleMirrorWrites, scaleMirrorInterval)
	sent := make([]time.Time, scaleMirrorWrites)
	name := func(i int) string { return objectName("lag", i) }
	pace := time.NewTicker(scaleMirrorInterval)
	defer pace.Stop()
	for i := range sent {
		select {
		case <-ctx.Done():
			return summary{}, summary{}, ctx.Err()
		case <-pace.C:
		}
		u, err := scaleObject(1, sc, 1024)
		if err != nil {
			return summary{}, summary{}, err
		}
		u.SetName(name(i))
		u.SetAPIVersion(t.gvr.GroupVersion().String())
		u.SetKind(t.kind)
		sent[i] = time.Now()
		if _, err := writer.Cluster(sc.Shard, sc.Cluster).Resource(t.gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return summary{}, summary{}, fmt.Errorf("creating %s at the home: %w", u.GetName(), err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, errc := range errcs {
			select {
			case err := <-errc:
				return false, err
			default:
			}
		}
		return seen[0].count() >= len(sent) && seen[1].count() >= len(sent), nil
	}); err != nil {
		return summary{}, summary{}, fmt.Errorf("waiting for the watches (%d at the home, %d at the mirror of %d): %w", seen[0].count(), seen[1].count(), len(sent), err)
	}
	var lags [2][]time.Duration
	for i, at := range sent {
		for w := range seen {
			t, ok := seen[w].seen(name(i))
			if !ok {
				return summary{}, summary{}, fmt.Errorf("watch %d never saw %s", w, name(i))
			}
			lags[w] = append(lags[w], t.Sub(at))
		}
	}
	return summarize(lags[0]), summarize(lags[1]), nil
}

// addScaleMirrorRows adds rows 11n–11s of one size: the mirror against its
// home (kcp's cache-server has no mirrors).
func addScaleMirrorRows(rep *report, n int, ours *scaleResult) {
	add := func(letter, metric, unit string, value float64, cache string, baseline string, baselineValue float64) {
		r := &row{ID: fmt.Sprintf("11%s-%d", letter, n), Metric: fmt.Sprintf("%s (%s objects)", metric, thousands(n)), Unit: unit, Ratio: math.NaN()}
		if !ours.measured(letter) {
			r.Cache, r.Baseline = ours.unmeasured(letter), "–"
			rep.add(r)
			return
		}
		r.CacheValue, r.Cache, r.Baseline, r.BaselineValue = value, cache, baseline, baselineValue
		if letter == "n" {
			r.Target = atLargest(n, &target{Text: "≤ 75 s", AtMost: true, Bound: 75})
			r.TargetOnValue = r.Target != nil
		}
		if baselineValue > 0 {
			r.Ratio = ratio(value, baselineValue)
		}
		rep.add(r)
	}
	m := ours.mirror
	if m == nil {
		m = &scaleMirrorResult{}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	add("n", "mirror: start to every object copied", "s", m.firstSync.Seconds(), fmt.Sprintf("%.2f s (%s copies)", m.firstSync.Seconds(), thousands(int(m.copies))), "none (kcp's cache-server has no mirrors)", 0)
	add("o", "mirror lag, create sent → watch event, p50", "ms", ms(m.lagMirror.P50), fmt.Sprintf("%.1f ms at the mirror", ms(m.lagMirror.P50)), fmt.Sprintf("%.1f ms at the home", ms(m.lagHome.P50)), ms(m.lagHome.P50))
	add("p", "mirror lag, create sent → watch event, p99", "ms", ms(m.lagMirror.P99), fmt.Sprintf("%.1f ms at the mirror", ms(m.lagMirror.P99)), fmt.Sprintf("%.1f ms at the home", ms(m.lagHome.P99)), ms(m.lagHome.P99))
	add("q", "heap per copy at the mirror at rest", "bytes", m.heapPerCopy, fmt.Sprintf("%.0f B", m.heapPerCopy), fmt.Sprintf("per object at the home: %.0f B", ours.heapPerObject), ours.heapPerObject)
	add("r", "RSS per copy at the mirror at rest", "bytes", m.rssPerCopy, fmt.Sprintf("%.0f B", m.rssPerCopy), fmt.Sprintf("per object at the home: %.0f B", ours.rssPerObj), ours.rssPerObj)
	peak := float64(m.rssPeak) / float64(max(m.rssRest, 1))
	add("s", "mirror: RSS peak during the first sync ÷ at rest", "ratio", peak, fmt.Sprintf("%.2f (peak %.0f MiB)", peak, float64(m.rssPeak)/(1<<20)), "–", 0)
}
