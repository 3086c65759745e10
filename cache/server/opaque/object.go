package opaque

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Object is a schema-less API object. Its zero value is an empty object.
//
// An object decoded from storage is partial: it holds parsed only the
// metadata fields the watch cache and the registry read on every object
// (name, namespace, uid, resourceVersion, generation, timestamps, labels);
// the rest (annotations, finalizers, owner references, managedFields, ...)
// is read from the stored metadata bytes when asked for, and materialized
// before any change. The watch cache holds a partial object for every cached
// object, so its size matters: it is the stored bytes plus a fixed 224 bytes
// (the complete metav1.ObjectMeta alone is 248).
type Object struct {
	// TypeMeta is apiVersion and kind as the object was sent and stored.
	// Responses carry the requested version instead (see Serializer).
	metav1.TypeMeta

	// hot is the metadata of a partial object, the one with no meta.
	hot hotMeta
	// meta is the complete metadata of an object decoded from a request or
	// materialized; nil while the object is partial. Read and change the
	// metadata through the metav1.Object methods only.
	meta *metav1.ObjectMeta

	// data holds the object's JSON without apiVersion and kind: the
	// metadata object (data[:metaEnd]) followed by every other member,
	// comma-separated without braces (data[metaEnd:]). Copies share it.
	data    string
	metaEnd int
	// rawMetaValid says data[:metaEnd] is the metadata as stored (never with
	// a resourceVersion) and the metadata has not changed since. A partial
	// object decoded from storage always has valid raw metadata.
	rawMetaValid bool
	// shard and cluster are the partition annotations of a partial object.
	shard, cluster string
}

// hotMeta are the metadata fields a partial object holds parsed.
type hotMeta struct {
	name, namespace, resourceVersion string
	uid                              types.UID
	generation                       int64
	creationTimestamp                metav1.Time
	deletionTimestamp                *metav1.Time
	labels                           map[string]string
}

var (
	_ runtime.Object = &Object{}
	_ metav1.Object  = &Object{}
)

