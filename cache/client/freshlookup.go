package client

import (
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// FreshLookup is Fallback with the freshness of the cache's answers: every
// object found in the cache comes with its shard's PartitionFreshness, and a
// partition can be treated as unavailable when it is older than a bound or
// not confirmed in the cache's current epoch. Local answers are current by
// definition and come without freshness.
type FreshLookup struct {
	Fallback
	// Heartbeats tells the freshness of each shard's partition; required.
	Heartbeats *Heartbeats
	// MaxAge, when positive, makes an answer from a partition whose last
	// heartbeat is older than MaxAge (or that has no heartbeat) a
	// PartitionUnavailableError instead.
	MaxAge time.Duration
	// RequireConfirmed makes an answer from a partition that its shard has
	// not yet pushed in the cache's current epoch unavailable too.
	RequireConfirmed bool
}

// GetByClusterAndName is Fallback.GetByClusterAndName with the answer's
// freshness (nil for a local answer, or when nothing was found).
func (l FreshLookup) GetByClusterAndName(cluster, name string) (*unstructured.Unstructured, *PartitionFreshness, error) {
	return l.get(name, func(idx cache.Indexer) (*unstructured.Unstructured, error) {
		return GetByClusterAndName(idx, cluster, name)
	})
}

// GetByPathAndName is Fallback.GetByPathAndName with the answer's freshness.
func (l FreshLookup) GetByPathAndName(path, name string) (*unstructured.Unstructured, *PartitionFreshness, error) {
	return l.get(name, func(idx cache.Indexer) (*unstructured.Unstructured, error) {
		return GetByPathAndName(idx, path, name)
	})
}

func (l FreshLookup) get(name string, lookup func(cache.Indexer) (*unstructured.Unstructured, error)) (*unstructured.Unstructured, *PartitionFreshness, error) {
	if l.Local != nil {
		obj, err := lookup(l.Local)
		if err == nil {
			return obj, nil, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, nil, err
		}
	}
	cacheOnly := l.Fallback
	cacheOnly.Local = nil
	obj, err := cacheOnly.get(name, lookup)
	if err != nil {
		return nil, nil, err
	}
	if l.Heartbeats == nil {
		return nil, nil, fmt.Errorf("fresh lookup has no heartbeats")
	}
	f := l.Heartbeats.Shard(obj.GetAnnotations()[kcpcache.AnnotationShard])
	switch {
	case l.MaxAge > 0 && (!f.Known || f.Age > l.MaxAge):
		return nil, &f, &PartitionUnavailableError{Freshness: f, Reason: fmt.Sprintf("its last heartbeat is older than %s", l.MaxAge)}
	case l.RequireConfirmed && !f.Confirmed():
		return nil, &f, &PartitionUnavailableError{Freshness: f, Reason: "its shard has not pushed it since the cache's epoch changed"}
	}
	return obj, &f, nil
}

// PartitionUnavailableError is a FreshLookup answer from a partition that is
// too old or unconfirmed. It is a Kubernetes ServiceUnavailable error
// (apierrors.IsServiceUnavailable), which controllers retry.
type PartitionUnavailableError struct {
	Freshness PartitionFreshness
	Reason    string
}

func (e *PartitionUnavailableError) Error() string {
	return fmt.Sprintf("the cache's partition of shard %q is unavailable: %s", e.Freshness.Shard, e.Reason)
}

// Status implements apierrors.APIStatus.
func (e *PartitionUnavailableError) Status() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable, Message: e.Error()}
}
