package server

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-cache/kcp-cache/cache/options"
)

// The hierarchy translator loads each peer's kubeconfig: a peers
// kubeconfig names each peer by a context, and combines with --peer.
func TestHierarchyConfigLoadsEveryPeer(t *testing.T) {
	dir := t.TempDir()
	kc := clientcmdapi.NewConfig()
	for _, name := range []string{"west", "south"} {
		kc.Clusters[name] = &clientcmdapi.Cluster{Server: "https://" + name + ".example:6443"}
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "token-" + name}
		kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	kc.CurrentContext = "west"
	file := filepath.Join(dir, "peers.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	single := clientcmdapi.NewConfig()
	single.Clusters["n"] = &clientcmdapi.Cluster{Server: "https://north.example:6443"}
	single.AuthInfos["n"] = &clientcmdapi.AuthInfo{Token: "token-north"}
	single.Contexts["n"] = &clientcmdapi.Context{Cluster: "n", AuthInfo: "n"}
	single.CurrentContext = "n"
	northFile := filepath.Join(dir, "north.kubeconfig")
	if err := clientcmd.WriteToFile(*single, northFile); err != nil {
		t.Fatal(err)
	}

	o := options.HierarchyOptions{CacheName: "east", PeersKubeconfig: file, Peers: []string{"north=" + northFile}, FreshnessWait: time.Second}
	if errs := o.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	var derived derivedConfig
	hc, err := applyHierarchy(&o, &derived)
	if err != nil {
		t.Fatal(err)
	}
	if len(derived.reloads) != 3 {
		t.Errorf("%d loops follow the peers' kubeconfigs, want one per peer", len(derived.reloads))
	}
	// A peer's credentials are its transport's (they follow the file):
	// what it sends is what a server sees.
	var sent string
	seen := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent = r.Header.Get("Authorization")
	}))
	defer seen.Close()
	got := map[string]string{}
	for _, p := range hc.Peers {
		hc, err := rest.HTTPClientFor(p.Config)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(seen.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		got[p.Name] = p.Config.Host + " " + sent
	}
	want := map[string]string{
		"north": "https://north.example:6443 Bearer token-north",
		"south": "https://south.example:6443 Bearer token-south",
		"west":  "https://west.example:6443 Bearer token-west",
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
