package options

import (
	"reflect"
	"strings"
	"testing"
)

func TestMemoryGroupFlagsReachOptions(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(), "--storage=memory",
		"--memory-peers=a=http://10.0.0.1:2380,b=http://10.0.0.2:2380,c=http://cache-c.internal:2380",
		"--memory-member-name=b", "--memory-client-url=http://10.0.0.2:2381")
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("a valid group is refused: %v", errs)
	}
	g := c.EmbeddedEtcd.MemoryGroup
	peers, err := g.Members()
	if err != nil {
		t.Fatal(err)
	}
	want := []MemoryPeer{{"a", "http://10.0.0.1:2380"}, {"b", "http://10.0.0.2:2380"}, {"c", "http://cache-c.internal:2380"}}
	if !reflect.DeepEqual(peers, want) || g.MemberName != "b" || g.ClientURL != "http://10.0.0.2:2381" {
		t.Errorf("group options %+v, peers %v", g, peers)
	}
	if parse(t, "--root-directory="+t.TempDir()).EmbeddedEtcd.MemoryGroup.Enabled() {
		t.Error("a group without --memory-peers")
	}
}

func TestMemoryGroupRefusesWhatCannotWork(t *testing.T) {
	group := []string{"--storage=memory", "--memory-peers=a=http://10.0.0.1:2380,b=http://10.0.0.2:2380", "--memory-member-name=a", "--memory-client-url=http://10.0.0.1:2381"}
	with := func(extra ...string) []string { return append(append([]string{}, group...), extra...) }
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory-peers=a=http://10.0.0.1:2380", "--memory-member-name=a", "--memory-client-url=http://10.0.0.1:2381"}, "need --storage=memory"},
		{with("--etcd-servers=http://10.0.0.9:2379"), "contradicts --etcd-servers"},
		{with("--memory-member-name=z"), `"z" must be one of the names`},
		{with("--memory-peers=a=http://10.0.0.1:2380,a=http://10.0.0.2:2380"), `name "a" appears twice`},
		{with("--memory-peers=a=http://10.0.0.1:2380,b=http://10.0.0.1:2380"), "appears twice"},
		{with("--memory-peers=a=https://10.0.0.1:2380"), "plain HTTP"},
		{with("--memory-peers=a=http://10.0.0.1"), "not an http://HOST:PORT URL"},
		{with("--memory-peers=http://10.0.0.1:2380"), "not NAME=http://HOST:PORT"},
		{with("--memory-client-url="), "needs --memory-client-url"},
		{with("--memory-client-url=http://10.0.0.1:2380"), "also a peer URL"},
		{[]string{"--storage=memory", "--memory-member-name=a"}, "need --memory-peers"},
		{with("--embedded-etcd-force-new-cluster"), "contradicts --memory-peers"},
	} {
		c := parse(t, append([]string{"--root-directory=" + t.TempDir()}, tt.args...)...)
		errs := c.Validate()
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), tt.want)
		}
		if !found {
			t.Errorf("%v: errors %v do not mention %q", tt.args, errs, tt.want)
		}
	}
}
