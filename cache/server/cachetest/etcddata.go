package cachetest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"

	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd/etcdtest"
)

// RestartWithEtcdData stops the server and etcd, lets change do what an
// operator would to etcd's data directory while both are down (wipe it,
// put an older copy back), and starts etcd and the server again on the same
// root directory and address. Configs returned earlier stay valid.
func (s *Server) RestartWithEtcdData(ctx context.Context, change func(dir string) error) error {
	if err := s.process.Stop(); err != nil {
		return fmt.Errorf("stopping the server: %w", err)
	}
	if err := s.stopEtcd(); err != nil {
		return err
	}
	if err := change(s.opts.EtcdDirectory); err != nil {
		return fmt.Errorf("changing etcd's data: %w", err)
	}
	if err := s.startEtcd(ctx); err != nil {
		return err
	}
	return s.startServer(ctx, "/readyz")
}

// RestartWithEtcdDataForTest is RestartWithEtcdData for a test: it fails
// the test on error.
func (s *Server) RestartWithEtcdDataForTest(t testing.TB, change func(dir string) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), DefaultTimeout)
	defer cancel()
	if err := s.RestartWithEtcdData(ctx, change); err != nil {
		t.Fatalf("restarting with changed etcd data: %v", err)
	}
}

// StopEtcdAndCopyData stops the server and etcd, copies etcd's data
// directory to dst (a backup, as of now), and starts both again.
func (s *Server) StopEtcdAndCopyData(ctx context.Context, dst string) error {
	return s.RestartWithEtcdData(ctx, func(dir string) error { return CopyDir(dir, dst) })
}

// WipeDir empties dir: an etcd started on it begins a new history.
func WipeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o700)
}

// CopyDir replaces dst with a copy of src, files and directories only.
func CopyDir(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = in.Close() }()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
}

func (s *Server) stopEtcd() error {
	if s.etcdClient != nil {
		_ = s.etcdClient.Close()
		s.etcdClient = nil
	}
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
	return nil
}

// startEtcd starts the member on the options' directory and connects the
// fixture's own client to it.
func (s *Server) startEtcd(ctx context.Context) error {
	var err error
	s.etcd, err = embeddedetcd.Start(ctx, embeddedetcd.Config{Directory: s.opts.EtcdDirectory, UnsafeNoFsync: !s.opts.Durable, TLS: &s.etcdTLS})
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	tlsConfig, err := s.etcdTLS.ClientTLSConfig()
	if err != nil {
		return err
	}
	s.etcdClient, err = embeddedetcd.NewClient([]string{s.etcd.ClientURL()}, tlsConfig, etcdtest.DialTimeout)
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	return nil
}
