// Command kcpswitch measures a cache switch in kcp's sharded test environment for
// hack/kcp/kcp-cache-switch.sh: what a reader of the cache sees, when every shard's partition
// in the cache equals what the shard holds, and which layouts the cache's etcd holds.
//
//	kcpswitch reader --kubeconfig K --out FILE [--interval 150ms] [--gone FILE]
//	    LIST every APIExport of every partition (shards/*/clusters/*) until SIGTERM; one JSON
//	    line per LIST: time, answer, count, and the objects an earlier answer held that this
//	    one lacks (a defect, unless FILE --gone names them: deleted on purpose).
//	kcpswitch summarize --reader FILE --phases FILE
//	    a table of the reader's LISTs in each phase (PHASES: "<unix ms> <name>" lines).
//	kcpswitch converged --kubeconfig K --shard NAME=URL... --shard-ca F --shard-cert F --shard-key F
//	    [--since MS] [--timeout 5m]
//	    wait until, for every type kcp v0.32 replicates, every shard's objects (outside system:
//	    clusters, annotated where kcp says so) and the cache's partition of that shard are the
//	    same objects with the same content; print the time since --since and the counts.
//	    With --each, each shard on its own: a line "converged SHARD S s after the start" as
//	    its partition converges (hack/kcp/kcp-chaos.sh times each shard after each fault).
//	kcpswitch rv --kubeconfig K
//	    the resourceVersion of a consistent LIST (no resourceVersion) of every APIExport of
//	    every partition, to tell whether the cache's revision ever goes back.
//	kcpswitch keys --endpoint URL --cacert F --cert F --key F [--prefix /cache]
//	    count the keys of the cache's etcd by layout (kcplayout.Classify) and resource, and name
//	    the CRDs ("  crd-name NAME 1" lines).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
	"github.com/kcp-cache/kcp-cache/cache/server/embeddedetcd"
	"github.com/kcp-cache/kcp-cache/cache/server/kcplayout"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kcpswitch reader|summarize|converged|keys|rv ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "reader":
		err = reader(os.Args[2:])
	case "summarize":
		err = summarize(os.Args[2:])
	case "converged":
		err = converged(os.Args[2:])
	case "keys":
		err = keys(os.Args[2:])
	case "rv":
		err = rv(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcpswitch:", err)
		os.Exit(1)
	}
}

// exportsPath is what the reader lists: every APIExport of every partition, as a shard's
// wildcard informer does.
const exportsPath = "/services/cache/shards/*/clusters/*/apis/apis.kcp.io/v1alpha2/apiexports"

// poll is one LIST of the reader.
type poll struct {
	T       int64    `json:"t"`  // unix ms at the request
	Ms      int64    `json:"ms"` // its latency
	Code    int      `json:"code,omitempty"`
	Err     string   `json:"err,omitempty"`
	N       int      `json:"n"`
	Missing []string `json:"missing,omitempty"`
}

func reader(args []string) error {
	fs := flag.NewFlagSet("reader", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the cache's kubeconfig")
	out := fs.String("out", "", "the file of JSON lines")
	interval := fs.Duration("interval", 150*time.Millisecond, "between LISTs")
	gone := fs.String("gone", "", "a file naming objects deleted on purpose (shard/cluster/name lines)")
	_ = fs.Parse(args)
	cfg, client, err := clientFor(*kubeconfig)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	defer w.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	seen := map[string]bool{}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		p, names := list(ctx, client, cfg.Host+exportsPath)
		if p.Code == http.StatusOK {
			deleted := lines(*gone)
			for name := range seen {
				if !names[name] && !deleted[name] {
					p.Missing = append(p.Missing, name)
				}
			}
			sort.Strings(p.Missing)
			for name := range names {
				seen[name] = true
			}
		}
		if ctx.Err() == nil {
			line, _ := json.Marshal(p)
			_, _ = w.Write(append(line, '\n'))
			_ = w.Flush()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// list LISTs url once: the poll and, on 200, the objects as shard/cluster/name.
func list(ctx context.Context, client *http.Client, url string) (poll, map[string]bool) {
	start := time.Now()
	p := poll{T: start.UnixMilli()}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	p.Ms = time.Since(start).Milliseconds()
	if err != nil {
		p.Err = errClass(err)
		return p, nil
	}
	defer resp.Body.Close()
	p.Code = resp.StatusCode
	body, err := io.ReadAll(resp.Body)
	p.Ms = time.Since(start).Milliseconds()
	if err != nil {
		p.Err = errClass(err)
		return p, nil
	}
	if resp.StatusCode != http.StatusOK {
		return p, nil
	}
	var l objectList
	if err := json.Unmarshal(body, &l); err != nil {
		p.Err = "decode"
		return p, nil
	}
	names := map[string]bool{}
	for _, o := range l.Items {
		a := o.Metadata.Annotations
		names[a[kcpcache.AnnotationShard]+"/"+a[kcpcache.AnnotationCluster]+"/"+o.Metadata.Name] = true
	}
	p.N = len(l.Items)
	return p, names
}

func errClass(err error) string {
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	case errors.As(err, &op):
		return "net"
	}
	return "other"
}

// lines reads a file of lines into a set; a missing file is empty.
func lines(path string) map[string]bool {
	set := map[string]bool{}
	if path == "" {
		return set
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return set
	}
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			set[l] = true
		}
	}
	return set
}

