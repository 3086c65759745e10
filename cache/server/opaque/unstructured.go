package opaque

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Object implements runtime.Unstructured for the upstream code that works on
// maps: the field manager (managedFields, server-side apply) converts objects
// with runtime.DefaultUnstructuredConverter, which asks for this interface.
// These conversions decode the whole object; only writes pay for them.
var _ runtime.Unstructured = &Object{}

// NewEmptyInstance implements runtime.Unstructured.
func (o *Object) NewEmptyInstance() runtime.Unstructured {
	return &Object{TypeMeta: o.TypeMeta}
}

// UnstructuredContent returns the object as nested maps; changing them does
// not change the object.
func (o *Object) UnstructuredContent() map[string]interface{} {
	b, err := appendObject(nil, o, o.APIVersion, o.Kind)
	if err != nil {
		// Only metadata that cannot be marshalled gets here.
		panic(fmt.Sprintf("encoding %s %s: %v", o.Kind, o.GetName(), err))
	}
	var m map[string]interface{}
	if err := utiljson.Unmarshal(b, &m); err != nil {
		panic(fmt.Sprintf("decoding %s %s: %v", o.Kind, o.GetName(), err))
	}
	return m
}

// SetUnstructuredContent replaces the object with content.
func (o *Object) SetUnstructuredContent(content map[string]interface{}) {
	b, err := json.Marshal(content)
	if err == nil {
		err = decodeRequest(b, o)
	}
	if err != nil {
		panic(fmt.Sprintf("setting unstructured content: %v", err))
	}
}

// IsList implements runtime.Unstructured.
func (o *Object) IsList() bool { return false }

// EachListItem implements runtime.Unstructured; an Object is not a list.
func (o *Object) EachListItem(func(runtime.Object) error) error {
	return fmt.Errorf("%s is not a list", o.Kind)
}

// EachListItemWithAlloc implements runtime.Unstructured; an Object is not a list.
func (o *Object) EachListItemWithAlloc(func(runtime.Object) error) error {
	return fmt.Errorf("%s is not a list", o.Kind)
}

// MarshalJSON writes the object with its own apiVersion and kind. Upstream
// code that reflects over objects (structured-merge-diff's deduced types,
// runtime.DefaultUnstructuredConverter) uses it instead of the Go fields,
// which hold only part of the object.
func (o *Object) MarshalJSON() ([]byte, error) {
	return appendObject(nil, o, o.APIVersion, o.Kind)
}

// UnmarshalJSON replaces the object with a complete object's JSON.
func (o *Object) UnmarshalJSON(b []byte) error { return decodeRequest(b, o) }

// ToUnstructured implements structured-merge-diff's UnstructuredConverter,
// which server-side apply uses to read the live object.
func (o *Object) ToUnstructured() interface{} { return o.UnstructuredContent() }

// FromUnstructured turns an upstream unstructured object (what server-side
// apply produces) into an Object.
func FromUnstructured(u *unstructured.Unstructured) (*Object, error) {
	b, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	o := &Object{}
	if err := decodeRequest(b, o); err != nil {
		return nil, err
	}
	return o, nil
}
