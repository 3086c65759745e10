package server

import (
	"fmt"
	"path/filepath"

	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/kcp-cache/kcp-cache/cache/options"
	"github.com/kcp-cache/kcp-cache/cache/server/authentication"
	"github.com/kcp-cache/kcp-cache/cache/server/dataplane"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/epoch"
	"github.com/kcp-cache/kcp-cache/cache/server/removal"
)

// The translators below each turn one group of options into the parts of
// the configuration that group decides, as sample-apiserver's option groups
// apply themselves (ApplyTo); newConfig is the list of them. A new flag
// touches its options group and its group's translator.

// applyEmbeddedEtcd configures the embedded member (when enabled) and points
// the storage at it: its loopback client URL, with a client certificate only
// this process holds.
func applyEmbeddedEtcd(o *options.EmbeddedEtcdOptions, root string, etcdOpts *genericoptions.EtcdOptions, derived *derivedConfig) error {
	if !o.Enabled {
		return nil
	}
	ec, err := embeddedetcd.Config{
		Directory:           o.Directory,
		InMemory:            o.Storage == options.StorageMemory,
		ClientPort:          o.ClientPort,
		PeerPort:            o.PeerPort,
		MaintenanceInterval: o.MaintenanceInterval,
		QuotaBackendBytes:   o.QuotaBackendBytes,
		WALSegmentSizeBytes: o.WALSegmentSizeBytes,
		ListenMetricsURLs:   o.ListenMetricsURLs,
		ForceNewCluster:     o.ForceNewCluster,
		StartTimeout:        o.StartTimeout,
	}.WithPorts()
	if err != nil {
		return err
	}
	if ec.Group, err = memoryGroup(o.MemoryGroup); err != nil {
		return err
	}
	if ec.Group != nil {
		ec.Majority = embeddedetcd.NewMajority(ec.Group.Names())
	}
	// Only this process may reach the member: TLS with client certificates,
	// regenerated at every start under the root directory, or in the
	// member's own directory without one.
	certsParent := root
	if certsParent == "" {
		certsParent = o.Directory
	}
	tlsFiles, err := embeddedEtcdTLS(filepath.Join(certsParent, EmbeddedEtcdCertsDirName), o.MemoryGroup, ec.Group)
	if err != nil {
		return fmt.Errorf("embedded etcd certificates: %w", err)
	}
	ec.TLS = &tlsFiles
	derived.embeddedEtcd = &ec
	transport := &etcdOpts.StorageConfig.Transport
	transport.ServerList = []string{ec.ClientURL()}
	transport.TrustedCAFile, transport.CertFile, transport.KeyFile = tlsFiles.CAFile, tlsFiles.ClientCertFile, tlsFiles.ClientKeyFile
	return nil
}

// applyStorage records where the data is, where the epoch is kept between
// starts, and the admin token (created once under the root directory, or
// in memory without one).
func applyStorage(root string, etcdOpts genericoptions.EtcdOptions, derived *derivedConfig) error {
	derived.storage = etcdOpts.StorageConfig
	tokenFile := ""
	if root != "" {
		derived.epochFile = filepath.Join(root, epoch.FileName)
		tokenFile = filepath.Join(root, authentication.AdminTokenFileName)
	}
	token, err := authentication.LoadOrCreateAdminToken(tokenFile)
	if err != nil {
		return err
	}
	derived.adminToken = token
	return nil
}

// applyLimits bounds the requests served at once (upstream's max-in-flight
// filter: API Priority and Fairness would need the flowcontrol API served,
// which this server does not serve), the LISTs (the LIST budget) and what
// the server takes in before its memory is full (--memory-limit).
func applyLimits(o *options.LimitOptions, generic *genericapiserver.RecommendedConfig, extra *ExtraConfig) error {
	generic.MaxRequestsInFlight = o.MaxRequestsInFlight
	generic.MaxMutatingRequestsInFlight = o.MaxMutatingRequestsInFlight
	generic.FlowControl = nil
	extra.Lists = dataplane.ListLimits{
		MaxObjectsInFlight: o.MaxListObjectsInFlight,
		WaitTimeout:        o.ListWaitTimeout,
		ReturnMemory:       o.ReturnMemoryAfterLists,
	}
	limit, _, err := o.ResolveMemoryLimit()
	extra.MemoryLimit = limit
	return err
}

// memoryFull is the live heap at which a server with memory limit limit
// refuses creates (0: never).
func memoryFull(limit int64) uint64 {
	return uint64(limit) / 100 * options.FullPercent
}

// applyRemoval says when the data of shards and types that are gone is
// removed.
func applyRemoval(o *options.RemovalOptions, extra *ExtraConfig) {
	extra.Removal = removal.Config{
		ShardRetention: o.ShardRetention,
		TypeRetention:  o.TypeRetention,
		CheckInterval:  o.CheckInterval,
	}
}
