package opaque

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// CBOR major types (RFC 8949 section 3.1), shifted into a head's high bits.
const (
	cborUint   = 0 << 5
	cborNegint = 1 << 5
	cborText   = 3 << 5
	cborArray  = 4 << 5
	cborMap    = 5 << 5
)

// cborSelfDescribed is the head of tag 55799 that upstream's CBOR encoder
// writes before every data item it encodes, and its decoder recognizes.
var cborSelfDescribed = []byte{0xd9, 0xd9, 0xf7}

// errDuplicateKey is a JSON object with a member name twice. JSON decoders
// keep the last; CBOR decoders refuse such a map, and with it the whole
// response. Stored objects may have one below metadata (the cache never
// looks there), so such an object takes the slow path.
var errDuplicateKey = errors.New("duplicate member name")

// cborSlow is the slow path of the transcoding: upstream's CBOR encoding of
// the JSON as upstream's unstructured decoding reads it.
var cborSlow = cbor.NewSerializer(nil, nil)

// appendCBORHead appends the head of a data item of the given major type
// and argument, in its shortest form.
func appendCBORHead(b []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(b, major|byte(n))
	case n <= math.MaxUint8:
		return append(b, major|24, byte(n))
	case n <= math.MaxUint16:
		return append(b, major|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(b, major|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		return append(b, major|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// appendCBORText appends s as a CBOR text string.
func appendCBORText(b []byte, s string) []byte {
	b = appendCBORHead(b, cborText, uint64(len(s)))
	return append(b, s...)
}

// appendCBORFromJSON appends the CBOR encoding of the JSON value data,
// which decodes, with upstream's CBOR decoder, to what data decodes to with
// upstream's JSON decoder into unstructured content: integers that fit
// int64 as integers, other numbers as float64, invalid UTF-8 in strings
// replaced, and the last of duplicate member names.
func appendCBORFromJSON(b, data []byte) ([]byte, error) {
	t := transcoder{}
	out, i, err := t.value(b, data, 0)
	if err == nil && skipSpace(data, i) != len(data) {
		err = fmt.Errorf("unexpected data after the JSON value at offset %d", i)
	}
	if errors.Is(err, errDuplicateKey) {
		return appendCBORSlow(b, data)
	}
	return out, err
}

// appendCBORSlow decodes data as upstream decodes JSON into unstructured
// content and encodes that with upstream's CBOR encoder.
func appendCBORSlow(b, data []byte) ([]byte, error) {
	var v interface{}
	if err := utiljson.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("not a JSON object")
	}
	var buf bytes.Buffer
	if err := cborSlow.Encode(&unstructured.Unstructured{Object: m}, &buf); err != nil {
		return nil, err
	}
	return append(b, bytes.TrimPrefix(buf.Bytes(), cborSelfDescribed)...), nil
}

// transcoder writes definite-length maps and arrays: each gets one byte
// for its head, widened once its length is known to need more.
type transcoder struct {
	// keys are the offsets in the output of the member names of the maps
	// being written, to find duplicates.
	keys [][2]int
	seen map[string]struct{}
}

func (t *transcoder) value(b, data []byte, i int) ([]byte, int, error) {
	i = skipSpace(data, i)
	if i >= len(data) {
		return nil, 0, fmt.Errorf("unexpected end of JSON")
	}
	switch c := data[i]; c {
	case '{', '[':
		return t.container(b, data, i)
	case '"':
		return appendCBORString(b, data, i)
	case 't':
		return literal(b, data, i, "true", 0xf5)
	case 'f':
		return literal(b, data, i, "false", 0xf4)
	case 'n':
		return literal(b, data, i, "null", 0xf6)
	default:
		return appendCBORNumber(b, data, i)
	}
}

func (t *transcoder) container(b, data []byte, i int) ([]byte, int, error) {
	isMap := data[i] == '{'
	closing, major := byte(']'), byte(cborArray)
	if isMap {
		closing, major = '}', cborMap
	}
	start := len(b)
	b = append(b, 0) // the head, written once the length is known
	firstKey := len(t.keys)
	n := uint64(0)
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == closing {
		i++
	} else {
		for {
			var err error
			if isMap {
				i = skipSpace(data, i)
				from := len(b)
				if i >= len(data) || data[i] != '"' {
					return nil, 0, fmt.Errorf("expected a member name at offset %d", i)
				}
				if b, i, err = appendCBORString(b, data, i); err != nil {
					return nil, 0, err
				}
				t.keys = append(t.keys, [2]int{from, len(b)})
				if i = skipSpace(data, i); i >= len(data) || data[i] != ':' {
					return nil, 0, fmt.Errorf("expected ':' at offset %d", i)
				}
				i++
			}
			if b, i, err = t.value(b, data, i); err != nil {
				return nil, 0, err
			}
			n++
			i = skipSpace(data, i)
			if i >= len(data) {
				return nil, 0, fmt.Errorf("unterminated object or array")
			}
			if data[i] == ',' {
				i++
				continue
			}
			if data[i] != closing {
				return nil, 0, fmt.Errorf("unexpected %q at offset %d", data[i], i)
			}
			i++
			break
		}
	}
	if isMap {
		if t.duplicate(b, t.keys[firstKey:]) {
			return nil, 0, errDuplicateKey
		}
		t.keys = t.keys[:firstKey]
	}
	if n < 24 {
		b[start] = major | byte(n)
		return b, i, nil
	}
	var head [9]byte
	h := appendCBORHead(head[:0], major, n)
	end := len(b)
	b = append(b, h[1:]...) // room for the wider head
	copy(b[start+len(h):], b[start+1:end])
	copy(b[start:], h)
	return b, i, nil
}

// duplicate reports whether two of keys name the same bytes of b.
func (t *transcoder) duplicate(b []byte, keys [][2]int) bool {
	if len(keys) <= 8 {
		for j := 1; j < len(keys); j++ {
			for k := 0; k < j; k++ {
				if bytes.Equal(b[keys[j][0]:keys[j][1]], b[keys[k][0]:keys[k][1]]) {
					return true
				}
			}
		}
		return false
	}
	if t.seen == nil {
		t.seen = make(map[string]struct{}, len(keys))
	}
	clear(t.seen)
	for _, k := range keys {
		s := string(b[k[0]:k[1]])
		if _, ok := t.seen[s]; ok {
			return true
		}
		t.seen[s] = struct{}{}
	}
	return false
}

func literal(b, data []byte, i int, word string, item byte) ([]byte, int, error) {
	if !bytes.HasPrefix(data[i:], []byte(word)) {
		return nil, 0, fmt.Errorf("invalid JSON at offset %d", i)
	}
	return append(b, item), i + len(word), nil
}

// appendCBORString appends the JSON string at data[i] as a text string.
func appendCBORString(b, data []byte, i int) ([]byte, int, error) {
	end, err := skipString(data, i)
	if err != nil {
		return nil, 0, err
	}
	raw := data[i+1 : end-1]
	plain := true
	for _, c := range raw {
		if c < 0x20 || c == '\\' || c >= 0x80 {
			plain = false
			break
		}
	}
	if plain || (bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) && !hasControl(raw)) {
		b = appendCBORHead(b, cborText, uint64(len(raw)))
		return append(b, raw...), end, nil
	}
	var s string
	if err := json.Unmarshal(data[i:end], &s); err != nil {
		return nil, 0, err
	}
	return appendCBORText(b, s), end, nil
}

func hasControl(raw []byte) bool {
	for _, c := range raw {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// appendCBORNumber appends the JSON number at data[i] as upstream's JSON
// decoding reads it into unstructured content: an integer if it has no
// fraction or exponent and fits int64, else a float64.
func appendCBORNumber(b, data []byte, i int) ([]byte, int, error) {
	end := i
	integer := true
	for ; end < len(data); end++ {
		c := data[end]
		if c >= '0' && c <= '9' || c == '-' || c == '+' {
			continue
		}
		if c == '.' || c == 'e' || c == 'E' {
			integer = false
			continue
		}
		break
	}
	s := string(data[i:end])
	if s == "" {
		return nil, 0, fmt.Errorf("invalid JSON at offset %d", i)
	}
	if integer {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if n >= 0 {
				return appendCBORHead(b, cborUint, uint64(n)), end, nil
			}
			return appendCBORHead(b, cborNegint, uint64(-(n + 1))), end, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid JSON number %q", s)
	}
	bits := math.Float64bits(f)
	return append(b, 0xfb, byte(bits>>56), byte(bits>>48), byte(bits>>40), byte(bits>>32), byte(bits>>24), byte(bits>>16), byte(bits>>8), byte(bits)), end, nil
}
