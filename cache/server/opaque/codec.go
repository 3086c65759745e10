package opaque

import (
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultMaxObjectBytes is the largest object Codec stores: etcd's default
// request limit (1.5 MiB) less room for the key and the transaction.
const DefaultMaxObjectBytes = 1536<<10 - 8<<10

// Codec is the storage codec of schema-less objects: JSON as sent, without
// resourceVersion. Objects it decodes keep their stored bytes (see Object).
type Codec struct {
	// MaxObjectBytes refuses larger objects with 413 before etcd would
	// refuse them with an internal error; DefaultMaxObjectBytes when 0.
	MaxObjectBytes int
}

var _ runtime.Codec = Codec{}

// Encode implements runtime.Encoder.
func (c Codec) Encode(obj runtime.Object, w io.Writer) error {
	o, ok := obj.(*Object)
	if !ok {
		return fmt.Errorf("opaque storage codec cannot encode %T", obj)
	}
	b, err := appendStored(make([]byte, 0, len(o.dataString())+512), o)
	if err != nil {
		return err
	}
	limit := c.MaxObjectBytes
	if limit <= 0 {
		limit = DefaultMaxObjectBytes
	}
	if len(b) > limit {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the object is %d bytes as stored; the limit is %d bytes", len(b), limit))
	}
	_, err = w.Write(b)
	return err
}

// Decode implements runtime.Decoder.
func (c Codec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	o, ok := into.(*Object)
	switch {
	case into == nil:
		o = &Object{}
	case !ok:
		return nil, nil, fmt.Errorf("opaque storage codec cannot decode into %T", into)
	}
	if err := decodeStored(data, o); err != nil {
		return nil, nil, err
	}
	gvk := o.GroupVersionKind()
	return o, &gvk, nil
}

// Identifier implements runtime.Encoder.
func (Codec) Identifier() runtime.Identifier { return "opaque-storage-json" }