type object struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	rest map[string]json.RawMessage
}

func (o *object) UnmarshalJSON(data []byte) error {
	type plain object
	if err := json.Unmarshal(data, (*plain)(o)); err != nil {
		return err
	}
	return json.Unmarshal(data, &o.rest)
}

type objectList struct {
	Items []object `json:"items"`
}

func summarize(args []string) error {
	fs := flag.NewFlagSet("summarize", flag.ExitOnError)
	readerFile := fs.String("reader", "", "the reader's JSON lines")
	phasesFile := fs.String("phases", "", `"<unix ms> <name>" lines`)
	_ = fs.Parse(args)
	type phase struct {
		start int64
		name  string
	}
	var phases []phase
	data, err := os.ReadFile(*phasesFile)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		ms, name, _ := strings.Cut(l, " ")
		t, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return fmt.Errorf("phases: %q: %w", l, err)
		}
		phases = append(phases, phase{t, name})
	}
	f, err := os.Open(*readerFile)
	if err != nil {
		return err
	}
	defer f.Close()
	type stats struct {
		polls, ok           int
		answers             map[string]int
		minN, maxN          int
		longestGap, gapFrom int64
		missing             map[string]int64
	}
	all := make([]stats, len(phases))
	for i := range all {
		all[i] = stats{answers: map[string]int{}, minN: -1, missing: map[string]int64{}}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var lastOK int64
	for sc.Scan() {
		var p poll
		if json.Unmarshal(sc.Bytes(), &p) != nil {
			continue
		}
		i := sort.Search(len(phases), func(i int) bool { return phases[i].start > p.T }) - 1
		if i < 0 {
			continue
		}
		s := &all[i]
		s.polls++
		answer := p.Err
		if answer == "" {
			answer = strconv.Itoa(p.Code)
		}
		s.answers[answer]++
		if p.Code == http.StatusOK && p.Err == "" {
			s.ok++
			if s.minN < 0 || p.N < s.minN {
				s.minN = p.N
			}
			s.maxN = max(s.maxN, p.N)
			for _, m := range p.Missing {
				if _, ok := s.missing[m]; !ok {
					s.missing[m] = p.T
				}
			}
			if lastOK != 0 && p.T-lastOK > s.longestGap {
				s.longestGap, s.gapFrom = p.T-lastOK, lastOK
			}
			lastOK = p.T
		}
	}
	fmt.Println("| phase | LISTs | answers | objects listed (min-max of 200s) | longest time between two 200s | objects missing from a 200 |")
	fmt.Println("|---|---|---|---|---|---|")
	for i, ph := range phases {
		s := all[i]
		var answers []string
		for a, n := range s.answers {
			answers = append(answers, fmt.Sprintf("%s: %d", a, n))
		}
		sort.Strings(answers)
		counts := "-"
		if s.ok > 0 {
			counts = fmt.Sprintf("%d-%d", s.minN, s.maxN)
		}
		missing := "none"
		if len(s.missing) > 0 {
			var names []string
			for m := range s.missing {
				names = append(names, m)
			}
			sort.Strings(names)
			if len(names) > 5 {
				names = append(names[:5], "...")
			}
			missing = fmt.Sprintf("%d: %s", len(s.missing), strings.Join(names, ", "))
		}
		gap := "-"
		if s.longestGap > 0 {
			gap = fmt.Sprintf("%.1f s", float64(s.longestGap)/1000)
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", ph.name, s.polls, strings.Join(answers, ", "), counts, gap, missing)
	}
	return sc.Err()
}

type shardFlag map[string]string

func (s shardFlag) String() string { return fmt.Sprint(map[string]string(s)) }
func (s shardFlag) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want NAME=URL, got %q", v)
	}
	s[name] = url
	return nil
}

