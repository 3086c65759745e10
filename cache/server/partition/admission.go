package partition

import (
	"context"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/admission"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Admission stamps the partition annotations on every object created or
// updated, CRDs included, and refuses an object that names another
// partition, a create that sets metadata.resourceVersion, and an update
// whose metadata.resourceVersion is not a number.
//
// It is admission, not storage, because a dry run never reaches storage:
// upstream's registry answers it from the object as admitted and
// validated (registry.DryRunnableStorage). Here a dry run is refused, and
// answered, exactly as the real request is. Storage stamps too (scoped
// storage, for writes that come another way).
type Admission struct {
	*admission.Handler
}

var _ admission.MutationInterface = Admission{}

// NewAdmission returns the partition admission.
func NewAdmission() Admission {
	return Admission{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// Admit implements admission.MutationInterface.
func (Admission) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	sc, ok := kcpcache.ScopeFrom(ctx)
	if !ok || sc.IsWildcard() {
		// Wildcard writes are refused before admission; a write without a
		// scope is storage's to refuse.
		return nil
	}
	m, err := meta.Accessor(a.GetObject())
	if err != nil {
		return nil
	}
	// Upstream's etcd storage refuses both with an internal error (500);
	// the mistake is the client's.
	switch rv := m.GetResourceVersion(); {
	case rv == "":
	case a.GetOperation() == admission.Create:
		return apierrors.NewBadRequest(fmt.Sprintf("metadata.resourceVersion must not be set on create (got %q): the server assigns it", rv))
	default:
		if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("metadata.resourceVersion %q is not a resource version (an unsigned integer from an earlier answer)", rv))
		}
	}
	if a.GetOperation() == admission.Create && !metav1.HasObjectMetaSystemFieldValues(m) {
		// The stamp makes kcp's Kubernetes fork keep the object's uid and
		// creation time as a replica's (its rest.BeforeCreate skips
		// FillObjectMetaSystemFields for objects carrying kcp.io/shard)
		// and refuse one without them ("system metadata was not
		// initialized", a 500) — CRDs, whose store has no BeginCreate of
		// ours (dataplane's beginCreate does the same for data objects).
		// Upstream fills them again in BeforeCreate; the values are the
		// same kind either way.
		m.SetCreationTimestamp(metav1.Now())
		m.SetUID(uuid.NewUUID())
	}
	return stampPartition(m, sc)
}
