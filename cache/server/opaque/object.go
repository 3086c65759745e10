package opaque

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Object is a schema-less API object. Its zero value is an empty object.
//
// An object decoded from storage is partial: ObjectMeta holds only the
// fields the watch cache and the registry read on every object (name,
// namespace, uid, resourceVersion, generation, timestamps, labels); the
// rest (annotations, finalizers, owner references, ...) is read from the
// stored metadata bytes when asked for, and materialized before any change.
type Object struct {
	// TypeMeta is apiVersion and kind as the object was sent and stored.
	// Responses carry the requested version instead (see Serializer).
	metav1.TypeMeta
	// ObjectMeta is the parsed metadata, partial until materialized. Read
	// and change it through the metav1.Object methods only.
	metav1.ObjectMeta

	// data holds the object's JSON without apiVersion and kind: the
	// metadata object (data[:metaEnd]) followed by every other member,
	// comma-separated without braces (data[metaEnd:]). It is interned:
	// objects with the same stored bytes (a cached object and its delete
	// event, say) share one copy. The zero handle means no data.
	data    unique.Handle[string]
	metaEnd int
	// rawMetaValid says data[:metaEnd] is the metadata as stored (never with
	// a resourceVersion) and ObjectMeta has not changed since.
	rawMetaValid bool
	// partial: see the type's comment. A partial object always has valid
	// raw metadata.
	partial bool
	// shard and cluster are the partition annotations of a partial object.
	shard, cluster string
}

var (
	_ runtime.Object = &Object{}
	_ metav1.Object  = &Object{}
)

var noData unique.Handle[string]

// NewObject returns an empty object of the given type.
func NewObject(apiVersion, kind string) *Object {
	return &Object{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
}

func (o *Object) dataString() string {
	if o.data == noData {
		return ""
	}
	return o.data.Value()
}

// rawMeta returns the stored metadata bytes, or "" when they are not valid.
func (o *Object) rawMeta() string {
	if !o.rawMetaValid {
		return ""
	}
	return o.dataString()[:o.metaEnd]
}

// Body returns the object's members other than apiVersion, kind and
// metadata, as comma-separated JSON members without braces.
func (o *Object) Body() string { return o.dataString()[o.metaEnd:] }

// SetBody replaces the members other than apiVersion, kind and metadata. It
// must be comma-separated, compact JSON object members without braces.
func (o *Object) SetBody(b string) {
	o.materialize()
	o.data, o.metaEnd, o.rawMetaValid = unique.Make(b), 0, false
}

// PartitionAnnotations returns the kcp.io/shard and kcp.io/cluster
// annotations without materializing every annotation; the watch cache asks
// for them on every event.
func (o *Object) PartitionAnnotations() (shard, cluster string) {
	if o.partial {
		return o.shard, o.cluster
	}
	return o.Annotations[kcpcache.AnnotationShard], o.Annotations[kcpcache.AnnotationCluster]
}

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
	out := *o
	out.ObjectMeta = metav1.ObjectMeta{}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// full returns the complete metadata: ObjectMeta itself, or for a partial
// object a fresh parse of the stored bytes (which parsed when the object was
// decoded, so parsing again cannot fail).
func (o *Object) full() *metav1.ObjectMeta {
	if !o.partial {
		return &o.ObjectMeta
	}
	m := &metav1.ObjectMeta{}
	if err := unmarshalMeta([]byte(o.rawMeta()), m); err != nil {
		return &o.ObjectMeta
	}
	m.ResourceVersion = o.ResourceVersion
	return m
}

// materialize makes ObjectMeta complete before it changes. Only copies are
// changed (the watch cache's objects never are), so this never races.
func (o *Object) materialize() {
	if o.partial {
		o.ObjectMeta = *o.full()
		o.partial, o.shard, o.cluster = false, "", ""
	}
}

// changed records that ObjectMeta no longer matches the stored bytes.
func (o *Object) changed() { o.rawMetaValid = false }

// GetObjectMeta returns the object itself, so that metadata read or changed
// through it goes through the methods below.
func (o *Object) GetObjectMeta() metav1.Object { return o }

// The getters of fields a partial object does not hold.

func (o *Object) GetGenerateName() string { return o.full().GenerateName }
func (o *Object) GetSelfLink() string     { return o.full().SelfLink }
func (o *Object) GetDeletionGracePeriodSeconds() *int64 {
	return o.full().DeletionGracePeriodSeconds
}
func (o *Object) GetAnnotations() map[string]string { return o.full().Annotations }
func (o *Object) GetFinalizers() []string           { return o.full().Finalizers }
func (o *Object) GetOwnerReferences() []metav1.OwnerReference {
	return o.full().OwnerReferences
}
func (o *Object) GetManagedFields() []metav1.ManagedFieldsEntry {
	return o.full().ManagedFields
}

// The setters shadow metav1.ObjectMeta's: each materializes the metadata and
// invalidates the stored bytes, except SetResourceVersion, whose value the
// stored bytes never contain.

func (o *Object) SetResourceVersion(v string) { o.ResourceVersion = v }

func (o *Object) SetNamespace(v string) { o.materialize(); o.Namespace = v; o.changed() }
func (o *Object) SetName(v string)      { o.materialize(); o.Name = v; o.changed() }
func (o *Object) SetGenerateName(v string) {
	o.materialize()
	o.GenerateName = v
	o.changed()
}
func (o *Object) SetUID(v types.UID)    { o.materialize(); o.UID = v; o.changed() }
func (o *Object) SetGeneration(v int64) { o.materialize(); o.Generation = v; o.changed() }
func (o *Object) SetSelfLink(v string)  { o.materialize(); o.SelfLink = v; o.changed() }
func (o *Object) SetCreationTimestamp(v metav1.Time) {
	o.materialize()
	o.CreationTimestamp = v
	o.changed()
}
func (o *Object) SetDeletionTimestamp(v *metav1.Time) {
	o.materialize()
	o.DeletionTimestamp = v
	o.changed()
}
func (o *Object) SetDeletionGracePeriodSeconds(v *int64) {
	o.materialize()
	o.DeletionGracePeriodSeconds = v
	o.changed()
}
func (o *Object) SetLabels(v map[string]string) { o.materialize(); o.Labels = v; o.changed() }
func (o *Object) SetAnnotations(v map[string]string) {
	o.materialize()
	o.Annotations = v
	o.changed()
}
func (o *Object) SetFinalizers(v []string) { o.materialize(); o.Finalizers = v; o.changed() }
func (o *Object) SetOwnerReferences(v []metav1.OwnerReference) {
	o.materialize()
	o.OwnerReferences = v
	o.changed()
}
func (o *Object) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.materialize()
	o.ManagedFields = v
	o.changed()
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