func converged(args []string) error {
	fs := flag.NewFlagSet("converged", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the cache's kubeconfig")
	shards := shardFlag{}
	fs.Var(shards, "shard", "NAME=URL of a shard (repeated)")
	ca := fs.String("shard-ca", "", "the shards' serving CA")
	cert := fs.String("shard-cert", "", "a client certificate of system:masters at the shards")
	key := fs.String("shard-key", "", "its key")
	since := fs.Int64("since", time.Now().UnixMilli(), "unix ms the time is measured from")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after")
	each := fs.Bool("each", false, "time each shard on its own")
	interval := fs.Duration("interval", 200*time.Millisecond, "between two comparisons")
	_ = fs.Parse(args)
	cacheCfg, cache, err := clientFor(*kubeconfig)
	if err != nil {
		return err
	}
	shardCfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: *ca, CertFile: *cert, KeyFile: *key}}
	shardClient, err := rest.HTTPClientFor(shardCfg)
	if err != nil {
		return err
	}
	var types []kcpcache.Type
	for _, t := range kcpcache.KcpTypes() {
		if t.Replicate != kcpcache.ReplicateNone && t.UsedBy(kcpcache.KcpV032) {
			types = append(types, t)
		}
	}
	deadline := time.Now().Add(*timeout)
	pending := &eachState{last: map[string]string{}}
	for name := range shards {
		pending.pending = append(pending.pending, name)
	}
	sort.Strings(pending.pending)
	var identities map[string]string
	for {
		if identities == nil {
			identities, err = exportIdentities(shardClient, shards)
			if err != nil && time.Now().After(deadline) {
				return err
			}
		}
		if *each {
			done, err := convergedEach(pending, *since, deadline, func(name string) (string, []string, error) {
				return compare(cache, cacheCfg.Host, shardClient, shardFlag{name: shards[name]}, types, identities)
			})
			if done || err != nil {
				return err
			}
			time.Sleep(*interval)
			continue
		}
		table, diffs, err := compare(cache, cacheCfg.Host, shardClient, shards, types, identities)
		if err == nil && len(diffs) == 0 {
			fmt.Printf("converged %.1f s after the start\n", float64(time.Now().UnixMilli()-*since)/1000)
			fmt.Print(table)
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Print(table)
			if err != nil {
				return err
			}
			if len(diffs) > 20 {
				diffs = append(diffs[:20], "...")
			}
			return fmt.Errorf("not converged after %s: %s", *timeout, strings.Join(diffs, "; "))
		}
		time.Sleep(*interval)
	}
}

// eachState is what convergedEach keeps between two rounds: the shards not converged yet and
// what each one's last comparison found.
type eachState struct {
	pending []string
	last    map[string]string
}

// convergedEach compares every pending shard once (compare); it prints a line for each one
// that converged and drops it. done: no shard is left; an error: the deadline passed first.
func convergedEach(st *eachState, since int64, deadline time.Time, compare func(string) (string, []string, error)) (bool, error) {
	var left []string
	for _, name := range st.pending {
		_, diffs, err := compare(name)
		if err == nil && len(diffs) == 0 {
			fmt.Printf("converged %s %.1f s after the start\n", name, float64(time.Now().UnixMilli()-since)/1000)
			continue
		}
		left = append(left, name)
		switch {
		case err != nil:
			st.last[name] = err.Error()
		default:
			if len(diffs) > 5 {
				diffs = append(diffs[:5], fmt.Sprintf("... (%d in all)", len(diffs)))
			}
			st.last[name] = strings.Join(diffs, "; ")
		}
	}
	st.pending = left
	if len(left) == 0 {
		return true, nil
	}
	if time.Now().After(deadline) {
		for _, name := range left {
			fmt.Printf("not-converged %s: %s\n", name, st.last[name])
		}
		return true, fmt.Errorf("not converged: %s", strings.Join(left, ", "))
	}
	return false, nil
}

