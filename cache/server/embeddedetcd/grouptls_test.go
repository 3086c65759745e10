package embeddedetcd

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// withGroupSecret makes cfgs a group that speaks TLS with certificates
// derived from secret (each member's own, as the cache server makes them).
func withGroupSecret(t *testing.T, cfgs []Config, secrets ...[]byte) {
	t.Helper()
	for i := range cfgs {
		g := *cfgs[i].Group
		var peers []Peer
		for _, p := range g.Peers {
			peers = append(peers, Peer{Name: p.Name, URL: strings.Replace(p.URL, "http://", "https://", 1)})
		}
		g.Peers, g.ClientURL = peers, strings.Replace(g.ClientURL, "http://", "https://", 1)
		files, err := GenerateGroupTLS(filepath.Join(t.TempDir(), "tls"), secrets[i%len(secrets)], g.Name, g.Hosts())
		if err != nil {
			t.Fatal(err)
		}
		g.TLS = &files
		cfgs[i].Group, cfgs[i].TLS = &g, &files
	}
}

func newSecret(t *testing.T) []byte {
	t.Helper()
	s := make([]byte, GroupSecretMinBytes)
	if _, err := rand.Read(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A group whose members share a secret speaks TLS: its members form the
// group with certificates they derived from the secret each on its own; a
// member holding another secret is not taken in, and a client without a
// certificate of the group's CA reads nothing.
func TestGroupOverTLSTakesOnlyHoldersOfTheSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("long scenario (waits for a start timeout): skipped with -short")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgs := testGroup(t, 3)
	// The third member holds another secret: m0 and m1 are the majority.
	withGroupSecret(t, cfgs[:2], newSecret(t))
	withGroupSecret(t, cfgs[2:], newSecret(t))
	outsider := cfgs[2]
	outsider.StartTimeout = 10 * time.Second
	members := startGroup(ctx, t, cfgs[:2])
	if _, err := Start(ctx, outsider); err == nil {
		t.Fatal("a member with another secret joined the group")
	}

	tlsConfig, err := cfgs[0].Group.TLS.ClientTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	member := clientFor(t, tlsConfig, cfgs[0].Group.ClientURL)
	if _, err := member.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("a write through the group over TLS: %v", err)
	}
	list, err := member.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Members {
		names = append(names, fmt.Sprintf("%s=%v", m.Name, m.PeerURLs))
		for _, u := range m.PeerURLs {
			if !strings.HasPrefix(u, "https://") {
				t.Errorf("member %s has peer URL %s, want https", m.Name, u)
			}
		}
	}
	t.Logf("members: %v", names)

	// Without a certificate of the group's CA: nothing (the handshake fails).
	plainCtx, plainCancel := context.WithTimeout(ctx, 3*time.Second)
	defer plainCancel()
	stranger, err := NewClient([]string{cfgs[0].Group.ClientURL}, nil, 2*time.Second)
	if err == nil {
		defer func() { _ = stranger.Close() }()
		_, err = stranger.Get(plainCtx, "k")
	}
	if err == nil {
		t.Fatal("a client without the group's certificate read the group's data")
	}
	_ = members
}
