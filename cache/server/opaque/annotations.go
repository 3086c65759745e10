package opaque

import (
	"fmt"
	"slices"
	"strings"
)

// WithoutAnnotations returns o without the annotations named by keys, and
// whether it had any of them; o itself is returned, unchanged, when it had
// none. The copy shares the body with o. A partial object keeps its stored
// metadata bytes less those members (the rest byte for byte, so serving it
// costs what serving o does); an object whose metadata was parsed is copied
// and its annotations set.
func (o *Object) WithoutAnnotations(keys []string) (*Object, bool) {
	if raw := o.rawMeta(); raw != "" {
		if !containsAny(raw, keys) {
			return o, false
		}
		meta, dropped, err := dropAnnotations(raw, keys)
		if err == nil {
			if !dropped {
				return o, false
			}
			c := o.DeepCopy()
			c.data = meta + o.data[o.metaEnd:]
			c.metaEnd = len(meta)
			return c, true
		}
		// Stored metadata this package wrote parses; anything else takes
		// the slower path below.
	}
	a := o.GetAnnotations()
	kept := make(map[string]string, len(a))
	for k, v := range a {
		if !slices.Contains(keys, k) {
			kept[k] = v
		}
	}
	if len(kept) == len(a) {
		return o, false
	}
	if len(kept) == 0 {
		kept = nil
	}
	c := o.DeepCopy()
	c.SetAnnotations(kept)
	return c, true
}

func containsAny(s string, keys []string) bool {
	for _, k := range keys {
		if strings.Contains(s, k) {
			return true
		}
	}
	return false
}

// dropAnnotations returns the metadata object meta without the members of
// its annotations named by keys (and without annotations at all when none
// remain), and whether any was dropped. Every other member keeps its bytes
// and its place.
func dropAnnotations(meta string, keys []string) (string, bool, error) {
	data := []byte(meta)
	members, err := objectMembers(data)
	if err != nil {
		return "", false, err
	}
	var out strings.Builder
	out.Grow(len(meta))
	out.WriteByte('{')
	dropped, first := false, true
	for _, m := range members {
		value := meta[m.valStart:m.valEnd]
		if m.key == "annotations" && strings.HasPrefix(value, "{") {
			inner, err := objectMembers(data[m.valStart:m.valEnd])
			if err != nil {
				return "", false, err
			}
			var kept []string
			for _, a := range inner {
				if slices.Contains(keys, a.key) {
					dropped = true
					continue
				}
				kept = append(kept, value[a.start:a.valEnd])
			}
			if len(kept) == 0 {
				continue
			}
			value = "{" + strings.Join(kept, ",") + "}"
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		out.WriteString(meta[m.start:m.valStart])
		out.WriteString(value)
	}
	out.WriteByte('}')
	return out.String(), dropped, nil
}

// member is one member of a JSON object: its key (unescaped), where it
// starts (the key's opening quote) and where its value starts and ends.
type member struct {
	key                     string
	start, valStart, valEnd int
}

// objectMembers lists the members of the JSON object data.
func objectMembers(data []byte) ([]member, error) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, fmt.Errorf("expected a JSON object")
	}
	var out []member
	for i = skipSpace(data, i+1); i < len(data) && data[i] != '}'; {
		start := i
		keyEnd, err := skipString(data, i)
		if err != nil {
			return nil, err
		}
		key, err := stringValue(data[start:keyEnd], "an object key")
		if err != nil {
			return nil, err
		}
		i = skipSpace(data, keyEnd)
		if i >= len(data) || data[i] != ':' {
			return nil, fmt.Errorf("expected ':' after an object key at offset %d", i)
		}
		valStart := skipSpace(data, i+1)
		valEnd, err := skipValue(data, valStart)
		if err != nil {
			return nil, err
		}
		out = append(out, member{key: key, start: start, valStart: valStart, valEnd: valEnd})
		i = skipSpace(data, valEnd)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	if i >= len(data) {
		return nil, fmt.Errorf("unterminated object")
	}
	return out, nil
}
