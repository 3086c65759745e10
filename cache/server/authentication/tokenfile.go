package authentication

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/tokenfile"

	"github.com/kcp-cache/kcp-cache/cache/server/reload"
)

// TokenFileSource names the token file in logs and in the metrics of
// package reload.
const TokenFileSource = "token-auth-file"

// TokenFile authenticates the static bearer tokens of --token-auth-file,
// in kube-apiserver's CSV format, and follows the file: run its Watcher and
// a changed file is in force within reload.Interval, tokens it no longer
// holds refused from then on. Content that does not parse, or an empty
// file, leaves the tokens in force as they were (see package reload).
//
// Upstream's tokenfile authenticator reads its file once; this one builds
// a new upstream authenticator (tokenfile.NewCSV) from each new content
// and swaps it in.
type TokenFile struct {
	path    string
	current atomic.Pointer[tokenfile.TokenAuthenticator]
}

// NewTokenFile loads path and returns its authenticator and the Watcher
// that reloads it; an error means the file cannot be used at all.
func NewTokenFile(path string) (*TokenFile, *reload.Watcher, error) {
	f := &TokenFile{path: path}
	w, err := reload.NewWatcher(TokenFileSource, f)
	if err != nil {
		return nil, nil, err
	}
	return f, w, nil
}

// AuthenticateToken authenticates value with the tokens in force.
func (f *TokenFile) AuthenticateToken(ctx context.Context, value string) (*authenticator.Response, bool, error) {
	return f.current.Load().AuthenticateToken(ctx, value)
}

// Files is the token file (reload.Source).
func (f *TokenFile) Files() []string { return []string{f.path} }

// Load reads the file and puts its tokens in force (reload.Source). The
// digest is taken first: a change made while upstream parses the file is
// seen at the next check.
func (f *TokenFile) Load() (reload.Digest, error) {
	var d reload.Digester
	content, err := d.ReadFile(f.path)
	if err != nil {
		return reload.Digest{}, err
	}
	if len(bytes.TrimSpace(content)) == 0 && f.current.Load() != nil {
		// Most likely a file being written in place; a start accepts an
		// empty file, as kube-apiserver does.
		return d.Sum(), errors.New("the token file is empty; the tokens in force stay (a restart takes an empty file)")
	}
	tokens, err := tokenfile.NewCSV(f.path)
	if err != nil {
		return d.Sum(), err
	}
	f.current.Store(tokens)
	return d.Sum(), nil
}
