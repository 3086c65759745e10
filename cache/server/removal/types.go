package removal

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// TypeReaperConfig is what a TypeReaper needs.
type TypeReaperConfig struct {
	// KV reaches the etcd the cache stores in; Prefix is the cache's key prefix.
	KV     clientv3.KV
	Prefix string
	// Retention is how long a type may hold no objects before its CRD is
	// deleted; zero keeps every type.
	Retention time.Duration
	// Interval is how often types are counted.
	Interval time.Duration
	// CRDs lists the CRDs the server knows.
	CRDs func() ([]*apiextensionsv1.CustomResourceDefinition, error)
	// Bootstrapped names the CRDs that are never removed.
	Bootstrapped sets.Set[string]
	// Delete deletes a CRD, only if it is still the one given (uid and
	// resourceVersion preconditions); the server still refuses with 409 if
	// objects arrived meanwhile.
	Delete func(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// TypeReaper deletes the CRDs of types added at runtime that have held no
// objects in any partition for the retention. Emptiness is measured from
// when the reaper first saw the type empty, so a restarted server waits a
// full retention again: removal may come late, never early.
type TypeReaper struct {
	cfg TypeReaperConfig
	// emptySince is when each CRD was first seen without objects.
	emptySince map[string]time.Time
}

// NewTypeReaper returns a reaper; Run starts it.
func NewTypeReaper(cfg TypeReaperConfig) *TypeReaper {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	registerMetrics()
	return &TypeReaper{cfg: cfg, emptySince: map[string]time.Time{}}
}

// Run works until ctx is done.
func (r *TypeReaper) Run(ctx context.Context) {
	if r.cfg.Retention == 0 {
		return
	}
	logger := klog.FromContext(ctx).WithName("type-reaper")
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Removing types added at runtime that hold no objects", "retention", r.cfg.Retention, "interval", r.cfg.Interval)
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		if err := r.check(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Checking for unused types")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (r *TypeReaper) check(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	crds, err := r.cfg.CRDs()
	if err != nil {
		return err
	}
	now := r.cfg.Now()
	seen := sets.New[string]()
	for _, crd := range crds {
		if r.cfg.Bootstrapped.Has(crd.Name) || crd.DeletionTimestamp != nil {
			continue
		}
		seen.Insert(crd.Name)
		gr := schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
		resp, err := r.cfg.KV.Get(ctx, typePrefix(r.cfg.Prefix, gr), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count > 0 {
			delete(r.emptySince, crd.Name)
			continue
		}
		since, ok := r.emptySince[crd.Name]
		if !ok {
			r.emptySince[crd.Name] = now
			continue
		}
		if now.Sub(since) < r.cfg.Retention {
			continue
		}
		err = r.cfg.Delete(ctx, crd)
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone or changed meanwhile (objects arrived): look again.
			delete(r.emptySince, crd.Name)
		case err != nil:
			logger.Error(err, "Deleting an unused type", "crd", crd.Name)
		default:
			removedTypes.Inc()
			delete(r.emptySince, crd.Name)
			logger.Info("Removed a type that held no objects for the retention", "crd", crd.Name, "emptySince", since, "retention", r.cfg.Retention)
		}
	}
	for name := range r.emptySince {
		if !seen.Has(name) {
			delete(r.emptySince, name)
		}
	}
	return nil
}
