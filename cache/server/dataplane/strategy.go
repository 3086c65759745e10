package dataplane

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/kcp-cache/kcp-cache/cache/server/partition"
)

// strategy is the registry strategy of a schema-less type. It validates
// nothing but the name: copies were validated on their shard, and the cache
// must not reject what a newer shard sends. What makes a copy a copy (origin
// uid, creationTimestamp, generation and managedFields kept, partition
// annotations stamped, no finalizers honoured) lives in package partition, in
// one place for every type; the strategy only calls it.
type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	namespaced bool
	names      NameRule
	kind       string
}

var (
	_ rest.RESTCreateStrategy = strategy{}
	_ rest.RESTUpdateStrategy = strategy{}
	_ rest.RESTDeleteStrategy = strategy{}
)

func newStrategy(r Resource, typer runtime.ObjectTyper) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, namespaced: r.Namespaced, names: r.nameRule(), kind: r.Kind}
}

func (s strategy) NamespaceScoped() bool { return s.namespaced }

// PrepareForCreate starts generation at 1, as for every Kubernetes object,
// then puts a copy's origin identity and field ownership back
// (partition.RestoreOnCreate). Here rather than in storage, because a dry
// run never reaches storage and must answer as the real create.
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetGeneration(1)
		partition.RestoreOnCreate(ctx, m)
	}
}

// PrepareForUpdate changes nothing: a copy's generation and field ownership
// are restored after upstream's validation, which refuses a generation
// lower than the stored one (storage does it; for a dry run, copyWrites).
func (strategy) PrepareForUpdate(context.Context, runtime.Object, runtime.Object) {}

func (s strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return append(s.validateKind(obj), s.validateName(obj)...)
}

func (s strategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return append(s.validateKind(obj), s.validateName(obj)...)
}

// validateKind refuses a body of another kind: the handler has only checked
// that its apiVersion is the one requested.
func (s strategy) validateKind(obj runtime.Object) field.ErrorList {
	if got := obj.GetObjectKind().GroupVersionKind().Kind; got != s.kind {
		return field.ErrorList{field.Invalid(field.NewPath("kind"), got, fmt.Sprintf("must be %s", s.kind))}
	}
	return nil
}

// validateName applies the type's name rule. Upstream's BeforeCreate has
// already applied the path-segment rule to every name.
func (s strategy) validateName(obj runtime.Object) field.ErrorList {
	m, err := meta.Accessor(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("metadata"), err)}
	}
	var errs field.ErrorList
	name := m.GetName()
	var msgs []string
	switch s.names {
	case PathSegmentNames:
		msgs = path.IsValidPathSegmentName(name)
	default:
		msgs = validation.IsDNS1123Subdomain(name)
	}
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), name, msg))
	}
	return errs
}

func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (strategy) Canonicalize(runtime.Object) {}

func (strategy) AllowCreateOnUpdate() bool { return false }

func (strategy) AllowUnconditionalUpdate() bool { return true }
