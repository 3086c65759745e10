package backupfile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"

	"github.com/kcp-cache/kcp-cache/cache/server/backup"
)

// Save takes a backup through the running server cfg reaches (its root, no
// partition prefix; an identity of system:masters, such as the admin
// kubeconfig's) and writes it to path. The file is written next to path
// under a temporary name, verified (Verify), synced, made 0600 and renamed
// to path, so that path is a whole, checked backup or is left as it was. An
// answer other than 200 comes back as the server's Status
// (apierrors.APIStatus): 403 for an identity other than system:masters, 501
// with backup.ReasonExternalEtcd for a server on an external etcd.
func Save(ctx context.Context, cfg *rest.Config, path string) (Info, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return Info{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kcpcache.JoinHostPath(cfg.Host, kcpcache.BackupPath), nil)
	if err != nil {
		return Info{}, err
	}
	req.Header.Set("Accept", backup.ContentType+", application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Info{}, fmt.Errorf("asking %s for a backup: %w", cfg.Host, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return Info{}, statusError(resp)
	}
	info, err := writeVerified(resp.Body, path)
	if err != nil {
		return info, err
	}
	info.Epoch = resp.Header.Get(kcpcache.EpochHeader)
	return info, nil
}

// writeVerified writes r to path as Save states.
func writeVerified(r io.Reader, path string) (_ Info, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".part-")
	if err != nil {
		return Info{}, err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return Info{}, err
	}
	if _, err := io.Copy(tmp, r); err != nil {
		return Info{}, fmt.Errorf("receiving the backup: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, err
	}
	if err := tmp.Close(); err != nil {
		return Info{}, err
	}
	info, err := Verify(tmp.Name())
	if err != nil {
		return info, fmt.Errorf("the backup received is not whole: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return info, err
	}
	return info, syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// statusError is the error a non-200 answer carries: its Status when it is
// one, otherwise its code and body.
func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err == nil && status.Kind == "Status" {
		return &apierrors.StatusError{ErrStatus: status}
	}
	msg := strings.TrimSpace(string(body))
	if msg == "" {
		msg = resp.Status
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, schema.GroupResource{Resource: "backup"}, "", msg, 0, true)
}
