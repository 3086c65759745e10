package opaque

import (
	"bufio"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

// metaScheme knows the meta.k8s.io types a handler may encode next to the
// served objects: Status, WatchEvent, Table, PartialObjectMetadata.
var metaScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(metav1.AddMetaToScheme(s))
	utilruntime.Must(metav1beta1.AddMetaToScheme(s))
	return s
}()

// Type is what one served type encodes as.
type Type struct {
	Group, Kind, ListKind string
}

// Serializer is the negotiated serializer of one served type. It speaks JSON,
// and YAML for server-side apply and for clients that send YAML (converted to
// JSON before decoding; objects are answered in JSON, which is valid YAML).
// With WithCBOR it also answers in CBOR (application/cbor) the clients that
// ask for it, JSON staying the default. A request body in any other media
// type than JSON and YAML, protobuf and CBOR included, is refused with 415
// before anything is decoded (request bodies are JSON: the stored form).
type Serializer struct {
	t    Type
	info []runtime.SerializerInfo
	// yaml is the serializer of the YAML media type, to recognize it in
	// DecoderToVersion.
	yaml runtime.Serializer
}

var _ runtime.NegotiatedSerializer = &Serializer{}

// Option changes what a Serializer speaks.
type Option func(*Serializer)

// WithCBOR makes a Serializer answer in CBOR too, after JSON and YAML: a
// client gets CBOR only when its Accept header prefers it. Objects are
// transcoded from their stored JSON as they are written.
func WithCBOR() Option {
	return func(s *Serializer) {
		info := cbor.NewSerializerInfo(metaScheme, metaScheme)
		// Requests bodies stay JSON (and YAML): a CBOR body is refused
		// with 415 before it is decoded, and client-go falls back to JSON.
		s.info = append(s.info, info)
	}
}

// NewSerializer returns the negotiated serializer of type t.
func NewSerializer(t Type, opts ...Option) *Serializer {
	plain := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, metaScheme, metaScheme, jsonserializer.SerializerOptions{})
	pretty := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, metaScheme, metaScheme, jsonserializer.SerializerOptions{Pretty: true})
	yaml := jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, metaScheme, metaScheme, jsonserializer.SerializerOptions{Yaml: true})
	s := &Serializer{t: t, yaml: yaml, info: []runtime.SerializerInfo{{
		MediaType:        runtime.ContentTypeJSON,
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       plain,
		PrettySerializer: pretty,
		StrictSerializer: plain,
		StreamSerializer: &runtime.StreamSerializerInfo{
			EncodesAsText: true,
			Serializer:    plain,
			Framer:        jsonserializer.Framer,
		},
	}, {
		MediaType:        runtime.ContentTypeYAML,
		MediaTypeType:    "application",
		MediaTypeSubType: "yaml",
		EncodesAsText:    true,
		Serializer:       yaml,
		StrictSerializer: yaml,
	}}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// SupportedMediaTypes implements runtime.NegotiatedSerializer.
func (s *Serializer) SupportedMediaTypes() []runtime.SerializerInfo { return s.info }

// EncoderForVersion returns an encoder that writes served objects as the
// requested version: their stored bytes with apiVersion set to gv and kind to
// the type's kind. Everything else (Status, WatchEvent) goes to enc.
//
// When enc is upstream's CBOR serializer (as negotiated for a client that
// asked for application/cbor), served objects are written as CBOR, the
// transcoding of the same JSON.
func (s *Serializer) EncoderForVersion(enc runtime.Encoder, gv runtime.GroupVersioner) runtime.Encoder {
	e := &encoder{t: s.t, other: runtime.WithVersionEncoder{Version: gv, Encoder: enc, ObjectTyper: metaScheme}}
	if v, ok := gv.(schema.GroupVersion); ok {
		e.apiVersion = v.String()
	}
	format := "opaque-json:"
	if e.cbor = enc != nil && enc.Identifier() == cborIdentifier; e.cbor {
		format = "opaque-cbor:"
	}
	e.id = runtime.Identifier(format + e.apiVersion + ":" + s.t.Group + "/" + s.t.Kind)
	return e
}

// cborIdentifier is the Identifier of upstream's CBOR serializer.
var cborIdentifier = cbor.NewSerializer(nil, nil).Identifier()

// DecoderToVersion returns a decoder of request bodies into Objects; other
// targets go to dec.
func (s *Serializer) DecoderToVersion(dec runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return &decoder{t: s.t, other: dec, yaml: dec == runtime.Decoder(s.yaml)}
}

type encoder struct {
	t          Type
	apiVersion string // empty: keep each object's own
	id         runtime.Identifier
	other      runtime.Encoder
	// cbor writes served objects as CBOR instead of JSON.
	cbor bool
}

func (e *encoder) Identifier() runtime.Identifier { return e.id }

func (e *encoder) Encode(obj runtime.Object, w io.Writer) error {
	// The watch cache wraps objects to share one encoding among watchers.
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.CacheEncode(e.id, e.encode, w)
	}
	return e.encode(obj, w)
}

