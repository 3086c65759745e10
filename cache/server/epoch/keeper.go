package epoch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// The cache's epoch names one continuous history of its data. Clients
// compare resourceVersions and resume watches only within an epoch, and a
// shard's partition counts as confirmed only once the shard has pushed it in
// full in the current one (see kcpcache.EpochHeader). The epoch is
//
//	<etcd cluster ID in hex>-<marker>
//
// where the marker is a random value the server writes once into etcd
// (epochMarkerKey, below the etcd prefix) when it finds none. That tells
// apart, at start:
//
//   - a new etcd (an empty data directory): no marker yet, so a new one;
//   - a backup restored with `cache-server restore` (backupfile.Restore): a new
//     cluster ID, from a cluster token of the restore's own. (etcdutl's
//     own restore derives the ID from the member's name, peer URLs and
//     cluster token: restoring twice with the same ones, or with those of
//     the original member, gives the same ID, and only the rule below
//     tells the restore apart);
//   - a data directory copied back from an older backup (same cluster ID,
//     same marker): etcd's revision is then lower than the highest revision
//     this server has seen in the epoch, which it records in its root
//     directory (FileName) at start, every epochRecordInterval and at
//     shutdown. The server then writes a new marker. Changes in the last
//     interval before a crash are not recorded; a restore to a point inside
//     it goes unnoticed by the epoch (the shards' informers still relist
//     on the resourceVersions that went back).
//
// A plain restart, on the same etcd, keeps the epoch: nothing went back.
const (
	epochMarkerKey      = "/kcp-cache/epoch"
	FileName            = "epoch.json"
	epochRecordInterval = 5 * time.Second
	// epochResolveTimeout bounds how long New waits for etcd to tell the
	// epoch; the server announces it on every response, so it cannot serve
	// without it.
	epochResolveTimeout = time.Minute
)

// epochRecord is what the server remembers of its epoch between starts.
type epochRecord struct {
	Epoch string `json:"epoch"`
	// Revision is the highest etcd revision seen in Epoch.
	Revision int64 `json:"revision"`
}

// Keeper resolves the epoch at start and records the revisions seen.
type Keeper struct {
	client *clientv3.Client
	key    string
	file   string

	mu       sync.Mutex
	epoch    string
	revision int64
}

// NewKeeper keeps the epoch of the data below prefix in the etcd client
// reaches; file is where the record lives (empty: nowhere, for a server
// without a root directory; a data directory copied back from an older
// backup then goes unnoticed). Without a client (storage without etcd,
// whose data lives only as long as the process) the epoch is new at every
// start, with nothing to record. The caller closes client, after Flush.
func NewKeeper(client *clientv3.Client, prefix, file string) (*Keeper, error) {
	if client == nil {
		marker, err := randomMarker()
		if err != nil {
			return nil, err
		}
		return &Keeper{epoch: "process-" + marker}, nil
	}
	return &Keeper{client: client, key: strings.TrimSuffix(prefix, "/") + epochMarkerKey, file: file}, nil
}

// Epoch returns the resolved epoch.
func (k *Keeper) Epoch() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.epoch
}

// resolve finds (or starts) the epoch, retrying until etcd answers or ctx
// ends, and records it.
func (k *Keeper) Resolve(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if k.client == nil {
		logger.Info("Cache epoch of this process's data", "epoch", k.epoch)
		announce(k.epoch)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, epochResolveTimeout)
	defer cancel()
	for {
		err := k.resolveOnce(ctx)
		if err == nil {
			return nil
		}
		logger.Info("Cannot tell the cache's epoch yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("telling the cache's epoch: %w", err)
		case <-time.After(time.Second):
		}
	}
}

