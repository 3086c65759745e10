package cache

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A cache hierarchy is several named caches ("regions") that mirror each
// other. Each shard pushes to one cache, its home; every other cache that
// peers with the home pulls the home's partitions and serves them too. The
// names below are what caches, shards and readers of a hierarchy share.
const (
	// AnnotationHome is set on every mirrored copy: the name of the cache
	// that is the home of the copy's partition, where the shard writes it.
	// A copy without it was written at the cache that holds it.
	AnnotationHome = "cache.kcp.io/home"

	// AnnotationHomeResourceVersion records, on a mirrored copy, the
	// resourceVersion of the object at its home when the copy was written.
	AnnotationHomeResourceVersion = "cache.kcp.io/home-resource-version"

	// AnnotationHomeEpoch records, on a mirrored copy, the home's epoch
	// (EpochHeader) when the copy was written. A home that answers in
	// another epoch has lost or gone back in its data (a restore from a
	// backup); its mirrors keep such copies until the shard has converged
	// its partition at the home again (its heartbeat says so).
	AnnotationHomeEpoch = "cache.kcp.io/home-epoch"

	// AnnotationHomePath records, on a mirrored copy, the caches it came
	// through, comma separated: its home first, then each relay in order,
	// not the cache that holds it ("south" at a mirror of south, "south,west"
	// at a cache that mirrors south through west). A cache never takes a
	// copy whose path names it: a partition cannot come back around a loop.
	AnnotationHomePath = "cache.kcp.io/home-path"

	// CopyBookkeepingHeader, sent with the value "keep" on a read, asks a
	// cache to serve its copies with the three annotations above. Without
	// it a reader other than a peer cache or the server itself is served a
	// copy as its home serves the object (HidesCopyBookkeeping): kcp serves
	// what it reads from the cache to its own users, who must not see a
	// mirror's bookkeeping.
	CopyBookkeepingHeader = "Kcp-Cache-Copy-Bookkeeping"

	// CacheNameHeader names the cache that answered, on every response of a
	// cache that has a name (--cache-name).
	CacheNameHeader = "Kcp-Cache-Name"

	// HomeRevisionHeader says, for a read of data, which state of each home
	// the answer reflects: a comma-separated list of
	// "<home>=<home epoch>/<revision>" (FormatHomeRevisions): the home's
	// revision of the last change to the data read (that shard's, or every
	// shard's for the wildcard, of that type) that the answer includes. A
	// mirror that has listed the data since counts it as changed at the
	// list's revision (a list does not say when a deletion happened). A
	// reader that has seen revision R of a home (in that home's epoch) and
	// is then answered with a lower one by a mirror would be going back in
	// time: cache/client refuses such an answer.
	HomeRevisionHeader = "Kcp-Cache-Home-Revision"

	// FreshnessAgeHeader says, on a read served from a mirror without a
	// freshness check (resourceVersion set, "0" included), how long ago
	// each home last confirmed the mirror's copy; on a read served by a
	// member of an in-memory group cut off from its majority, how long ago
	// that member (named instead of a home) last knew a leader:
	// "<name>=<seconds>", comma separated, seconds with millisecond
	// precision (FormatFreshnessAges).
	FreshnessAgeHeader = "Kcp-Cache-Freshness-Age"

	// PeerUserPrefix starts the user name a peer cache authenticates as:
	// cache c reads its peers as PeerUserPrefix+c. Peers read every
	// partition and write none (mirrors pull; they never push).
	PeerUserPrefix = "system:kcp:cache:"

	// RevisionPath answers a home's revision of one shard's data of one
	// resource: GET RevisionPath?shard=<shard or *>&resource=<resource.group>
	// returns a HomeRevisionAnswer covering every write the cache had
	// acknowledged when the request arrived.
	RevisionPath = "/kcp-cache/revision"

	// RevisionsPath answers a home's revision of every partition's data of
	// every resource at once, without waiting for anything: GET returns a
	// HomeRevisionsAnswer. Mirrors read it to report how far behind each
	// partition they are (kcp_cache_mirror_partition_lag_*).
	RevisionsPath = "/kcp-cache/revisions"

	// HomesPath answers a cache's table of home claims: GET
	// HomesPath[?shard=<shard>] returns a HomesAnswer. A shard's home is a
	// claim (shard, home cache, generation), never inferred from data: see
	// docs/regions.md.
	HomesPath = "/kcp-cache/homes"
)

// HomesAnswer is the body of a HomesPath answer.
type HomesAnswer struct {
	// Cache and Epoch name the answering cache and its epoch.
	Cache string `json:"cache"`
	Epoch string `json:"epoch"`
	// Claims are the claims the cache knows: the ones it holds and the
	// ones it learnt from its peers, the highest generation per shard.
	Claims []HomeClaim `json:"claims"`
	// Claiming are shards this cache is claiming at this moment (it asked
	// its peers and has not decided yet): an asker must not claim them.
	Claiming []string `json:"claiming,omitempty"`
	// Routes are the homes whose partitions the cache serves onward, and
	// by which path: its own (a path of itself alone), and every home it
	// mirrors over a live path. A cache takes a home's partitions from the
	// peer with the shortest such path that does not name the cache.
	Routes []Route `json:"routes,omitempty"`
	// PassedOn, when set, are the only resources ("<resource>.<group>")
	// the answering cache passes on to the asking peer (--pass-on): its
	// other resources' data is not served to the asker, which answers
	// reads of it 503 NotPassedOn rather than as absent.
	PassedOn []string `json:"passedOn,omitempty"`
	// Search is set in the answer to a search (SearchParameter): what the
	// caches reached through the answering one said.
	Search *SearchAnswer `json:"search,omitempty"`
}