// rv prints the resourceVersion of a consistent LIST at the cache.
func rv(args []string) error {
	fs := flag.NewFlagSet("rv", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the cache's kubeconfig")
	_ = fs.Parse(args)
	cfg, client, err := clientFor(*kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+exportsPath+"?limit=1", nil)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the cache answered %d", resp.StatusCode)
	}
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return err
	}
	fmt.Println(l.Metadata.ResourceVersion)
	return nil
}

// compare lists every type at every shard and in the cache's partition of the shard; it
// returns the counts as a table and every difference.
func compare(cache *http.Client, cacheHost string, shardClient *http.Client, shards map[string]string, types []kcpcache.Type, identities map[string]string) (string, []string, error) {
	var b strings.Builder
	names := make([]string, 0, len(shards))
	for name := range shards {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "| type | %s |\n|---|%s\n", strings.Join(names, " (shard / cache) | ")+" (shard / cache)", strings.Repeat("---|", len(names)))
	var diffs []string
	for _, t := range types {
		// The first difference of each type shows both sides.
		explained := false
		row := "| " + t.Resource + " |"
		v := t.StorageVersion
		for _, shard := range names {
			local, localCode, err := fingerprints(shardClient, shards[shard]+"/clusters/*/apis/"+t.Group+"/"+v+"/"+t.Resource)
			if err != nil {
				return "", nil, err
			}
			// A type an APIExport of the root workspace provides (shards, workspacetypes, ...)
			// is listed across workspaces under the export's identity.
			if id, ok := identities[t.Group+"/"+t.Resource]; ok && localCode == http.StatusNotFound {
				local, localCode, err = fingerprints(shardClient, shards[shard]+"/clusters/*/apis/"+t.Group+"/"+v+"/"+t.Resource+":"+id)
				if err != nil {
					return "", nil, err
				}
			}
			if localCode == http.StatusNotFound {
				row += " not served |"
				continue
			}
			for k, o := range local {
				if strings.HasPrefix(o.cluster, "system:") || (t.Replicate == kcpcache.ReplicateAnnotated && !o.replicated) {
					delete(local, k)
				}
			}
			copies, code, err := fingerprints(cache, cacheHost+"/services/cache/shards/"+shard+"/clusters/*/apis/"+t.Group+"/"+v+"/"+t.Resource)
			if err != nil || code != http.StatusOK {
				row += fmt.Sprintf(" %d / answer %d |", len(local), code)
				diffs = append(diffs, fmt.Sprintf("%s at %s: the cache answered %d (%v)", t.Resource, shard, code, err))
				continue
			}
			row += fmt.Sprintf(" %d / %d |", len(local), len(copies))
			for k, o := range local {
				c, ok := copies[k]
				switch {
				case !ok:
					diffs = append(diffs, fmt.Sprintf("%s %s of %s: missing in the cache", t.Resource, k, shard))
				case c.sum != o.sum:
					diff := fmt.Sprintf("%s %s of %s: differs in the cache", t.Resource, k, shard)
					if !explained {
						diff += fmt.Sprintf(" (shard: %s; cache: %s)", o.content, c.content)
						explained = true
					}
					diffs = append(diffs, diff)
				}
			}
			for k := range copies {
				if _, ok := local[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s %s of %s: in the cache, not at the shard", t.Resource, k, shard))
				}
			}
		}
		b.WriteString(row + "\n")
	}
	return b.String(), diffs, nil
}

