package fallback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/client"
)

// ReasonFallback is the Status reason detail and the log key of every answer
// the fallback gives instead of the shard.
const ReasonFallback = "KcpCacheFallback"

var requestInfos = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// Serve answers r, a request for workspace t.Cluster that kcp's front-proxy
// could not deliver to shard t.Shard (cause says why). trail is the request's
// path below /clusters/<workspace>, with its leading slash: "/apis/...".
// The user is the one kcp's front-proxy authenticated (request.UserFrom).
func (f *Fallback) Serve(w http.ResponseWriter, r *http.Request, t Target, trail string, cause error) {
	logger := klog.FromContext(r.Context()).WithValues("shard", t.Shard, "cluster", t.Cluster, "path", trail)
	lost := fmt.Sprintf("shard %s does not answer (%v)", t.Shard, cause)

	probe := r.Clone(r.Context())
	probe.URL = &url.URL{Path: trail, RawQuery: r.URL.RawQuery}
	info, err := requestInfos.NewRequestInfo(probe)
	if err != nil || t.Shard == "" || t.Cluster == "" || kcpcache.ValidateClusterName(t.Cluster) != nil {
		writeStatus(w, refused(lost+"; the request cannot be placed in a workspace, so it is not served from the cache"))
		return
	}

	if !info.IsResourceRequest {
		f.serveDiscovery(w, r, t, trail, lost)
		return
	}
	gr := schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}
	switch {
	case !slices.Contains([]string{"get", "list", "watch"}, info.Verb):
		writeStatus(w, refused(fmt.Sprintf("%s; its workspaces are read-only from the cache until it returns, so %s is refused", lost, info.Verb)))
		return
	case info.Subresource != "":
		writeStatus(w, refused(fmt.Sprintf("%s; subresource %s of %s is not replicated to the cache", lost, info.Subresource, gr)))
		return
	}
	typ, ok := f.types[gr]
	if !ok || !slices.Contains(typ.Versions, info.APIVersion) {
		writeStatus(w, refused(fmt.Sprintf("%s; %s is not replicated to the cache", lost, gr.WithVersion(info.APIVersion))))
		return
	}

	a := attributes{verb: info.Verb, group: info.APIGroup, resource: info.Resource, namespace: info.Namespace, name: info.Name}
	user, _ := userFrom(r)
	d, err := f.authorize(r.Context(), f.newSnapshot(t), user, a)
	if err != nil {
		logger.Info("Fallback cannot read the cache", "err", err)
		writeStatus(w, unavailable(fmt.Sprintf("%s, and the cache cannot answer for it: %v", lost, err)))
		return
	}
	if !d.allowed {
		logger.V(2).Info("Fallback denied", "user", userName(user), "reason", d.reason)
		writeStatus(w, forbidden(gr, info.Name, fmt.Sprintf("%s; the read-only fallback denies it: %s", lost, d.reason)))
		return
	}
	logger.V(4).Info("Fallback allowed", "user", userName(user), "reason", d.reason)

	fresh, err := f.freshness(r.Context(), t)
	if err != nil {
		writeStatus(w, unavailable(fmt.Sprintf("%s, and the cache cannot vouch for its copy: %v", lost, err)))
		return
	}
	query, err := forCache(r.URL.Query(), info.Verb, gr)
	if err != nil {
		writeStatus(w, err)
		return
	}
	if info.Verb == "watch" {
		query.Set("timeoutSeconds", strconv.Itoa(f.watchSeconds(query.Get("timeoutSeconds"))))
	}
	f.proxy(w, r, t, trail, query, info.Verb == "watch", warning(t, cause, fresh))
}

// freshnessOf is what the cache says about how current a user-read
// partition is.
type freshnessOf struct {
	age       time.Duration
	converged bool
	pending   int64
}

// freshness reads the user-read partition's heartbeat. Without one the
// cache cannot say that the partition ever held all of the shard's data, so
// an absent object could be one never pushed: the fallback then refuses, as
// it does when the partition was last converged in another cache epoch (a
// restored or emptied cache).
func (f *Fallback) freshness(ctx context.Context, t Target) (freshnessOf, error) {
	partition := kcpcache.UserReadPartition(t.Shard)
	hb, err := f.client.Cluster(partition, kcpcache.HeartbeatCluster).Resource(kcpcache.HeartbeatResource).Get(ctx, partition, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return freshnessOf{}, fmt.Errorf("the cache holds no heartbeat of partition %s, so nothing says it ever held all of the shard's user-read data", partition)
	}
	if err != nil {
		return freshnessOf{}, fmt.Errorf("reading the heartbeat of partition %s: %w", partition, err)
	}
	var beat kcpcache.Heartbeat
	raw, _ := json.Marshal(hb.Object)
	if err := json.Unmarshal(raw, &beat); err != nil {
		return freshnessOf{}, fmt.Errorf("decoding the heartbeat of partition %s: %w", partition, err)
	}
	if beat.Spec.Epoch == "" {
		return freshnessOf{}, fmt.Errorf("partition %s was never converged in full", partition)
	}
	// The epoch the partition must have converged in: that of the cache
	// the shard pushes to. A mirror's copy of the heartbeat records it (the
	// home's epoch when the copy was written); at the home itself, it is
	// the answering cache's own.
	want, known := f.client.Epochs().Current()
	if home := hb.GetAnnotations()[kcpcache.AnnotationHomeEpoch]; home != "" {
		want, known = home, true
	}
	if known && want != beat.Spec.Epoch {
		return freshnessOf{}, fmt.Errorf("partition %s was last converged in cache epoch %q, and its cache is in epoch %q now", partition, beat.Spec.Epoch, want)
	}
	return freshnessOf{
		age:       f.now().Sub(beat.Spec.RenewTime.Time).Round(time.Second),
		converged: beat.Spec.Converged,
		pending:   beat.Spec.PendingKeys,
	}, nil
}