// A search asks every cache of the hierarchy, not only the asker's peers,
// whether it knows a shard's claim or is claiming it: GET
// HomesPath?shard=<shard>&search=<id>[&claimant=<cache>]&budget=<ms>. A
// cache that knows the claim, or is claiming the shard, answers so; one
// that knows nothing asks each of its peers but the asker the same search
// (same id, within a smaller budget) and answers with what they said. A
// cache asked a search it was already asked answers Duplicate: it is
// counted on the path that reached it first. A search with a claimant is
// that cache claiming the shard: every cache it reaches remembers it, so
// that a consistent read of every shard there asks about the shard until
// its claim is known (docs/regions.md, "New shards across relays").
const (
	SearchParameter         = "search"
	SearchClaimantParameter = "claimant"
	// SearchBudgetParameter is how long, in milliseconds, the asker waits
	// for the answer.
	SearchBudgetParameter = "budget"
)

// SearchAnswer is what a search reached through the answering cache.
type SearchAnswer struct {
	// Duplicate: the cache had already been asked this search.
	Duplicate bool `json:"duplicate,omitempty"`
	// Reached are the caches whose whole answer this one holds, the
	// answering cache included.
	Reached []string `json:"reached,omitempty"`
	// Unreached are the caches a reached cache asked that did not answer.
	Unreached []SearchUnreached `json:"unreached,omitempty"`
	// Claiming are the caches that were claiming the shard when asked.
	Claiming []string `json:"claiming,omitempty"`
}

// SearchUnreached is a cache a search did not reach through one of its
// peers.
type SearchUnreached struct {
	Cache   string `json:"cache"`
	Via     string `json:"via"`
	Message string `json:"message"`
}

// Route is the path by which a cache holds a home's partitions.
type Route struct {
	Home string `json:"home"`
	// Path runs from the answering cache to the home, both included.
	Path []string `json:"path"`
	// Epoch is the home's epoch that the cache's copies of its partitions
	// came from (the answering cache's own epoch for its own route).
	Epoch string `json:"epoch,omitempty"`
	// Resources, when set, are the only resources of the home's data that
	// the answering cache holds and passes on to the asker (what every hop
	// of the path passes on); unset: all of them.
	Resources []string `json:"resources,omitempty"`
}

// PassesOn reports whether the resource gr ("<resource>.<group>", an
// identity resource "<resource>:<identity>.<group>" as its resource) is in
// resources, a --pass-on list; an empty list passes on everything.
func PassesOn(resources []string, gr string) bool {
	if len(resources) == 0 {
		return true
	}
	plural, rest, _ := strings.Cut(gr, ".")
	if base, _, identity := strings.Cut(plural, ":"); identity {
		plural = base
	}
	withoutIdentity := plural
	if rest != "" {
		withoutIdentity += "." + rest
	}
	for _, r := range resources {
		if r == gr || r == withoutIdentity {
			return true
		}
	}
	return false
}

// HomeClaim says that Home is the home of Shard, at Generation: a claim with
// a higher generation replaces one with a lower; two claims of the same
// generation naming different homes are a conflict.
type HomeClaim struct {
	Shard      string `json:"shard"`
	Home       string `json:"home"`
	Generation int64  `json:"generation"`
	// Held says the answering cache is Home.
	Held bool `json:"held,omitempty"`
	// ConflictsWith names another home claimed at the same generation.
	ConflictsWith string `json:"conflictsWith,omitempty"`
}

// PeerUser is the user name cache authenticates as at its peers.
func PeerUser(cache string) string { return PeerUserPrefix + cache }

// PeerFromUser returns the cache a user name is the peer identity of.
func PeerFromUser(name string) (string, bool) {
	cache, ok := strings.CutPrefix(name, PeerUserPrefix)
	if !ok || ValidateCacheName(cache) != nil {
		return "", false
	}
	return cache, true
}