func (e *encoder) encode(obj runtime.Object, w io.Writer) error {
	switch t := obj.(type) {
	case *Object:
		b, err := appendObject(make([]byte, 0, len(t.dataString())+128), t, e.version(t.APIVersion), kind(e.t.Kind, t.Kind))
		if err != nil {
			return err
		}
		if e.cbor {
			if b, err = appendCBORFromJSON(append(make([]byte, 0, len(b)), cborSelfDescribed...), b); err != nil {
				return err
			}
		}
		_, err = w.Write(b)
		return err
	case *ObjectList:
		if e.cbor {
			return e.encodeListCBOR(t, w)
		}
		return e.encodeList(t, w)
	default:
		return e.other.Encode(obj, w)
	}
}

// encodeList streams a list through a buffer: one write per 64 KiB instead
// of one per item, and never the whole list in memory.
func (e *encoder) encodeList(l *ObjectList, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	b := appendListHeader(make([]byte, 0, 4096), &l.ListMeta, e.version(l.APIVersion), kind(e.t.ListKind, l.Kind))
	var err error
	for i := range l.Items {
		if i > 0 {
			b = append(b, ',')
		}
		o := &l.Items[i]
		if b, err = appendObject(b, o, e.version(o.APIVersion), kind(e.t.Kind, o.Kind)); err != nil {
			return err
		}
		if len(b) >= 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, "]}"...)
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}

// encodeListCBOR is encodeList in CBOR: the list's head, then each item
// transcoded from its JSON.
func (e *encoder) encodeListCBOR(l *ObjectList, w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	b := append(make([]byte, 0, 4096), cborSelfDescribed...)
	b = appendCBORHead(b, cborMap, 4)
	b = appendCBORText(b, "apiVersion")
	b = appendCBORText(b, e.version(l.APIVersion))
	b = appendCBORText(b, "kind")
	b = appendCBORText(b, kind(e.t.ListKind, l.Kind))
	b = appendCBORText(b, "metadata")
	fields := 0
	if l.ResourceVersion != "" {
		fields++
	}
	if l.Continue != "" {
		fields++
	}
	if l.RemainingItemCount != nil {
		fields++
	}
	b = appendCBORHead(b, cborMap, uint64(fields))
	if l.ResourceVersion != "" {
		b = appendCBORText(appendCBORText(b, "resourceVersion"), l.ResourceVersion)
	}
	if l.Continue != "" {
		b = appendCBORText(appendCBORText(b, "continue"), l.Continue)
	}
	if n := l.RemainingItemCount; n != nil {
		b = appendCBORText(b, "remainingItemCount")
		if *n >= 0 {
			b = appendCBORHead(b, cborUint, uint64(*n))
		} else {
			b = appendCBORHead(b, cborNegint, uint64(-(*n + 1)))
		}
	}
	b = appendCBORText(b, "items")
	b = appendCBORHead(b, cborArray, uint64(len(l.Items)))
	var item []byte
	var err error
	for i := range l.Items {
		o := &l.Items[i]
		if item, err = appendObject(item[:0], o, e.version(o.APIVersion), kind(e.t.Kind, o.Kind)); err != nil {
			return err
		}
		if b, err = appendCBORFromJSON(b, item); err != nil {
			return err
		}
		if len(b) >= 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}

func (e *encoder) version(own string) string {
	if e.apiVersion != "" {
		return e.apiVersion
	}
	return own
}

// kind is the type's kind (its list kind for a list): a stored object may
// carry whatever its writer sent under an older declaration.
func kind(typeKind, own string) string {
	if typeKind != "" {
		return typeKind
	}
	return own
}

type decoder struct {
	t     Type
	other runtime.Decoder
	// yaml bodies are converted to JSON first.
	yaml bool
}

func (d *decoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	var o *Object
	switch t := into.(type) {
	case nil:
		o = &Object{}
	case *Object:
		o = t
	default:
		return d.other.Decode(data, defaults, into)
	}
	if d.yaml {
		var err error
		if data, err = sigsyaml.YAMLToJSON(data); err != nil {
			return nil, nil, fmt.Errorf("the request body is not valid YAML: %w", err)
		}
	}
	if err := decodeRequest(data, o); err != nil {
		return nil, nil, err
	}
	// Like upstream's unstructured decoding, a body must say what it is;
	// whether that is the type served here is the strategy's question.
	gvk := o.GroupVersionKind()
	if o.APIVersion == "" || o.Kind == "" {
		return nil, &gvk, fmt.Errorf("apiVersion and kind must be set")
	}
	return o, &gvk, nil
}
