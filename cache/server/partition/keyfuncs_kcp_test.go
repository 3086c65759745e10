//go:build kcp

package partition

import "testing"

func TestUpstreamResourcePrefix(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// the fork's custom resource storage
		{"/late.dev/gadgets/customresources", "/late.dev/gadgets"},
		// a custom resource named customresources keeps its prefix
		{"/example.dev/customresources", "/example.dev/customresources"},
		{"/apis.kcp.io/apiexports", "/apis.kcp.io/apiexports"},
		{"/apiextensions.k8s.io/customresourcedefinitions", "/apiextensions.k8s.io/customresourcedefinitions"},
	} {
		if got := upstreamResourcePrefix(tc.in); got != tc.want {
			t.Errorf("upstreamResourcePrefix(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFromRegistryUnderTheForksCustomResourcePrefix(t *testing.T) {
	s := &scopedStorage{resourcePrefix: "/late.dev/gadgets", registryPrefix: "/late.dev/gadgets/customresources"}
	for in, want := range map[string]string{
		"/late.dev/gadgets/customresources/g1":    "/late.dev/gadgets/g1",
		"/late.dev/gadgets/customresources/ns/g1": "/late.dev/gadgets/ns/g1",
		"/late.dev/gadgets/customresources":       "/late.dev/gadgets",
	} {
		if got := s.fromRegistry(in); got != want {
			t.Errorf("fromRegistry(%q) = %q, want %q", in, got, want)
		}
	}
}