// ValidateCacheName checks a cache's name: a DNS label, because it appears
// in user names, annotations and headers.
func ValidateCacheName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("cache name %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// HomeRevisionsAnswer is the body of a RevisionsPath answer.
type HomeRevisionsAnswer struct {
	Cache string `json:"cache"`
	Epoch string `json:"epoch"`
	// Processed is the revision up to which the cache has seen every
	// change: no partition changed between its revision and Processed.
	Processed int64 `json:"processed"`
	// Partitions holds, per shard and resource ("<resource>.<group>"), the
	// revision of the last change the cache knows of.
	Partitions []PartitionRevision `json:"partitions"`
}

// PartitionRevision is one partition's revision of one resource.
type PartitionRevision struct {
	Shard    string `json:"shard"`
	Resource string `json:"resource"`
	Revision int64  `json:"revision"`
}

// HomeRevisionAnswer is the body of a RevisionPath answer.
type HomeRevisionAnswer struct {
	// Cache and Epoch name the answering cache and its epoch; revisions of
	// two epochs are not comparable.
	Cache string `json:"cache"`
	Epoch string `json:"epoch"`
	// Revision is the revision of the last change to the asked data that
	// the cache knows of (at least the revision at which the data last
	// changed, and every write acknowledged before the request is covered).
	// In a relayed answer it is the answering cache's own revision of the
	// last change to its copy of the asked data, at which that copy holds
	// everything the home had when the question reached the home (and
	// RelayedRevision.Through how long it stayed so).
	Revision int64 `json:"revision"`
	// Relayed is set when the answering cache is not the data's home but
	// relays it (RevisionPath's home parameter, or a shard homed
	// elsewhere): it asked the home along its path first.
	Relayed *RelayedRevision `json:"relayed,omitempty"`
}

// RelayedRevision is what a relay's copy of a home's data holds at the
// relay's revision of a HomeRevisionAnswer, in the home's own terms.
type RelayedRevision struct {
	Home      string `json:"home"`
	HomeEpoch string `json:"homeEpoch"`
	// Path runs from the answering cache to the home, both included.
	Path []string `json:"path"`
	// Base is the home revision every shard of the home counts as changed
	// at (the relay's last list of the data); Shards the home revision of
	// the last change since, per shard, for the shards that changed. A
	// shard's last change is the larger of the two.
	Base   int64            `json:"base"`
	Shards map[string]int64 `json:"shards,omitempty"`
	// Through is the answering cache's own storage revision up to which
	// its copy of the asked data did not change after Revision: an asker
	// that has applied Revision knows the copy as of Through. Revision is
	// what a mirror's stream of the type reaches (the revision of a change
	// of that type); the storage's own revision, which any other write
	// moves (another type, a persisted claim), may never come in that
	// stream. Zero: Revision.
	Through int64 `json:"through,omitempty"`
}

// RevisionHomeParameter, on RevisionPath, asks a relay for its revision
// of the data of the shards homed at the named cache (with shard "*").
const RevisionHomeParameter = "home"

// HomeRevision is one entry of HomeRevisionHeader.
type HomeRevision struct {
	Home     string
	Epoch    string
	Revision int64
}

// FormatHomeRevisions renders entries for HomeRevisionHeader, sorted by home.
func FormatHomeRevisions(entries []HomeRevision) string {
	sorted := append([]HomeRevision(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Home < sorted[j].Home })
	parts := make([]string, 0, len(sorted))
	for _, e := range sorted {
		parts = append(parts, e.Home+"="+e.Epoch+"/"+strconv.FormatInt(e.Revision, 10))
	}
	return strings.Join(parts, ", ")
}

// ParseHomeRevisions reads a HomeRevisionHeader value.
func ParseHomeRevisions(value string) ([]HomeRevision, error) {
	var out []HomeRevision
	for _, part := range strings.Split(value, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		home, rest, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%s entry %q has no \"=\"", HomeRevisionHeader, part)
		}
		slash := strings.LastIndex(rest, "/")
		if slash < 0 {
			return nil, fmt.Errorf("%s entry %q has no epoch/revision", HomeRevisionHeader, part)
		}
		rev, err := strconv.ParseInt(rest[slash+1:], 10, 64)
		if err != nil || rev < 0 {
			return nil, fmt.Errorf("%s entry %q: revision is not a non-negative integer", HomeRevisionHeader, part)
		}
		out = append(out, HomeRevision{Home: home, Epoch: rest[:slash], Revision: rev})
	}
	return out, nil
}

// FormatFreshnessAges renders ages (by home, or by group member) for
// FreshnessAgeHeader, sorted by name.
func FormatFreshnessAges(ages map[string]time.Duration) string {
	names := make([]string, 0, len(ages))
	for n := range ages {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%.3f", n, ages[n].Seconds()))
	}
	return strings.Join(parts, ", ")
}

// CopyBookkeeping are the annotations a mirror keeps on its copies.
var CopyBookkeeping = []string{AnnotationHome, AnnotationHomeResourceVersion, AnnotationHomeEpoch, AnnotationHomePath}

var hideBookkeepingKey = NewContextKey[bool]("hide copy bookkeeping")

// WithoutCopyBookkeeping returns a context whose reads are answered without
// CopyBookkeeping: copies served as their home serves them.
func WithoutCopyBookkeeping(ctx context.Context) context.Context {
	return hideBookkeepingKey.With(ctx, true)
}

// HidesCopyBookkeeping reports whether reads in ctx are answered without
// CopyBookkeeping.
func HidesCopyBookkeeping(ctx context.Context) bool {
	hide, _ := hideBookkeepingKey.From(ctx)
	return hide
}
