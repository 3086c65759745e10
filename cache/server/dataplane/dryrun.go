package dataplane

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// dryRunUpdates is a type's registry Store whose dry-run updates (and
// patches) answer as the real ones. Storage restores a copy's generation and
// field ownership after upstream's validation (partition.RestoreOnUpdate),
// but a dry run never reaches storage: upstream's registry answers it from
// the object as validated (registry.DryRunnableStorage). So the same
// restoration is applied to the dry run's answer, against the object it
// updated.
type dryRunUpdates struct {
	*registry.Store
}

func (s dryRunUpdates) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if !dryrun.IsDryRun(options.DryRun) {
		return s.Store.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	}
	seen := &updatedFrom{UpdatedObjectInfo: objInfo}
	obj, created, err := s.Store.Update(ctx, name, seen, createValidation, updateValidation, forceAllowCreate, options)
	if err != nil || created || seen.old == nil {
		return obj, created, err
	}
	updated, err := meta.Accessor(obj)
	if err != nil {
		return obj, created, err
	}
	existing, err := meta.Accessor(seen.old)
	if err != nil {
		return obj, created, err
	}
	// obj is the dry run's own copy (DryRunnableStorage copies into a new
	// object); seen.old may be the watch cache's and is only read.
	partition.RestoreOnUpdate(ctx, existing, updated)
	return obj, created, nil
}

// updatedFrom remembers the object an update was computed from (the last
// one, when a conflict made the registry try again).
type updatedFrom struct {
	rest.UpdatedObjectInfo
	old runtime.Object
}

func (u *updatedFrom) UpdatedObject(ctx context.Context, old runtime.Object) (runtime.Object, error) {
	u.old = old
	return u.UpdatedObjectInfo.UpdatedObject(ctx, old)
}
