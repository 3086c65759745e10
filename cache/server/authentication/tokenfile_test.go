package authentication

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The token file's authenticator follows the file at each check: a new
// token authenticates, a removed one no longer does, and content that
// does not parse (or no file at all) leaves the tokens in force as they
// were.
func TestTokenFileFollowsTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tokens.csv")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	user := func(f *TokenFile, token string) string {
		t.Helper()
		resp, ok, err := f.AuthenticateToken(ctx, token)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return "refused"
		}
		return resp.User.GetName()
	}
	write("blue-token,system:kcp:shard:blue,blue\n")
	f, w, err := NewTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := user(f, "blue-token"); got != "system:kcp:shard:blue" {
		t.Fatalf("blue-token: %s", got)
	}
	write("green-token,system:kcp:shard:green,green\n")
	if !w.Check(ctx) {
		t.Fatal("the check did not see the new content")
	}
	if got := user(f, "blue-token"); got != "refused" {
		t.Errorf("the removed blue-token authenticates as %s", got)
	}
	if got := user(f, "green-token"); got != "system:kcp:shard:green" {
		t.Errorf("the new green-token: %s", got)
	}
	for what, bad := range map[string]func(){
		"a line of two columns": func() { write("red-token,system:kcp:shard:red\n") },
		"no file":               func() { _ = os.Remove(path) },
		"an empty file":         func() { write("") },
	} {
		bad()
		if w.Check(ctx) {
			t.Errorf("%s was loaded", what)
		}
		if got := user(f, "green-token"); got != "system:kcp:shard:green" {
			t.Errorf("after %s, green-token: %s; want the tokens in force before", what, got)
		}
	}
	_ = os.Remove(path)
	if _, _, err := NewTokenFile(path); err == nil {
		t.Error("a missing token file was accepted at start")
	}
}
