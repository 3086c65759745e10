package dataplane

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-cache/kcp-cache/cache/server/opaque"
)

// typing is the runtime plumbing of one schema-less type: it creates, types
// and "converts" its objects. Conversion is the identity: every version reads
// and writes the same stored object, and the serializer writes the requested
// version into responses without touching the (possibly shared) object.
type typing struct {
	group, kind, listKind string
	// lastVersion, the last of the served versions, types objects that
	// carry no apiVersion.
	lastVersion string
}

func newTyping(r Resource) typing {
	return typing{group: r.Group, kind: r.Kind, listKind: r.ListKind, lastVersion: r.Versions[len(r.Versions)-1]}
}

var (
	_ runtime.ObjectCreater   = typing{}
	_ runtime.ObjectTyper     = typing{}
	_ runtime.ObjectConvertor = typing{}
	_ runtime.ObjectDefaulter = typing{}
)

// New implements runtime.ObjectCreater.
func (t typing) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	switch {
	case gvk.Group != t.group:
	case gvk.Kind == t.kind:
		return opaque.NewObject(gvk.GroupVersion().String(), gvk.Kind), nil
	case gvk.Kind == t.listKind:
		l := &opaque.ObjectList{}
		l.SetGroupVersionKind(gvk)
		return l, nil
	}
	return nil, runtime.NewNotRegisteredErrForKind("opaque", gvk)
}

// ObjectKinds implements runtime.ObjectTyper.
func (t typing) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	kind := t.kind
	switch obj.(type) {
	case *opaque.Object:
	case *opaque.ObjectList:
		kind = t.listKind
	default:
		return nil, false, runtime.NewNotRegisteredErrForType("opaque", reflect.TypeOf(obj))
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Version == "" || gvk.Group != t.group {
		gvk = schema.GroupVersionKind{Group: t.group, Version: t.lastVersion}
	}
	gvk.Kind = kind
	return []schema.GroupVersionKind{gvk}, false, nil
}

// Recognizes implements runtime.ObjectTyper.
func (t typing) Recognizes(gvk schema.GroupVersionKind) bool {
	return gvk.Group == t.group && (gvk.Kind == t.kind || gvk.Kind == t.listKind)
}

// Convert implements runtime.ObjectConvertor; nothing ever needs it.
func (t typing) Convert(in, out, _ interface{}) error {
	return fmt.Errorf("%s objects are not converted (%T to %T)", t.kind, in, out)
}

// ConvertToVersion returns in unchanged: it may be shared with the watch
// cache, and the serializer labels it with the requested version. The
// unstructured objects that server-side apply builds become Objects.
func (t typing) ConvertToVersion(in runtime.Object, _ runtime.GroupVersioner) (runtime.Object, error) {
	if u, ok := in.(*unstructured.Unstructured); ok {
		return opaque.FromUnstructured(u)
	}
	return in, nil
}

// ConvertFieldLabel accepts the fields every object has.
func (t typing) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	switch label {
	case "metadata.name", "metadata.namespace":
		return label, value, nil
	}
	return "", "", fmt.Errorf("field label not supported: %s", label)
}

// Default implements runtime.ObjectDefaulter: schema-less types have no
// defaults.
func (typing) Default(runtime.Object) {}