// warning is the Warning header of every answer served from the cache.
func warning(t Target, cause error, fresh freshnessOf) string {
	state := fmt.Sprintf("last confirmed by the shard %s ago", fresh.age)
	if !fresh.converged {
		state += fmt.Sprintf(", with %d changes not yet replicated then", fresh.pending)
	}
	text := fmt.Sprintf("shard %s does not answer (%v): read-only data of workspace %s from the kcp cache, %s", t.Shard, cause, t.Cluster, state)
	return `299 - "` + strings.NewReplacer(`\`, `\\`, `"`, `'`).Replace(text) + `"`
}

func (f *Fallback) watchSeconds(asked string) int {
	limit := int(f.maxWatch / time.Second)
	if n, err := strconv.Atoi(asked); err == nil && n > 0 && n < limit {
		return n
	}
	return limit
}

// proxy sends the read to the cache, scoped to the shard's user-read
// partition, and copies the answer back with its versions rewritten.
func (f *Fallback) proxy(w http.ResponseWriter, r *http.Request, t Target, trail string, query url.Values, watch bool, warn string) {
	scoped, err := client.ScopedConfig(f.cache, kcpcache.UserReadPartition(t.Shard), t.Cluster)
	if err != nil {
		writeStatus(w, unavailable(err.Error()))
		return
	}
	target, err := url.Parse(strings.TrimSuffix(scoped.Host, "/") + trail)
	if err != nil {
		writeStatus(w, unavailable(err.Error()))
		return
	}
	target.RawQuery = query.Encode()
	out, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target.String(), nil)
	if err != nil {
		writeStatus(w, unavailable(err.Error()))
		return
	}
	out.Header.Set("Accept", jsonOnly(r.Header.Get("Accept")))
	out.Header.Set("User-Agent", r.Header.Get("User-Agent"))
	resp, err := f.transport.RoundTrip(out)
	if err != nil {
		writeStatus(w, unavailable(fmt.Sprintf("shard %s does not answer, and neither does the cache: %v", t.Shard, err)))
		return
	}
	defer resp.Body.Close()

	for k, vs := range resp.Header {
		if k == "Content-Length" || k == "Content-Encoding" {
			continue
		}
		w.Header()[k] = vs
	}
	w.Header().Add("Warning", warn)
	if resp.StatusCode >= 500 {
		// The cache cannot serve it either (its own home lost, a
		// consistency check failed): say both.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var st metav1.Status
		_ = json.Unmarshal(body, &st)
		writeStatus(w, unavailable(fmt.Sprintf("shard %s does not answer, and the cache refused the read (%d %s): %s", t.Shard, resp.StatusCode, st.Reason, st.Message)))
		return
	}
	if watch && resp.StatusCode == http.StatusOK {
		w.WriteHeader(resp.StatusCode)
		// A watch may stay silent for long: the client must have the
		// headers (and know the watch started) before the first event.
		if flusher, ok := w.(http.Flusher); ok {
			flusher.Flush()
		}
		if err := rewriteWatch(w, resp.Body); err != nil && r.Context().Err() == nil {
			klog.FromContext(r.Context()).V(2).Info("Fallback watch ended", "err", err)
		}
		return
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		writeStatus(w, unavailable(fmt.Sprintf("reading the cache's answer: %v", err)))
		return
	}
	if body, err = rewriteBody(body); err != nil {
		writeStatus(w, unavailable(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// jsonOnly keeps the JSON media types of an Accept header (kubectl's Table
// among them): the cache answers JSON, and the fallback rewrites JSON.
func jsonOnly(accept string) string {
	var keep []string
	for _, part := range strings.Split(accept, ",") {
		if strings.HasPrefix(strings.TrimSpace(part), "application/json") {
			keep = append(keep, strings.TrimSpace(part))
		}
	}
	if len(keep) == 0 {
		return "application/json"
	}
	return strings.Join(keep, ",")
}

func userName(u interface{ GetName() string }) string {
	if u == nil {
		return ""
	}
	return u.GetName()
}

// unavailable is a 503 worth retrying soon: the cache could not answer, or
// could not vouch for the partition.
func unavailable(msg string) error {
	err := refused(msg)
	err.ErrStatus.Details.RetryAfterSeconds = 5
	return err
}

// refused is a 503 that retrying does not change while the shard is lost: a
// write, a type or path the cache does not hold. It carries no Retry-After,
// so that clients (client-go retries a 503 that has one) show it at once.
func refused(msg string) *apierrors.StatusError {
	err := apierrors.NewServiceUnavailable(msg)
	err.ErrStatus.Details = &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: ReasonFallback, Message: "served by the kcp cache's read-only fallback"}}}
	return err
}

func forbidden(gr schema.GroupResource, name, msg string) error {
	return apierrors.NewForbidden(gr, name, errors.New(msg))
}

// writeStatus writes err as a Kubernetes Status in JSON.
func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewServiceUnavailable(err.Error())
	}
	st := status.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}
