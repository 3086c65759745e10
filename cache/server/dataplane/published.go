package dataplane

import (
	"context"
	"fmt"
	"net/http"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// Reads of a published resource without its identity (see publication):
//
//   - lists and watches, in any scope, read every identity of the resource
//     at once, from etcd (partition.NewUnionDecorator): one list has one
//     resourceVersion, one watch delivers every identity's events in
//     revision order and sees identities published after it started. They
//     see everything stored under any identity of the resource, as kcp's
//     cache does (kcp keeps every identity under one etcd prefix);
//   - a read by name, in one partition, tries the identities of the
//     cluster's own CachedResources first, then every other published one,
//     through the identities' own storage (and watch cache). When two
//     identities hold the same name in one cluster (two CachedResources of
//     one resource in one workspace, which kcp's admission allows for two
//     versions), the cluster's CachedResource with the smallest identity
//     answers;
//   - writes are refused: kcp writes under the identity.
//
// kcp's cache, too, reads every identity in a wildcard metadata-only read
// (its storage for that request is the resource's whole etcd prefix, which
// holds every identity); it refuses a wildcard read of whole objects
// without identity and answers a read in a cluster without a
// CachedResource with 404. Here both are served from every identity, so a
// stored copy is never reported absent.

// publishedType is one publication as served.
type publishedType struct {
	pub    publication
	store  *registry.Store
	scopes map[string]*handlers.RequestScope
}

// publish serves p, reading through etcd, or updates how it is served. A
// change of identities or clusters keeps the store.
func (r *Registry) publish(ctx context.Context, p publication, etcd *clientv3.Client) error {
	res := p.resource
	if err := res.Validate(); err != nil {
		return err
	}
	gr := res.GroupResource()
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.published[gr]
	if old != nil && old.pub.resource.equal(res) {
		r.published[gr] = &publishedType{pub: p, store: old.store, scopes: old.scopes}
		return nil
	}
	t := newTyping(res)
	store, err := newStoreWith(res, unionRESTOptions{delegate: r.cfg.RESTOptionsGetter, etcd: etcd}, t)
	if err != nil {
		return fmt.Errorf("building the identity-less storage of %s: %w", gr, err)
	}
	scopes, err := newRequestScopes(res, t, store, scopeConfig{authorizer: r.cfg.Authorizer, maxRequestBodyBytes: r.cfg.MaxRequestBodyBytes, cbor: r.cfg.ServeCBOR})
	if err != nil {
		return fmt.Errorf("building request scopes of %s: %w", gr, err)
	}
	r.published[gr] = &publishedType{pub: p, store: store, scopes: scopes}
	klog.FromContext(ctx).V(2).Info("Serving a published resource without identity", "resource", gr, "versions", res.Versions, "identities", len(p.identities))
	return nil
}

// unpublish stops serving gr without identity.
func (r *Registry) unpublish(ctx context.Context, gr schema.GroupResource) {
	r.mu.Lock()
	_, ok := r.published[gr]
	delete(r.published, gr)
	r.mu.Unlock()
	if ok {
		klog.FromContext(ctx).V(2).Info("Stopped serving a published resource without identity", "resource", gr)
	}
}

func (r *Registry) lookupPublished(gr schema.GroupResource) *publishedType {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.published[gr]
}

// servePublished answers a request for a published resource without its
// identity; delegate answers a version nobody publishes (404).
func (r *Registry) servePublished(w http.ResponseWriter, req *http.Request, p *publishedType, info *request.RequestInfo, delegate http.Handler) {
	gr := p.pub.resource.GroupResource()
	gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
	scope, ok := p.scopes[info.APIVersion]
	if !ok {
		delegate.ServeHTTP(w, req)
		return
	}
	if err := pathNotServed(info, gr, p.pub.resource.Namespaced); err != nil {
		responsewriters.ErrorNegotiated(err, scope.Serializer, gv, w, req)
		return
	}
	if info.Subresource != "" {
		responsewriters.ErrorNegotiated(apierrors.NewNotFound(schema.GroupResource{Group: gr.Group, Resource: gr.Resource + "/" + info.Subresource}, info.Name), scope.Serializer, gv, w, req)
		return
	}
	switch info.Verb {
	case "get":
		handlers.GetResource(publishedGetter{registry: r, pub: p.pub}, scope).ServeHTTP(w, req)
	case "list":
		r.listHandler(p.store, scope).ServeHTTP(w, req)
	case "watch":
		handlers.ListResource(p.store, p.store, scope, true, r.cfg.MinRequestTimeout).ServeHTTP(w, req)
	default:
		err := apierrors.NewMethodNotSupported(gr, fmt.Sprintf("%s without an identity (it is read-only; write under %s:<identity>)", info.Verb, gr.Resource))
		responsewriters.ErrorNegotiated(err, scope.Serializer, gv, w, req)
	}
}

// publishedGetter reads a published object by name through its
// identities' storage, in the publication's read order for the cluster.
type publishedGetter struct {
	registry *Registry
	pub      publication
}

var _ rest.Getter = publishedGetter{}

func (g publishedGetter) Get(ctx context.Context, name string, opts *metav1.GetOptions) (runtime.Object, error) {
	gr := g.pub.resource.GroupResource()
	sc, _ := kcpcache.ScopeFrom(ctx)
	for _, id := range g.pub.readOrder(sc.Cluster) {
		s, _ := g.registry.lookup(schema.GroupResource{Group: gr.Group, Resource: gr.Resource + ":" + id})
		if s == nil {
			// Published an instant ago and not registered yet, or gone:
			// the next identity may hold it.
			continue
		}
		if err := s.store.ReadinessCheck(); err != nil {
			// Warming up: it may hold the object, so absence cannot be
			// told.
			return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
				Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
				Message: fmt.Sprintf("the storage of %s:%s is initializing: %v", gr, id, err),
				Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: name, RetryAfterSeconds: retryAfterSeconds},
			}}
		}
		obj, err := s.store.Get(ctx, name, opts)
		if apierrors.IsNotFound(err) {
			continue
		}
		return obj, err
	}
	return nil, apierrors.NewNotFound(gr, name)
}

// unionRESTOptions stores a published resource through the union of its
// identities, with the data plane's codec and key layout.
type unionRESTOptions struct {
	delegate generic.RESTOptionsGetter
	etcd     *clientv3.Client
}

func (g unionRESTOptions) GetRESTOptions(gr schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := opaqueRESTOptions{delegate: g.delegate}.GetRESTOptions(gr, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = partition.NewUnionDecorator(g.etcd)
	return opts, nil
}