// NewObject returns an empty object of the given type.
func NewObject(apiVersion, kind string) *Object {
	return &Object{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
}

func (o *Object) dataString() string { return o.data }

// rawMeta returns the stored metadata bytes, or "" when they are not valid.
func (o *Object) rawMeta() string {
	if !o.rawMetaValid {
		return ""
	}
	return o.data[:o.metaEnd]
}

// Body returns the object's members other than apiVersion, kind and
// metadata, as comma-separated JSON members without braces.
func (o *Object) Body() string { return o.data[o.metaEnd:] }

// SetBody replaces the members other than apiVersion, kind and metadata. It
// must be comma-separated, compact JSON object members without braces.
func (o *Object) SetBody(b string) {
	o.materialize()
	o.data, o.metaEnd, o.rawMetaValid = b, 0, false
}

// PartitionAnnotations returns the kcp.io/shard and kcp.io/cluster
// annotations without materializing every annotation; the watch cache asks
// for them on every event.
func (o *Object) PartitionAnnotations() (shard, cluster string) {
	if o.meta == nil {
		return o.shard, o.cluster
	}
	return o.meta.Annotations[kcpcache.AnnotationShard], o.meta.Annotations[kcpcache.AnnotationCluster]
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
	if o.meta != nil {
		out.meta = o.meta.DeepCopy()
	}
	if o.hot.deletionTimestamp != nil {
		out.hot.deletionTimestamp = o.hot.deletionTimestamp.DeepCopy()
	}
	if o.hot.labels != nil {
		out.hot.labels = make(map[string]string, len(o.hot.labels))
		for k, v := range o.hot.labels {
			out.hot.labels[k] = v
		}
	}
	return &out
}

// full returns the complete metadata: meta itself, or for a partial object
// a fresh parse of the stored bytes (every field of which was checked when
// the object was decoded, so parsing again cannot fail), or for an object without stored
// metadata (an empty one) its hot fields.
func (o *Object) full() *metav1.ObjectMeta {
	if o.meta != nil {
		return o.meta
	}
	m := &metav1.ObjectMeta{}
	if raw := o.rawMeta(); raw != "" && unmarshalMeta([]byte(raw), m) == nil {
		m.ResourceVersion = o.hot.resourceVersion
		return m
	}
	h := &o.hot
	*m = metav1.ObjectMeta{
		Name: h.name, Namespace: h.namespace, UID: h.uid, ResourceVersion: h.resourceVersion, Generation: h.generation,
		CreationTimestamp: h.creationTimestamp, DeletionTimestamp: h.deletionTimestamp, Labels: h.labels,
	}
	return m
}

// materialize makes the metadata complete before it changes. Only copies are
// changed (the watch cache's objects never are), so this never races.
func (o *Object) materialize() {
	if o.meta == nil {
		o.meta = o.full()
		o.hot, o.shard, o.cluster = hotMeta{}, "", ""
	}
}

// changed records that the metadata no longer matches the stored bytes.
func (o *Object) changed() { o.rawMetaValid = false }

// GetObjectMeta returns the object itself, so that metadata read or changed
// through it goes through the methods below.
func (o *Object) GetObjectMeta() metav1.Object { return o }

// The getters of the fields a partial object holds.

func (o *Object) GetNamespace() string {
	if o.meta != nil {
		return o.meta.Namespace
	}
	return o.hot.namespace
}

func (o *Object) GetName() string {
	if o.meta != nil {
		return o.meta.Name
	}
	return o.hot.name
}

func (o *Object) GetUID() types.UID {
	if o.meta != nil {
		return o.meta.UID
	}
	return o.hot.uid
}

func (o *Object) GetResourceVersion() string {
	if o.meta != nil {
		return o.meta.ResourceVersion
	}
	return o.hot.resourceVersion
}

func (o *Object) GetGeneration() int64 {
	if o.meta != nil {
		return o.meta.Generation
	}
	return o.hot.generation
}

func (o *Object) GetCreationTimestamp() metav1.Time {
	if o.meta != nil {
		return o.meta.CreationTimestamp
	}
	return o.hot.creationTimestamp
}

func (o *Object) GetDeletionTimestamp() *metav1.Time {
	if o.meta != nil {
		return o.meta.DeletionTimestamp
	}
	return o.hot.deletionTimestamp
}

func (o *Object) GetLabels() map[string]string {
	if o.meta != nil {
		return o.meta.Labels
	}
	return o.hot.labels
}

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

// SetResourceVersion sets the one field the stored bytes never contain, so
// it keeps them valid and a partial object partial.
func (o *Object) SetResourceVersion(v string) {
	if o.meta != nil {
		o.meta.ResourceVersion = v
		return
	}
	o.hot.resourceVersion = v
}

// The other setters materialize the metadata and invalidate the stored
// bytes.

func (o *Object) SetNamespace(v string) { o.materialize(); o.meta.Namespace = v; o.changed() }
func (o *Object) SetName(v string)      { o.materialize(); o.meta.Name = v; o.changed() }
func (o *Object) SetGenerateName(v string) {
	o.materialize()
	o.meta.GenerateName = v
	o.changed()
}
func (o *Object) SetUID(v types.UID)    { o.materialize(); o.meta.UID = v; o.changed() }
func (o *Object) SetGeneration(v int64) { o.materialize(); o.meta.Generation = v; o.changed() }
func (o *Object) SetSelfLink(v string)  { o.materialize(); o.meta.SelfLink = v; o.changed() }
func (o *Object) SetCreationTimestamp(v metav1.Time) {
	o.materialize()
	o.meta.CreationTimestamp = v
	o.changed()
}
func (o *Object) SetDeletionTimestamp(v *metav1.Time) {
	o.materialize()
	o.meta.DeletionTimestamp = v
	o.changed()
}
func (o *Object) SetDeletionGracePeriodSeconds(v *int64) {
	o.materialize()
	o.meta.DeletionGracePeriodSeconds = v
	o.changed()
}
func (o *Object) SetLabels(v map[string]string) { o.materialize(); o.meta.Labels = v; o.changed() }
func (o *Object) SetAnnotations(v map[string]string) {
	o.materialize()
	o.meta.Annotations = v
	o.changed()
}
func (o *Object) SetFinalizers(v []string) { o.materialize(); o.meta.Finalizers = v; o.changed() }
func (o *Object) SetOwnerReferences(v []metav1.OwnerReference) {
	o.materialize()
	o.meta.OwnerReferences = v
	o.changed()
}
func (o *Object) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.materialize()
	o.meta.ManagedFields = v
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
