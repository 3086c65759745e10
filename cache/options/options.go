package options

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	cliflag "k8s.io/component-base/cli/flag"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

const (
	// DefaultRootDirectory is where a cache server keeps its state when
	// --root-directory is not given.
	DefaultRootDirectory = ".kcp-cache"

	// DefaultEtcdPrefix keeps cache data apart from anything else in a shared
	// etcd.
	DefaultEtcdPrefix = "/cache"

	// DefaultSecurePort is kcp's cache-server port.
	DefaultSecurePort = 6443
)

// Options are a cache server's options.
type Options struct {
	// RootDirectory holds the serving certificate, the admin kubeconfig and,
	// by default, the embedded etcd's data. Empty means none, as kcp's
	// cache-server reads --root-directory= (kcp-operator passes it so): the
	// server then writes nothing but the embedded etcd's directory (see
	// Complete).
	RootDirectory string

	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *AuthenticationOptions
	Authorization  *AuthorizationOptions
	// Audit records who did what where, as kube-apiserver does
	// (--audit-log-path, --audit-policy-file, webhook backends).
	Audit        *genericoptions.AuditOptions
	Etcd         *genericoptions.EtcdOptions
	EmbeddedEtcd *EmbeddedEtcdOptions
	// Removal says when the data of shards and types that are gone is removed.
	Removal *RemovalOptions
	// Limits bound the requests and LISTs served at once.
	Limits *LimitOptions
	// Hierarchy names the cache and its peers in a hierarchy of caches.
	Hierarchy *HierarchyOptions

	// BootstrapTypes names the types served from the start
	// (kcpcache.ServedTypes: the kcp profile and the user-read types), as
	// "resource.group"; "*" is all of them, the default. More types can be declared at runtime with CRDs.
	BootstrapTypes []string

	// FeatureGates are upstream feature gates to set, over the cache
	// server's defaults (see defaultFeatureGates). Only
	// CompletedOptions.ApplyFeatureGates sets them, in the process of a
	// standalone server; a mounted cache keeps its host's gates.
	FeatureGates map[string]bool

	// SyntheticDelay holds every request back this long before serving it,
	// as kcp's cache-server flag of the same name: kcp's own tests use it
	// to make the cache slow and expose clients that assume it is fast.
	SyntheticDelay time.Duration

	// ProfilerAddress, when set, is a [host]:port where the server serves
	// Go's profiler (net/http/pprof) over plain HTTP, as kcp's servers'
	// --profiler-address does.
	ProfilerAddress string
}

// CompletedOptions are options with defaults filled in; only Complete makes them.
type CompletedOptions struct {
	*completedOptions
}

type completedOptions struct {
	Options
	// IgnoredFlags are settings accepted for compatibility with kcp's
	// cache-server that have no effect here; log them at start.
	IgnoredFlags []IgnoredFlag
}

// NewOptions returns options with kcp-compatible defaults.
func NewOptions() *Options {
	o := &Options{
		RootDirectory:  DefaultRootDirectory,
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: NewAuthenticationOptions(),
		Authorization:  NewAuthorizationOptions(),
		Audit:          genericoptions.NewAuditOptions(),
		Etcd: genericoptions.NewEtcdOptions(storagebackend.NewDefaultConfig(
			DefaultEtcdPrefix,
			apiextensionsapiserver.Codecs.LegacyCodec(v1beta1.SchemeGroupVersion, apiextensionsv1.SchemeGroupVersion),
		)),
		EmbeddedEtcd:   NewEmbeddedEtcdOptions(),
		Removal:        NewRemovalOptions(),
		Limits:         NewLimitOptions(),
		Hierarchy:      NewHierarchyOptions(),
		BootstrapTypes: []string{kcpcache.Wildcard},
	}
	o.SecureServing.BindPort = DefaultSecurePort
	o.SecureServing.ServerCert.PairName = "apiserver"
	// Complete puts the certificate under the root directory.
	o.SecureServing.ServerCert.CertDirectory = ""
	// The watch cache is what makes this a cache server; see
	// takeIgnoredFlags.
	o.Etcd.EnableWatchCache = true
	// No garbage collector runs against the cache.
	o.Etcd.EnableGarbageCollection = false
	return o
}

