package opaque

import (
	"encoding/json"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appendObject appends o's JSON with the given apiVersion and kind. When o
// still holds the metadata bytes it was decoded from, it copies them and
// splices in the resourceVersion; otherwise it encodes the parsed metadata.
func appendObject(b []byte, o *Object, apiVersion, kind string) ([]byte, error) {
	b = append(b, `{"apiVersion":`...)
	b = appendString(b, apiVersion)
	b = append(b, `,"kind":`...)
	b = appendString(b, kind)
	b = append(b, `,"metadata":`...)
	var err error
	if b, err = appendMeta(b, o); err != nil {
		return nil, err
	}
	if body := o.Body(); body != "" {
		b = append(b, ',')
		b = append(b, body...)
	}
	return append(b, '}'), nil
}

func appendMeta(b []byte, o *Object) ([]byte, error) {
	raw := o.rawMeta()
	if raw == "" {
		m, err := json.Marshal(o.full())
		if err != nil {
			return nil, err
		}
		return append(b, m...), nil
	}
	rv := o.GetResourceVersion()
	if rv == "" {
		return append(b, raw...), nil
	}
	b = append(b, `{"resourceVersion":`...)
	b = appendString(b, rv)
	if len(raw) > 2 { // more than "{}"
		b = append(b, ',')
	}
	return append(b, raw[1:]...), nil
}

// appendStored appends o as storage holds it: as sent, without
// resourceVersion (etcd's revision is the resourceVersion). Metadata that
// changed since it was read is encoded from the parsed fields.
func appendStored(b []byte, o *Object) ([]byte, error) {
	b = append(b, `{"apiVersion":`...)
	b = appendString(b, o.APIVersion)
	b = append(b, `,"kind":`...)
	b = appendString(b, o.Kind)
	b = append(b, `,"metadata":`...)
	if raw := o.rawMeta(); raw != "" {
		b = append(b, raw...)
	} else {
		m := *o.full()
		m.ResourceVersion = ""
		meta, err := json.Marshal(&m)
		if err != nil {
			return nil, err
		}
		b = append(b, meta...)
	}
	if body := o.Body(); body != "" {
		b = append(b, ',')
		b = append(b, body...)
	}
	return append(b, '}'), nil
}

// appendListHeader appends a list's opening up to and including `"items":[`.
func appendListHeader(b []byte, l *metav1.ListMeta, apiVersion, kind string) []byte {
	b = append(b, `{"apiVersion":`...)
	b = appendString(b, apiVersion)
	b = append(b, `,"kind":`...)
	b = appendString(b, kind)
	b = append(b, `,"metadata":{`...)
	sep := false
	field := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
	}
	if l.ResourceVersion != "" {
		field("resourceVersion")
		b = appendString(b, l.ResourceVersion)
	}
	if l.Continue != "" {
		field("continue")
		b = appendString(b, l.Continue)
	}
	if l.RemainingItemCount != nil {
		field("remainingItemCount")
		b = strconv.AppendInt(b, *l.RemainingItemCount, 10)
	}
	return append(b, `},"items":[`...)
}
