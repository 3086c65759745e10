package partition

import (
	"context"
	"testing"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// The stem is where upstream's etcd storage puts a member's keys: the etcd
// prefix joined with the member's resource prefix, for a named group and
// for the core group (whose resource prefix starts with "/").
func TestUnionStemAndMemberKeys(t *testing.T) {
	for _, tc := range []struct{ etcdPrefix, resourcePrefix, want string }{
		{"/kcp-cache", "example.dev/widgets", "/kcp-cache/example.dev/widgets:"},
		{"kcp-cache/", "/example.dev/widgets", "/kcp-cache/example.dev/widgets:"},
		{"/registry", "/configmaps", "/registry/configmaps:"},
	} {
		if got := UnionStem(tc.etcdPrefix, tc.resourcePrefix); got != tc.want {
			t.Errorf("UnionStem(%q, %q) = %q, want %q", tc.etcdPrefix, tc.resourcePrefix, got, tc.want)
		}
	}

	u := &union{stem: "/p/g/widgets:", resourcePrefix: "/g/widgets"}
	for key, want := range map[string]memberKey{
		"/p/g/widgets:id1/alpha/ws/w":    {member: "id1", shard: "alpha", cluster: "ws", name: "w"},
		"/p/g/widgets:id1/alpha/ws/ns/w": {member: "id1", shard: "alpha", cluster: "ws", namespace: "ns", name: "w"},
	} {
		if got, ok := u.parseMemberKey(key); !ok || got != want {
			t.Errorf("parseMemberKey(%q) = %+v, %t; want %+v", key, got, ok, want)
		}
	}
	for _, key := range []string{"/p/g/widgets:id1/alpha", "/p/g/widgetsx/id1/alpha/ws/w", "/p/g/widgets:id1/a/b/c/d/e"} {
		if got, ok := u.parseMemberKey(key); ok {
			t.Errorf("parseMemberKey(%q) = %+v; want no object", key, got)
		}
	}

	ctx := kcpcache.WithScope(context.Background(), kcpcache.Scope{Shard: "alpha", Cluster: kcpcache.Wildcard})
	for _, tc := range []struct {
		key       string
		recursive bool
		want      selection
	}{
		{"/g/widgets", true, selection{shard: "alpha"}},
		{"/g/widgets/ns", true, selection{shard: "alpha", namespace: "ns"}},
		{"/g/widgets/w", false, selection{shard: "alpha", name: "w"}},
		{"/g/widgets/ns/w", false, selection{shard: "alpha", namespace: "ns", name: "w"}},
	} {
		got, err := u.selectionOf(ctx, tc.key, tc.recursive)
		if err != nil || got != tc.want {
			t.Errorf("selectionOf(%q, %t) = %+v, %v; want %+v", tc.key, tc.recursive, got, err, tc.want)
		}
	}
	if _, err := u.selectionOf(ctx, "/g/gadgets", true); err == nil {
		t.Error("a key of another resource was accepted")
	}
}
