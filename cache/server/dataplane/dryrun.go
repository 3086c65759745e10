package dataplane

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// copyWrites is a type's registry Store whose writes of a copy answer and
// validate the same in both builds, and whose dry runs answer as the real
// writes:
//
//   - Storage restores a copy's generation and field ownership after
//     upstream's validation (partition.RestoreOnUpdate), but a dry run never
//     reaches storage: upstream's registry answers it from the object as
//     validated (registry.DryRunnableStorage). So the same restoration is
//     applied to a dry-run update's answer, against the object it updated.
//   - Storage stamps the partition annotations on what it writes, and kcp's
//     fork drops kcp.io/shard from a created object before storage (its
//     storage puts it back when it decodes what it wrote). A dry run's
//     answer gets them here.
//   - An update gives the object the stored generation before upstream's
//     registry validates it (see updatedFrom).
type copyWrites struct {
	*registry.Store
}

func (s copyWrites) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	out, err := s.Store.Create(ctx, obj, createValidation, options)
	if err != nil || !dryrun.IsDryRun(options.DryRun) {
		return out, err
	}
	// out is the dry run's own copy (DryRunnableStorage copies into a new
	// object).
	return out, partition.StampAnswer(ctx, out)
}

func (s copyWrites) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	seen := &updatedFrom{UpdatedObjectInfo: objInfo}
	obj, created, err := s.Store.Update(ctx, name, seen, createValidation, updateValidation, forceAllowCreate, options)
	if err != nil || !dryrun.IsDryRun(options.DryRun) {
		return obj, created, err
	}
	if !created && seen.old != nil {
		updated, err := meta.Accessor(obj)
		if err != nil {
			return obj, created, err
		}
		existing, err := meta.Accessor(seen.old)
		if err != nil {
			return obj, created, err
		}
		// obj is the dry run's own copy; seen.old may be the watch
		// cache's and is only read.
		partition.RestoreOnUpdate(ctx, existing, updated)
	}
	return obj, created, partition.StampAnswer(ctx, obj)
}

// updatedFrom remembers the object an update was computed from (the last
// one, when a conflict made the registry try again), and gives the updated
// object of a copy the stored generation. Upstream's registry does the
// same next (rest.BeforeUpdate), and storage then sets the origin's
// (partition.RestoreOnUpdate), also when it is lower: an origin that went
// back in time. kcp's fork instead keeps the sent generation when the stored
// object carries kcp.io/shard, as every copy there does, and its validation
// then refuses a lower one (422), which replication would retry forever.
type updatedFrom struct {
	rest.UpdatedObjectInfo
	old runtime.Object
}

func (u *updatedFrom) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	u.old = old
	obj, err := u.UpdatedObjectInfo.UpdatedObject(ctx, old)
	if err != nil {
		return obj, err
	}
	if sc, ok := kcpcache.ScopeFrom(ctx); !ok || sc.IsSystem() {
		return obj, nil
	}
	existing, err := meta.Accessor(old)
	if err != nil || existing.GetResourceVersion() == "" {
		// Nothing stored: an update that creates.
		return obj, nil
	}
	if updated, err := meta.Accessor(obj); err == nil {
		updated.SetGeneration(existing.GetGeneration())
	}
	return obj, nil
}
