package options

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// Every flag of kcp's cache-server (cmd/cache-server and
// pkg/cache/server/options, v0.32.3 and main) is accepted here, so that
// whatever starts kcp's cache (kcp's sharded-test-server, kcp-operator,
// kcp's helm chart) can start this one with the same arguments. Most of
// them mean the same here (see TestKcpCacheServerFlagsParse). A few are
// flags of the upstream etcd options that kcp registers wholesale and that
// cannot mean anything for this server; they are accepted, their help says
// so, and Complete turns them into IgnoredFlags that the command logs at
// start, so that nobody believes they took effect.

// IgnoredFlag is a flag that was set but has no effect on this server.
type IgnoredFlag struct {
	Name   string
	Value  string
	Reason string
}

// compatibilityOnly are the upstream etcd flags kcp's cache-server has that
// have no effect here, with the reason. Their help text is replaced by it.
var compatibilityOnly = map[string]string{
	"watch-cache": "the cache always serves lists and watches from its watch cache; that is what it is for " +
		"(kcp's cache-server turns it off only for want of shard-aware cache keys)",
	"enable-garbage-collector": "no garbage collector runs against the cache: copies are deleted by the shard " +
		"that pushed them, at once, and their owner references point into other shards",
	"watch-cache-sizes": "it sizes the watch caches of resources built into kube-apiserver; every type here is " +
		"declared at run time, and watch caches size themselves",
	"etcd-servers-overrides": "it applies to resources built into kube-apiserver; every type here is declared " +
		"at run time and lives in --etcd-servers (or the embedded etcd)",
	"storage-media-type": "objects are stored as the JSON their shard sent, whatever this says",
	"encryption-provider-config": "encryption at rest is not wired into the cache (kcp's cache-server does not " +
		"load it either); objects are stored unencrypted, so encrypt etcd's disk if needed",
	"encryption-provider-config-automatic-reload": "--encryption-provider-config has no effect here",
}

// markKcpCompatibilityFlags rewrites the help of the flags in fs that are
// accepted only for compatibility with kcp's cache-server.
func markKcpCompatibilityFlags(fs *pflag.FlagSet) {
	for name, reason := range compatibilityOnly {
		if f := fs.Lookup(name); f != nil {
			f.Usage = "Accepted for compatibility with kcp's cache-server; no effect: " + reason + "."
		}
	}
}

// takeIgnoredFlags lists the compatibility-only settings that differ from
// the defaults, and resets those the server must not see: a server built
// with the watch cache off or the garbage collector on would behave
// differently from the one these options describe.
func (o *Options) takeIgnoredFlags() []IgnoredFlag {
	var ignored []IgnoredFlag
	add := func(name, value string) {
		ignored = append(ignored, IgnoredFlag{Name: "--" + name, Value: value, Reason: compatibilityOnly[name]})
	}
	e := o.Etcd
	if !e.EnableWatchCache {
		add("watch-cache", "false")
		e.EnableWatchCache = true
	}
	if e.EnableGarbageCollection {
		add("enable-garbage-collector", "true")
		e.EnableGarbageCollection = false
	}
	if len(e.WatchCacheSizes) > 0 {
		add("watch-cache-sizes", strings.Join(e.WatchCacheSizes, ","))
	}
	if len(e.EtcdServersOverrides) > 0 {
		add("etcd-servers-overrides", strings.Join(e.EtcdServersOverrides, ","))
	}
	if e.DefaultStorageMediaType != defaultStorageMediaType {
		add("storage-media-type", e.DefaultStorageMediaType)
	}
	if e.EncryptionProviderConfigFilepath != "" {
		add("encryption-provider-config", e.EncryptionProviderConfigFilepath)
	}
	if e.EncryptionProviderConfigAutomaticReload {
		add("encryption-provider-config-automatic-reload", fmt.Sprint(e.EncryptionProviderConfigAutomaticReload))
	}
	return ignored
}

// defaultStorageMediaType is upstream's default for --storage-media-type.
const defaultStorageMediaType = "application/json"