func (k *Keeper) resolveOnce(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	resp, err := k.client.Get(ctx, k.key)
	if err != nil {
		return err
	}
	var marker string
	var markerRevision int64
	if len(resp.Kvs) == 0 {
		if marker, err = k.putMarker(ctx, 0); err != nil {
			return err
		}
		logger.Info("New cache epoch: etcd holds no marker yet (a new or empty etcd)")
	} else {
		marker, markerRevision = string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
	}
	epoch := epochOf(resp.Header.ClusterId, marker)
	record, err := readEpochRecord(k.file)
	if err != nil {
		logger.Error(err, "Ignoring the unreadable epoch record", "file", k.file)
	}
	if record.Epoch == epoch && resp.Header.Revision < record.Revision {
		logger.Info("Warning: etcd went back in time (restored from an older copy): starting a new cache epoch",
			"revision", resp.Header.Revision, "highestRevisionSeen", record.Revision, "previousEpoch", epoch)
		if marker, err = k.putMarker(ctx, markerRevision); err != nil {
			return err
		}
		epoch = epochOf(resp.Header.ClusterId, marker)
	} else if record.Epoch != "" && record.Epoch != epoch {
		logger.Info("The cache's epoch changed since this server last ran (a new or restored etcd)", "previousEpoch", record.Epoch)
	}
	k.mu.Lock()
	k.epoch, k.revision = epoch, resp.Header.Revision
	k.mu.Unlock()
	announce(epoch)
	logger.Info("Cache epoch", "epoch", epoch, "revision", resp.Header.Revision)
	return k.record(ctx)
}

// putMarker writes a new random marker if the key is still at modRevision
// (0: absent), and returns the marker etcd holds afterwards: with two
// servers starting on one etcd, both end up with the winner's.
func (k *Keeper) putMarker(ctx context.Context, modRevision int64) (string, error) {
	marker, err := randomMarker()
	if err != nil {
		return "", err
	}
	resp, err := k.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k.key), "=", modRevision)).
		Then(clientv3.OpPut(k.key, marker)).
		Else(clientv3.OpGet(k.key)).
		Commit()
	if err != nil {
		return "", err
	}
	if resp.Succeeded {
		return marker, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", errors.New("the epoch marker changed and vanished while being written")
	}
	return string(kvs[0].Value), nil
}

// record reads etcd's current revision and writes the record, keeping the
// highest revision seen. A different cluster ID or marker now (etcd
// replaced while the server runs) is logged, not recorded: the epoch is
// resolved at start, and a server whose etcd changed under it must be
// restarted to serve the new history correctly.
func (k *Keeper) record(ctx context.Context) error {
	resp, err := k.client.Get(ctx, k.key)
	if err != nil {
		return err
	}
	k.mu.Lock()
	epoch := k.epoch
	current := ""
	if len(resp.Kvs) > 0 {
		current = epochOf(resp.Header.ClusterId, string(resp.Kvs[0].Value))
	}
	if current != epoch || resp.Header.Revision < k.revision {
		k.mu.Unlock()
		return fmt.Errorf("etcd's history changed while the server runs (epoch %q, now %q; revision %d, highest seen %d): restart the cache server", epoch, current, resp.Header.Revision, k.revision)
	}
	k.revision = resp.Header.Revision
	rec := epochRecord{Epoch: epoch, Revision: k.revision}
	k.mu.Unlock()
	return writeEpochRecord(k.file, rec)
}

// Run records the revision every epochRecordInterval until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	if k.client == nil {
		return
	}
	logger := klog.FromContext(ctx).WithName("epoch")
	ticker := time.NewTicker(epochRecordInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := k.record(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Recording the cache's epoch")
		}
	}
}

// Flush records a last time, at shutdown, after the last write.
func (k *Keeper) Flush(ctx context.Context) {
	if k.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := k.record(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Recording the cache's epoch at shutdown")
	}
}

func randomMarker() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func epochOf(clusterID uint64, marker string) string {
	return fmt.Sprintf("%x-%s", clusterID, marker)
}

func readEpochRecord(file string) (epochRecord, error) {
	var rec epochRecord
	if file == "" {
		return rec, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(data, &rec)
}

// writeEpochRecord replaces file atomically, so a crash leaves the old
// record or the new one. Without a file (no root directory) nothing is
// recorded.
func writeEpochRecord(file string, rec epochRecord) error {
	if file == "" {
		return nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".tmp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
