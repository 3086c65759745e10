package opaque

import (
	"strconv"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// maxFastDepth bounds the nesting fastMeta skips through; deeper values go
// to the general decoder, whose own bound (10,000) then applies.
const maxFastDepth = 64

// fastMeta decodes stored metadata into m as
// kjson.UnmarshalCaseSensitivePreserveInts decodes it into a storedMeta,
// for the shape Codec writes: keys and kept strings without escapes, each
// known field once, integers as plain digits, no nulls where a value is
// kept. It reports false for anything else, and m is
// then to be decoded by the general decoder, which says whether and how it
// decodes; true means the general decoder would have succeeded with the
// same m. A watch cache's fill decodes the metadata of every stored object,
// and the general decoder's reflection and its validation pass were most
// of a restart's decoding (docs/performance.md, "Restart").
//
// FuzzFastMeta and TestDecodeStoredAcceptsWhatObjectMetaAccepts hold it to
// the general decoder.
func fastMeta(data []byte, m *storedMeta) bool {
	p := metaParser{data: data}
	var seen uint32
	ok := p.object(func(key []byte) bool {
		bit, ok := fieldBits[string(key)]
		if !ok {
			return p.skip(0)
		}
		if seen&bit != 0 {
			return false // the general decoder merges or replaces: its call
		}
		seen |= bit
		switch string(key) {
		case "name":
			m.Name, ok = p.plainString()
		case "generateName":
			m.GenerateName, ok = p.plainString()
		case "namespace":
			m.Namespace, ok = p.plainString()
		case "selfLink":
			m.SelfLink, ok = p.plainString()
		case "uid":
			var s string
			s, ok = p.plainString()
			m.UID = types.UID(s)
		case "resourceVersion":
			m.ResourceVersion, ok = p.plainString()
		case "generation":
			m.Generation, ok = p.int64()
		case "creationTimestamp":
			m.CreationTimestamp, ok = p.time()
		case "deletionTimestamp":
			var t metav1.Time
			t, ok = p.time()
			m.DeletionTimestamp = &t
		case "deletionGracePeriodSeconds":
			var n int64
			n, ok = p.int64()
			m.DeletionGracePeriodSeconds = &n
		case "labels":
			m.Labels, ok = p.stringMap()
		case "annotations":
			m.Annotations, ok = p.stringMap()
		case "finalizers":
			m.Finalizers, ok = p.stringList()
		case "managedFields":
			m.ManagedFields, ok = p.managedFields()
		case "ownerReferences":
			m.OwnerReferences, ok = p.ownerReferences()
		}
		return ok
	})
	p.space()
	return ok && p.i == len(p.data)
}

// fieldBits name the fields of storedMeta, each with a bit of its own.
var fieldBits = func() map[string]uint32 {
	m := map[string]uint32{}
	for i, name := range []string{"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
		"generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
		"annotations", "ownerReferences", "finalizers", "managedFields"} {
		m[name] = 1 << i
	}
	return m
}()

// metaParser reads JSON text from data at i; every method reports false
// where the text is not of the shape fastMeta takes, valid or not.
type metaParser struct {
	data []byte
	i    int
}

func (p *metaParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek is the next byte after white space, 0 at the end.
func (p *metaParser) peek() byte {
	p.space()
	if p.i >= len(p.data) {
		return 0
	}
	return p.data[p.i]
}

// object reads an object, calling member with each key (the parser then at
// its value) until member reports false. Keys are plain: they are matched
// against field names.
func (p *metaParser) object(member func(key []byte) bool) bool {
	return p.members(p.plainBytes, member)
}

// members reads an object whose keys key reads, calling member with each
// (the parser then at its value) until member reports false.
func (p *metaParser) members(key func() ([]byte, bool), member func(key []byte) bool) bool {
	if p.peek() != '{' {
		return false
	}
	p.i++
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		k, ok := key()
		if !ok || p.peek() != ':' {
			return false
		}
		p.i++
		p.space()
		if !member(k) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling element with the parser at each element.
func (p *metaParser) array(element func() bool) bool {
	if p.peek() != '[' {
		return false
	}
	p.i++
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		p.space()
		if !element() {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

// plainBytes reads a string without escapes or control characters, whose
// text is valid UTF-8: its bytes are its value.
func (p *metaParser) plainBytes() ([]byte, bool) {
	if p.peek() != '"' {
		return nil, false
	}
	start := p.i + 1
	for i := start; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '"':
			p.i = i + 1
			s := p.data[start:i]
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func (p *metaParser) plainString() (string, bool) {
	b, ok := p.plainBytes()
	return string(b), ok
}

// int64 reads an integer in JSON's grammar that fits an int64.
func (p *metaParser) int64() (int64, bool) {
	start := p.i
	i := start
	if i < len(p.data) && p.data[i] == '-' {
		i++
	}
	digits := i
	for i < len(p.data) && p.data[i] >= '0' && p.data[i] <= '9' {
		i++
	}
	if i == digits || (p.data[digits] == '0' && i > digits+1) {
		return 0, false
	}
	if i < len(p.data) {
		switch p.data[i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(p.data[start:i]), 10, 64)
	if err != nil {
		return 0, false
	}
	p.i = i
	return n, true
}

// time reads a time as metav1.Time.UnmarshalJSON does: RFC 3339, local.
func (p *metaParser) time() (metav1.Time, bool) {
	s, ok := p.plainString()
	if !ok {
		return metav1.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return metav1.Time{}, false
	}
	return metav1.Time{Time: t.Local()}, true
}

func (p *metaParser) stringMap() (map[string]string, bool) {
	m := map[string]string{}
	ok := p.object(func(key []byte) bool {
		v, ok := p.plainString()
		m[string(key)] = v
		return ok
	})
	return m, ok
}

func (p *metaParser) stringList() ([]string, bool) {
	l := []string{}
	ok := p.array(func() bool {
		v, ok := p.plainString()
		l = append(l, v)
		return ok
	})
	return l, ok
}

func (p *metaParser) ownerReferences() ([]metav1.OwnerReference, bool) {
	refs := []metav1.OwnerReference{}
	ok := p.array(func() bool {
		var r metav1.OwnerReference
		ok := p.object(func(key []byte) bool {
			var ok bool
			switch string(key) {
			case "apiVersion":
				r.APIVersion, ok = p.plainString()
			case "kind":
				r.Kind, ok = p.plainString()
			case "name":
				r.Name, ok = p.plainString()
			case "uid":
				var s string
				s, ok = p.plainString()
				r.UID = types.UID(s)
			case "controller":
				r.Controller, ok = p.bool()
			case "blockOwnerDeletion":
				r.BlockOwnerDeletion, ok = p.bool()
			default:
				ok = p.skip(0)
			}
			return ok
		})
		refs = append(refs, r)
		return ok
	})
	return refs, ok
}

func (p *metaParser) bool() (*bool, bool) {
	v := p.peek() == 't'
	if !p.literal(strconv.FormatBool(v)) {
		return nil, false
	}
	return &v, true
}

// managedFields checks the entries as checkedManagedFieldsEntry does and
// counts them.
func (p *metaParser) managedFields() ([]checkedManagedFieldsEntry, bool) {
	n := 0
	ok := p.array(func() bool {
		n++
		if p.peek() == 'n' {
			return p.literal("null")
		}
		return p.object(func(key []byte) bool {
			switch string(key) {
			case "manager", "operation", "apiVersion", "fieldsType", "subresource":
				if p.peek() == 'n' {
					return p.literal("null")
				}
				return p.peek() == '"' && p.skip(0)
			case "time":
				if p.peek() == 'n' {
					return p.literal("null")
				}
				_, ok := p.time()
				return ok
			}
			return p.skip(0) // fieldsV1, or unknown
		})
	})
	return make([]checkedManagedFieldsEntry, n), ok
}

func (p *metaParser) literal(word string) bool {
	if len(p.data)-p.i < len(word) || string(p.data[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	return true
}

// skip reads any JSON value, checking its grammar.
func (p *metaParser) skip(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	switch c := p.peek(); {
	case c == '{':
		return p.skippedObject(depth)
	case c == '[':
		return p.array(func() bool { return p.skip(depth + 1) })
	case c == '"':
		return p.skipString()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.skipNumber()
	}
	return false
}

// skippedObject reads an object whose members are all skipped: no key is
// kept or matched against a field, so a key may hold any escapes, as
// managedFields' fieldsV1 keys do ("k:{\"group\":...}", "v:\"...\"").
func (p *metaParser) skippedObject(depth int) bool {
	return p.members(p.skippedKey, func([]byte) bool { return p.skip(depth + 1) })
}

// skippedKey reads a key that is not kept: any string.
func (p *metaParser) skippedKey() ([]byte, bool) {
	return nil, p.peek() == '"' && p.skipString()
}

// skipString reads a string with any valid escapes; its bytes need not be
// UTF-8 (the general decoder replaces what is not).
func (p *metaParser) skipString() bool {
	for i := p.i + 1; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '"':
			p.i = i + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			i++
			if i >= len(p.data) {
				return false
			}
			switch p.data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(p.data) {
					return false
				}
				for _, h := range p.data[i+1 : i+5] {
					if !isHex(h) {
						return false
					}
				}
				i += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// skipNumber reads a number in JSON's grammar.
func (p *metaParser) skipNumber() bool {
	d, i := p.data, p.i
	digits := func() int {
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	p.i = i
	return true
}