// exportIdentities maps group/resource to the identity of the APIExport of the root workspace
// that provides it, read at the root shard.
func exportIdentities(client *http.Client, shards map[string]string) (map[string]string, error) {
	root, ok := shards["root"]
	if !ok {
		return map[string]string{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, root+"/clusters/root/apis/apis.kcp.io/v1alpha2/apiexports", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l struct {
		Items []struct {
			Spec struct {
				Resources []struct{ Group, Name string } `json:"resources"`
			} `json:"spec"`
			Status struct {
				IdentityHash string `json:"identityHash"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	ids := map[string]string{}
	for _, e := range l.Items {
		for _, r := range e.Spec.Resources {
			if e.Status.IdentityHash != "" {
				ids[r.Group+"/"+r.Name] = e.Status.IdentityHash
			}
		}
	}
	return ids, nil
}

type fingerprint struct {
	cluster    string
	replicated bool
	sum        string
	// content is what sum is taken of, to show a difference.
	content string
}

// fingerprints lists url: each object by cluster/namespace/name, with what a copy must
// share with its original (uid, labels, annotations but the cache's own, and every field
// beside apiVersion, kind and metadata).
func fingerprints(client *http.Client, url string) (map[string]fingerprint, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, err
	}
	var l objectList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("%s: %w", url, err)
	}
	out := map[string]fingerprint{}
	for _, o := range l.Items {
		m := o.Metadata
		cluster := m.Annotations[kcpcache.AnnotationCluster]
		annotations := map[string]string{}
		for k, v := range m.Annotations {
			switch k {
			case kcpcache.AnnotationShard, kcpcache.AnnotationOriginalResourceVersion, kcpcache.AnnotationOriginalResourceUID:
			default:
				annotations[k] = v
			}
		}
		content := map[string]any{"uid": m.UID, "labels": m.Labels, "annotations": annotations}
		for k, v := range o.rest {
			if k != "apiVersion" && k != "kind" && k != "metadata" {
				d := json.NewDecoder(strings.NewReader(string(v)))
				d.UseNumber()
				var value any
				if err := d.Decode(&value); err != nil {
					return nil, resp.StatusCode, err
				}
				content[k] = value
			}
		}
		data, _ := json.Marshal(normalize(content))
		sum := sha256.Sum256(data)
		out[cluster+"/"+m.Namespace+"/"+m.Name] = fingerprint{
			cluster:    cluster,
			replicated: m.Annotations[kcpcache.AnnotationReplicate] != "",
			sum:        hex.EncodeToString(sum[:8]),
			content:    string(data),
		}
	}
	return out, resp.StatusCode, nil
}

func keys(args []string) error {
	fs := flag.NewFlagSet("keys", flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "the etcd's client URL")
	cacert := fs.String("cacert", "", "its CA")
	cert := fs.String("cert", "", "a client certificate")
	key := fs.String("key", "", "its key")
	prefix := fs.String("prefix", "/cache", "the cache's etcd prefix")
	_ = fs.Parse(args)
	tlsConfig, err := transport.TLSInfo{CertFile: *cert, KeyFile: *key, TrustedCAFile: *cacert}.ClientConfig()
	if err != nil {
		return err
	}
	client, err := embeddedetcd.NewClient([]string{*endpoint}, tlsConfig, 10*time.Second)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := client.Get(ctx, *prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	byLayout := map[string]int{}
	byResource := map[string]int{}
	for _, kv := range resp.Kvs {
		layout := kcplayout.Classify(*prefix, string(kv.Key), kv.Value)
		byLayout[layout]++
		segs := strings.SplitN(strings.TrimPrefix(string(kv.Key), *prefix+"/"), "/", 3)
		resource := segs[0]
		if len(segs) > 1 {
			resource = segs[1] + "." + segs[0]
		}
		byResource[layout+" "+resource]++
		if layout == kcplayout.LayoutCRD {
			byResource["crd-name "+segs[len(segs)-1][strings.LastIndex(segs[len(segs)-1], "/")+1:]] = 1
		}
	}
	for _, layout := range []string{kcplayout.LayoutKCP, kcplayout.LayoutOurs, kcplayout.LayoutCRD, kcplayout.LayoutBookkeeping, kcplayout.LayoutNeither} {
		fmt.Printf("%s %d\n", layout, byLayout[layout])
	}
	var rows []string
	for k, n := range byResource {
		rows = append(rows, fmt.Sprintf("  %s %d", k, n))
	}
	sort.Strings(rows)
	fmt.Println(strings.Join(rows, "\n"))
	return nil
}

// normalize drops empty and zero values (null, {}, [], false, "", 0) from maps,
// recursively: Go's types mean the same by a zero value and by none, and a shard's answer and
// a copy, made through kcp's unstructured converter at another time, differ in which they
// hold ("subresources": {} in a copy, "directlyDeletable": false at the shard).
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			x = normalize(x)
			switch y := x.(type) {
			case nil:
				continue
			case bool:
				if !y {
					continue
				}
			case string:
				if y == "" {
					continue
				}
			case json.Number:
				if y == "0" {
					continue
				}
			case map[string]any:
				if len(y) == 0 {
					continue
				}
			case []any:
				if len(y) == 0 {
					continue
				}
			case map[string]string:
				if len(y) == 0 {
					continue
				}
			}
			out[k] = x
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x)
		}
		return out
	}
	return v
}

// clientFor is the config of kubeconfig and an HTTP client for it.
func clientFor(kubeconfig string) (*rest.Config, *http.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, client, nil
}
