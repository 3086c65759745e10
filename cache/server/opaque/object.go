package opaque

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Object is a schema-less API object. Its zero value is an empty object.
type Object struct {
	// TypeMeta is apiVersion and kind as the object was sent and stored.
	// Responses carry the requested version instead (see Serializer).
	metav1.TypeMeta
	// ObjectMeta is the parsed metadata. Change it through the metav1.Object
	// setters only: they keep rawMeta honest.
	metav1.ObjectMeta

	// rawMeta is the metadata's JSON as decoded from storage, without
	// resourceVersion (storage never holds it); nil when unknown or when a
	// setter changed ObjectMeta since.
	rawMeta []byte
	// body is every member of the JSON object other than apiVersion, kind and
	// metadata, comma-separated without the enclosing braces (empty for an
	// object with no other members). It is shared between copies and never
	// modified.
	body []byte
}

var (
	_ runtime.Object = &Object{}
	_ metav1.Object  = &Object{}
)

// NewObject returns an empty object of the given type.
func NewObject(apiVersion, kind string) *Object {
	return &Object{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
}

// Body returns the object's members other than apiVersion, kind and
// metadata, as comma-separated JSON members without braces. The caller must
// not modify it.
func (o *Object) Body() []byte { return o.body }

// SetBody replaces the members other than apiVersion, kind and metadata. It
// must be comma-separated, compact JSON object members without braces; the
// object keeps b, so the caller must not modify it afterwards.
func (o *Object) SetBody(b []byte) { o.body = b }

// DeepCopyObject implements runtime.Object. The copy shares the immutable
// JSON bytes and owns its metadata.
func (o *Object) DeepCopyObject() runtime.Object {
	if o == nil {
		return nil
	}
	return o.DeepCopy()
}

// DeepCopy returns a copy whose metadata can be changed independently.
func (o *Object) DeepCopy() *Object {
	if o == nil {
		return nil
	}
	out := &Object{TypeMeta: o.TypeMeta, rawMeta: o.rawMeta, body: o.body}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// GetObjectMeta returns the object itself, so that metadata changes made
// through it go through the overriding setters below.
func (o *Object) GetObjectMeta() metav1.Object { return o }

// The setters below shadow metav1.ObjectMeta's: each one drops rawMeta,
// except SetResourceVersion, whose value rawMeta never contains.

func (o *Object) SetResourceVersion(v string) { o.ResourceVersion = v }

func (o *Object) SetNamespace(v string)    { o.Namespace, o.rawMeta = v, nil }
func (o *Object) SetName(v string)         { o.Name, o.rawMeta = v, nil }
func (o *Object) SetGenerateName(v string) { o.GenerateName, o.rawMeta = v, nil }
func (o *Object) SetUID(v types.UID)       { o.UID, o.rawMeta = v, nil }
func (o *Object) SetGeneration(v int64)    { o.Generation, o.rawMeta = v, nil }
func (o *Object) SetSelfLink(v string)     { o.SelfLink, o.rawMeta = v, nil }
func (o *Object) SetCreationTimestamp(v metav1.Time) {
	o.CreationTimestamp, o.rawMeta = v, nil
}
func (o *Object) SetDeletionTimestamp(v *metav1.Time) {
	o.DeletionTimestamp, o.rawMeta = v, nil
}
func (o *Object) SetDeletionGracePeriodSeconds(v *int64) {
	o.DeletionGracePeriodSeconds, o.rawMeta = v, nil
}
func (o *Object) SetLabels(v map[string]string)      { o.Labels, o.rawMeta = v, nil }
func (o *Object) SetAnnotations(v map[string]string) { o.Annotations, o.rawMeta = v, nil }
func (o *Object) SetFinalizers(v []string)           { o.Finalizers, o.rawMeta = v, nil }
func (o *Object) SetOwnerReferences(v []metav1.OwnerReference) {
	o.OwnerReferences, o.rawMeta = v, nil
}
func (o *Object) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.ManagedFields, o.rawMeta = v, nil
}

// ObjectList is a list of schema-less objects. The watch cache appends
// items by value (storage/cacher), so Items holds values, not pointers.
type ObjectList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []Object
}

var _ runtime.Object = &ObjectList{}

// DeepCopyObject implements runtime.Object.
func (l *ObjectList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &ObjectList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Object, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}
