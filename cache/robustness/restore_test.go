package robustness

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/cachetest"
)

// trafficKeys is how many keys each partition's writers share.
const trafficKeys = 4

// heldFor is how long the mirrors are watched after the home's restore.
const heldFor = 10 * time.Second

// homeBackup is a copy of a home's etcd directory taken while traffic
// runs (a fault: the home stops, its directory is copied, it starts
// again), and what restoring the home from it must not do: make a mirror
// delete or roll back what the home had acknowledged after the copy. The
// restore is the regions shape's last step, once the traffic has ended:
// the restored home has lost those writes by design (the shard would push
// them again), so the histories, which hold the home's writes, end before
// it; the mirrors' copies are checked against the home's last state
// instead.
type homeBackup struct {
	dir   string
	taken bool
}

// of is the fault that backs up srv, the home called name.
func (b *homeBackup) of(name string, srv *cachetest.Server) fault {
	return func(_ context.Context, t *testing.T, note func(string)) {
		note("backup of " + name + "'s etcd (stopped, copied, started)")
		ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		if err := srv.StopEtcdAndCopyData(ctx, b.dir); err != nil {
			t.Errorf("backing up %s: %v", name, err)
			return
		}
		b.taken = true
	}
}

// restoreAndCheck is the step after the traffic: with every link back, it
// reads shard's keys at home (their last state) and waits until each
// mirror answers them alike to a consistent read; then restores home from
// the latest backup, and for heldFor checks that each mirror's stale read
// of every key is still that last state (a copy kept, never deleted or
// rolled back), and its consistent read that last state or 503 (it cannot
// vouch for its copy): never the restored, older state.
func (b *homeBackup) restoreAndCheck(regions map[string]*cachetest.Region, home, shard string, links []*cachetest.LinkCutter) func(context.Context, *testing.T, func(string)) []Violation {
	return func(ctx context.Context, t *testing.T, note func(string)) []Violation {
		if !b.taken {
			t.Logf("no backup of %s was taken during the run: no restore", home)
			return nil
		}
		for _, l := range links {
			l.Restore()
		}
		last := map[string]string{}
		// The check's own reads, not the traffic's: their 5xx answers are
		// judged here, not counted in a history.
		atHome := scopedReader(t, regions[home].Srv, shard, &Answers{})
		for i := range trafficKeys {
			key := fmt.Sprintf("k%d", i)
			v, err := stateOf(ctx, atHome, key, metav1.GetOptions{})
			if err != nil {
				t.Errorf("reading %s at %s after the traffic: %v", key, home, err)
				return nil
			}
			last[key] = v
		}
		mirrors := map[string]dynamic.ResourceInterface{}
		for name, r := range regions {
			if name == home {
				continue
			}
			mirrors[name] = scopedReader(t, r.Srv, shard, &Answers{})
			err := cachetest.Poll(ctx, func(ctx context.Context) error {
				for key, want := range last {
					if got, err := stateOf(ctx, mirrors[name], key, metav1.GetOptions{}); err != nil || got != want {
						return fmt.Errorf("%s at %s: %q (%v), want %q", key, name, got, err, want)
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("mirror %s did not converge to %s's last state before the restore: %v", name, home, err)
				return nil
			}
		}

		note("restore of " + home + " from its backup, after the traffic")
		rctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), cachetest.DefaultTimeout)
		defer cancel()
		if err := regions[home].Srv.RestartWithEtcdData(rctx, func(dir string) error { return cachetest.CopyDir(b.dir, dir) }); err != nil {
			t.Errorf("restoring %s: %v", home, err)
			return nil
		}
		var out []Violation
		reported := map[string]bool{}
		violate := func(what string) {
			if !reported[what] {
				reported[what] = true
				out = append(out, Violation{Check: "restore-held", Details: what})
			}
		}
		stale, consistent := 0, 0
		for deadline := time.Now().Add(heldFor); time.Now().Before(deadline) && ctx.Err() == nil; {
			for name, m := range mirrors {
				for key, want := range last {
					if got, err := stateOf(ctx, m, key, metav1.GetOptions{ResourceVersion: "0"}); err == nil {
						stale++
						if got != want {
							violate(fmt.Sprintf("after %s's restore, a stale read of %s at %s answered %q; %s had acknowledged %q", home, key, name, got, home, want))
						}
					}
					got, err := stateOf(ctx, m, key, metav1.GetOptions{})
					switch {
					case apierrors.IsServiceUnavailable(err):
					case err != nil:
					case got != want:
						violate(fmt.Sprintf("after %s's restore, a consistent read of %s at %s answered %q; %s had acknowledged %q", home, key, name, got, home, want))
					default:
						consistent++
					}
				}
			}
			pause(ctx)
		}
		note(fmt.Sprintf("after the restore, %d stale reads and %d consistent reads (not 503) at the mirrors", stale, consistent))
		if stale == 0 {
			t.Errorf("no stale read at a mirror was answered after %s's restore: the check proves nothing", home)
		}
		return out
	}
}

// stateOf is key's value at r, "" when it is absent.
func stateOf(ctx context.Context, r dynamic.ResourceInterface, key string, opts metav1.GetOptions) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	u, err := r.Get(ctx, key, opts)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return valueOf(u), nil
}