// AddFlags adds the options' flags to named sections of fss.
func (o *Options) AddFlags(fss *cliflag.NamedFlagSets) {
	general := fss.FlagSet("Cache server")
	general.StringVar(&o.RootDirectory, "root-directory", o.RootDirectory,
		"Directory for the serving certificate, the admin kubeconfig (cache.kubeconfig) and the embedded etcd's data. Relative paths are resolved against the working directory. Empty (--root-directory=, as kcp-operator passes it) means none: nothing is written but the embedded etcd's directory (its default is then ./etcd-server), the serving certificate is --tls-cert-file's or generated in memory, and no admin kubeconfig is written.")
	general.StringSliceVar(&o.BootstrapTypes, "bootstrap-types", o.BootstrapTypes,
		"Types served from the start, as resource.group (e.g. apiexports.apis.kcp.io); * serves all of them: kcp's types, as a kcp shard needs, and the types of the user-read partitions (workspaces, apibindings). An empty value serves none. Other types can be added at runtime by creating CRDs. Known: "+strings.Join(kcpcache.TypeNames(kcpcache.ServedTypes()), ", ")+".")
	general.DurationVar(&o.SyntheticDelay, "synthetic-delay", o.SyntheticDelay,
		"Hold every request back this long before serving it, as kcp's cache-server does with this flag: for tests of clients against a slow cache.")
	fss.FlagSet("Debugging").StringVar(&o.ProfilerAddress, "profiler-address", o.ProfilerAddress,
		"[host]:port to serve Go's profiler (/debug/pprof/) on, over plain HTTP and without authentication; empty serves none.")
	o.SecureServing.AddFlags(fss.FlagSet("Secure serving"))
	markReloadedFlags(fss.FlagSet("Secure serving"))
	o.Authentication.AddFlags(fss.FlagSet("Authentication"))
	o.Authorization.AddFlags(fss.FlagSet("Authorization"))
	o.Audit.AddFlags(fss.FlagSet("Auditing"))
	o.Etcd.AddFlags(fss.FlagSet("Etcd"))
	markKcpCompatibilityFlags(fss.FlagSet("Etcd"))
	o.EmbeddedEtcd.AddFlags(fss.FlagSet("Embedded etcd"))
	o.Removal.AddFlags(fss.FlagSet("Data removal"))
	o.Limits.AddFlags(fss.FlagSet("Limits"))
	o.Hierarchy.AddFlags(fss.FlagSet("Cache hierarchy"))
	fss.FlagSet("Feature gates").Var(cliflag.NewMapStringBool(&o.FeatureGates), "feature-gates",
		"Upstream feature gates to set, as key=value pairs. The cache server turns ListFromCacheSnapshot off by default (it keeps watch cache snapshots nobody reads from a cache), and SizeBasedListCostEstimate (it keeps every object's size for API Priority and Fairness, which this server does not run). CBORServingAndStorage=true (alpha, off) also answers the cached types in CBOR to clients that ask for application/cbor, as client-go does with ClientsAllowCBOR; JSON stays the default, objects are stored as JSON all the same, and request bodies stay JSON or YAML.")
}

// Complete fills in defaults that depend on other options.
//
// An empty RootDirectory stays empty, as in kcp's cache-server, where it
// leaves the certificate directory unset (the serving certificate is then
// --tls-cert-file's or generated in memory) and puts the embedded etcd in
// ./etcd-server. kcp-operator relies on it: it passes --root-directory= with
// --tls-cert-file and --embedded-etcd-directory on a read-only file system,
// where the server may write only the etcd directory.
func (o *Options) Complete() (CompletedOptions, error) {
	root := ""
	if o.RootDirectory != "" {
		var err error
		if root, err = filepath.Abs(o.RootDirectory); err != nil {
			return CompletedOptions{}, fmt.Errorf("resolving --root-directory: %w", err)
		}
	}
	o.RootDirectory = root
	if o.SecureServing.ServerCert.CertDirectory == "" {
		o.SecureServing.ServerCert.CertDirectory = root
	}
	o.EmbeddedEtcd.Enabled = len(o.Etcd.StorageConfig.Transport.ServerList) == 0
	dir, err := EmbeddedEtcdDirectory(root, o.EmbeddedEtcd.Directory)
	if err != nil {
		return CompletedOptions{}, err
	}
	o.EmbeddedEtcd.Directory = dir
	ignored := o.takeIgnoredFlags()
	return CompletedOptions{&completedOptions{Options: *o, IgnoredFlags: ignored}}, nil
}

// Validate reports every invalid or contradictory setting.
func (o CompletedOptions) Validate() []error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	errs = append(errs, o.Audit.Validate()...)
	errs = append(errs, o.Removal.Validate()...)
	errs = append(errs, o.Limits.Validate()...)
	errs = append(errs, o.Hierarchy.Validate()...)
	errs = append(errs, o.EmbeddedEtcd.ValidateStorage(!o.EmbeddedEtcd.Enabled)...)
	if o.EmbeddedEtcd.Enabled {
		// The embedded member is filled in as the server list later; the
		// upstream check for a non-empty list does not apply yet.
		errs = append(errs, o.EmbeddedEtcd.Validate()...)
	} else {
		errs = append(errs, o.Etcd.Validate()...)
	}
	if _, err := o.Types(); err != nil {
		errs = append(errs, fmt.Errorf("--bootstrap-types: %w", err))
	}
	errs = append(errs, o.validateFeatureGates()...)
	if o.SyntheticDelay < 0 {
		errs = append(errs, fmt.Errorf("--synthetic-delay must not be negative, got %s", o.SyntheticDelay))
	}
	return errs
}

// Types returns the bootstrapped types --bootstrap-types names.
func (o *Options) Types() ([]kcpcache.Type, error) {
	var names []string
	for _, n := range o.BootstrapTypes {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	return kcpcache.KcpTypesNamed(names)
}
