package opaque

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestWithoutAnnotationsDropsOnlyTheNamedMembers(t *testing.T) {
	v1 := schema.GroupVersion{Group: "example.io", Version: "v1"}
	keys := []string{"cache.kcp.io/home", "cache.kcp.io/home-epoch"}
	for _, tc := range []struct {
		name, stored, want string
		dropped            bool
	}{{
		name:    "some of several, spaces and escapes kept",
		stored:  `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w", "annotations":{"a":"b","cache.kcp.io/home":"east" , "cache.kcp.io\/home-epoch":"e1","c":"{\"}"},"uid":"u"},"spec":{"cache.kcp.io/home":"x"}}`,
		want:    `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","annotations":{"a":"b","c":"{\"}"},"uid":"u"},"spec":{"cache.kcp.io/home":"x"}}`,
		dropped: true,
	}, {
		name:    "the only ones: no annotations left",
		stored:  `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"annotations":{"cache.kcp.io/home":"east"},"name":"w"}}`,
		want:    `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w"}}`,
		dropped: true,
	}, {
		name:   "a key only in the body is not an annotation",
		stored: `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","annotations":{"a":"cache.kcp.io/home"}},"spec":{"cache.kcp.io/home":"x"}}`,
		want:   `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","annotations":{"a":"cache.kcp.io/home"}},"spec":{"cache.kcp.io/home":"x"}}`,
	}, {
		name:   "a longer key that starts alike stays",
		stored: `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","annotations":{"cache.kcp.io/home-resource-version":"3"}}}`,
		want:   `{"apiVersion":"example.io/v1","kind":"Widget","metadata":{"name":"w","annotations":{"cache.kcp.io/home-resource-version":"3"}}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			o := decodeStoredT(t, tc.stored)
			before := encodeAs(t, o, v1)
			got, dropped := o.WithoutAnnotations(keys)
			if dropped != tc.dropped {
				t.Fatalf("dropped = %v, want %v", dropped, tc.dropped)
			}
			if enc := encodeAs(t, got, v1); enc != tc.want {
				t.Errorf("got  %s\nwant %s", enc, tc.want)
			}
			if after := encodeAs(t, o, v1); after != before {
				t.Errorf("the original changed:\n%s\nwas\n%s", after, before)
			}
			// The parsed path (metadata changed since it was stored) agrees.
			parsed := o.DeepCopy()
			parsed.SetLabels(nil)
			got, dropped = parsed.WithoutAnnotations(keys)
			if dropped != tc.dropped {
				t.Fatalf("parsed: dropped = %v, want %v", dropped, tc.dropped)
			}
			sameJSON(t, encodeAs(t, got, v1), tc.want)
		})
	}
}
