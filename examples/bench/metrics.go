package main

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// metricSample is one line of the Prometheus text format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text exposition format, skipping
// comments and anything it cannot parse (it is a diagnostic aid).
func parseMetrics(b []byte) []metricSample {
	var out []metricSample
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := metricSample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.name = line[:i]
			for _, kv := range splitLabels(line[i+1 : j]) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					continue
				}
				if uq, err := strconv.Unquote(v); err == nil {
					v = uq
				}
				s.labels[k] = v
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			s.name, rest = f[0], f[1]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// splitLabels splits `a="x",b="y,z"` at commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQuote, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// sumMetric adds up the samples named name whose labels include match.
func sumMetric(samples []metricSample, name string, match map[string]string) float64 {
	total := 0.0
outer:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range match {
			if s.labels[k] != v {
				continue outer
			}
		}
		total += s.value
	}
	return total
}

// scrapeMetrics reads the server's /metrics as the admin.
func (b *bench) scrapeMetrics(ctx context.Context) ([]metricSample, error) {
	req, err := newGet(ctx, kcpcache.JoinHostPath(b.srv.admin.Host, "/metrics"))
	if err != nil {
		return nil, err
	}
	resp, err := b.httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	return parseMetrics(buf.Bytes()), nil
}

// histDelta accumulates the observations of a histogram (in seconds)
// between scrapes.
type histDelta struct{ sum, count float64 }

// add records what happened to the histogram name between before and after.
func (h *histDelta) add(before, after []metricSample, name string, match map[string]string) {
	h.count += sumMetric(after, name+"_count", match) - sumMetric(before, name+"_count", match)
	h.sum += sumMetric(after, name+"_sum", match) - sumMetric(before, name+"_sum", match)
}

// mean is the mean observation, zero without observations.
func (h histDelta) mean() time.Duration {
	if h.count <= 0 {
		return 0
	}
	return time.Duration(h.sum / h.count * float64(time.Second))
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}
