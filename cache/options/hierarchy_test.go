package options

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestHierarchyOptionsRefuseWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    HierarchyOptions
		wantErr string // "" means valid
	}{
		{name: "a cache on its own", opts: HierarchyOptions{FreshnessWait: time.Second}},
		{name: "a named cache with a peer", opts: HierarchyOptions{CacheName: "east", Peers: []string{"west=/w.kubeconfig"}, FreshnessWait: time.Second}},
		{name: "peers without a name", opts: HierarchyOptions{Peers: []string{"west=/w.kubeconfig"}, FreshnessWait: time.Second}, wantErr: "--cache-name is required"},
		{name: "a name that is not a DNS label", opts: HierarchyOptions{CacheName: "East_1", FreshnessWait: time.Second}, wantErr: "--cache-name"},
		{name: "a peer without a kubeconfig", opts: HierarchyOptions{CacheName: "east", Peers: []string{"west"}, FreshnessWait: time.Second}, wantErr: "not NAME=KUBECONFIG"},
		{name: "a peer given twice", opts: HierarchyOptions{CacheName: "east", Peers: []string{"west=/a", "west=/b"}, FreshnessWait: time.Second}, wantErr: "given twice"},
		{name: "the cache as its own peer", opts: HierarchyOptions{CacheName: "east", Peers: []string{"east=/a"}, FreshnessWait: time.Second}, wantErr: "this cache itself"},
		{name: "no freshness wait", opts: HierarchyOptions{CacheName: "east"}, wantErr: "--freshness-wait"},
		{name: "an adopted shard with a bad name", opts: HierarchyOptions{CacheName: "east", AdoptShards: []string{"Bad/Shard"}, FreshnessWait: time.Second}, wantErr: "--adopt-shard"},
		{name: "adopting without a name", opts: HierarchyOptions{AdoptShards: []string{"s"}, FreshnessWait: time.Second}, wantErr: "--adopt-shard needs --cache-name"},
		{name: "a subset passed on to a peer", opts: HierarchyOptions{CacheName: "east", Peers: []string{"global=/g"}, PassOn: []string{"global=apiexports.apis.kcp.io,apiresourceschemas.apis.kcp.io,configmaps"}, FreshnessWait: time.Second}},
		{name: "passing on to a cache that is not a peer", opts: HierarchyOptions{CacheName: "east", Peers: []string{"west=/w"}, PassOn: []string{"global=apiexports.apis.kcp.io"}, FreshnessWait: time.Second}, wantErr: "not a peer"},
		{name: "passing on without resources", opts: HierarchyOptions{CacheName: "east", Peers: []string{"global=/g"}, PassOn: []string{"global="}, FreshnessWait: time.Second}, wantErr: "not PEER=RESOURCE"},
		{name: "passing on a resource that is not one", opts: HierarchyOptions{CacheName: "east", Peers: []string{"global=/g"}, PassOn: []string{"global=APIExports.apis.kcp.io"}, FreshnessWait: time.Second}, wantErr: "is not <resource>.<group>"},
		{name: "passing on to one peer twice", opts: HierarchyOptions{CacheName: "east", Peers: []string{"global=/g"}, PassOn: []string{"global=apiexports.apis.kcp.io", "global=configmaps"}, FreshnessWait: time.Second}, wantErr: "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errorsString(tc.opts.Validate())
			switch {
			case tc.wantErr == "" && err != "":
				t.Fatalf("refused: %s", err)
			case tc.wantErr != "" && !strings.Contains(err, tc.wantErr):
				t.Fatalf("got %q, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func errorsString(errs []error) string {
	var parts []string
	for _, e := range errs {
		parts = append(parts, e.Error())
	}
	return strings.Join(parts, "; ")
}

// --pass-on parses into sorted resources per peer.
func TestPassOnResources(t *testing.T) {
	o := HierarchyOptions{PassOn: []string{"global=apiresourceschemas.apis.kcp.io, apiexports.apis.kcp.io", "west=configmaps"}}
	got, err := o.PassOnResources()
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(got["global"], " "); g != "apiexports.apis.kcp.io apiresourceschemas.apis.kcp.io" {
		t.Errorf("global: %q", g)
	}
	if w := strings.Join(got["west"], " "); w != "configmaps" {
		t.Errorf("west: %q", w)
	}
}

// A peers kubeconfig names each peer by a context, and combines with --peer.
// The options only name files and contexts (the server loads them), so the
// contexts need nothing behind them and the --peer file need not exist.
func TestPeersKubeconfigNamesPeersByContext(t *testing.T) {
	kc := clientcmdapi.NewConfig()
	for _, name := range []string{"west", "south"} {
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	file := filepath.Join(t.TempDir(), "peers.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	northFile := "/north.kubeconfig"

	o := HierarchyOptions{CacheName: "east", PeersKubeconfig: file, Peers: []string{"north=" + northFile}, FreshnessWait: time.Second}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	sources, err := o.PeerSources()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var names []string
	for _, src := range sources {
		got[src.Name] = src.Kubeconfig + " " + src.Context
		names = append(names, src.Name)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("sources %v are not sorted by name", names)
	}
	want := map[string]string{
		"north": northFile + " ",
		"south": file + " south",
		"west":  file + " west",
	}
	if len(got) != len(want) {
		t.Fatalf("peers %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("peer %s: %q, want %q", name, got[name], w)
		}
	}
}
