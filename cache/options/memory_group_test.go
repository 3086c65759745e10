package options

import (
	"reflect"
	"strings"
	"testing"
)

func TestMemoryGroupFlagsReachOptions(t *testing.T) {
	c := parse(t, "--root-directory="+t.TempDir(), "--storage=memory",
		"--memory-peers=a=https://10.0.0.1:2380,b=https://10.0.0.2:2380,c=https://cache-c.internal:2380",
		"--memory-member-name=b", "--memory-client-url=https://10.0.0.2:2381", "--memory-group-secret-file=/etc/kcp-cache/group-secret")
	if errs := c.Validate(); len(errs) > 0 {
		t.Fatalf("a valid group is refused: %v", errs)
	}
	g := c.EmbeddedEtcd.MemoryGroup
	peers, err := g.Members()
	if err != nil {
		t.Fatal(err)
	}
	want := []MemoryPeer{{"a", "https://10.0.0.1:2380"}, {"b", "https://10.0.0.2:2380"}, {"c", "https://cache-c.internal:2380"}}
	if !reflect.DeepEqual(peers, want) || g.MemberName != "b" || g.ClientURL != "https://10.0.0.2:2381" || g.SecretFile != "/etc/kcp-cache/group-secret" || g.Plaintext {
		t.Errorf("group options %+v, peers %v", g, peers)
	}
	behind := parse(t, "--root-directory="+t.TempDir(), "--storage=memory",
		"--memory-peers=a=https://10.0.0.1:2380,b=https://10.0.0.2:2380", "--memory-member-name=a",
		"--memory-client-url=https://10.0.0.1:2381", "--memory-group-secret-file=/secret", "--memory-peer-listen-url=https://0.0.0.0:12380")
	if errs := behind.Validate(); len(errs) > 0 || behind.EmbeddedEtcd.MemoryGroup.PeerListenURL != "https://0.0.0.0:12380" {
		t.Errorf("a member listening behind its peer URL: %v, listen URL %q", errs, behind.EmbeddedEtcd.MemoryGroup.PeerListenURL)
	}
	if parse(t, "--root-directory="+t.TempDir()).EmbeddedEtcd.MemoryGroup.Enabled() {
		t.Error("a group without --memory-peers")
	}
	plain := parse(t, "--root-directory="+t.TempDir(), "--storage=memory",
		"--memory-peers=a=http://10.0.0.1:2380,b=http://10.0.0.2:2380", "--memory-member-name=a",
		"--memory-client-url=http://10.0.0.1:2381", "--memory-peer-plaintext")
	if errs := plain.Validate(); len(errs) > 0 {
		t.Fatalf("a plain-HTTP group asked for by name is refused: %v", errs)
	}
}

func TestMemoryGroupRefusesWhatCannotWork(t *testing.T) {
	group := []string{"--storage=memory", "--memory-peers=a=https://10.0.0.1:2380,b=https://10.0.0.2:2380", "--memory-member-name=a", "--memory-client-url=https://10.0.0.1:2381", "--memory-group-secret-file=/secret"}
	with := func(extra ...string) []string { return append(append([]string{}, group...), extra...) }
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory-peers=a=https://10.0.0.1:2380", "--memory-member-name=a", "--memory-client-url=https://10.0.0.1:2381", "--memory-group-secret-file=/secret"}, "need --storage=memory"},
		{with("--etcd-servers=http://10.0.0.9:2379"), "contradicts --etcd-servers"},
		{with("--memory-member-name=z"), `"z" must be one of the names`},
		{with("--memory-peers=a=https://10.0.0.1:2380,a=https://10.0.0.2:2380"), `name "a" appears twice`},
		{with("--memory-peers=a=https://10.0.0.1:2380,b=https://10.0.0.1:2380"), "appears twice"},
		{with("--memory-peers=a=http://10.0.0.1:2380,b=https://10.0.0.2:2380"), "not a https://HOST:PORT URL"},
		{with("--memory-peer-plaintext"), "exclude each other"},
		{[]string{"--storage=memory", "--memory-peers=a=https://10.0.0.1:2380", "--memory-member-name=a", "--memory-client-url=https://10.0.0.1:2381"}, "needs --memory-group-secret-file"},
		{[]string{"--storage=memory", "--memory-peers=a=https://10.0.0.1:2380", "--memory-member-name=a", "--memory-client-url=http://10.0.0.1:2381", "--memory-peer-plaintext"}, "not a http://HOST:PORT URL"},
		{with("--memory-peers=a=https://10.0.0.1"), "not a https://HOST:PORT URL"},
		{with("--memory-peers=https://10.0.0.1:2380"), "not NAME=https://HOST:PORT"},
		{with("--memory-client-url="), "needs --memory-client-url"},
		{with("--memory-client-url=https://10.0.0.1:2380"), "also a peer URL"},
		{with("--memory-peer-listen-url=10.0.0.1:12380"), "--memory-peer-listen-url: \"10.0.0.1:12380\" is not a https://HOST:PORT URL"},
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
