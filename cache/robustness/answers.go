package robustness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerError is one 5xx answer a client of the run received.
type ServerError struct {
	// Request is the request's method and path.
	Request string `json:"request"`
	Code    int    `json:"code"`
	// Reason is the answer's Status reason; empty when its body was no
	// Status (a proxy's 502 while the cache restarts).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// key names the answer's kind in a report: its code and reason.
func (e ServerError) key() string {
	if e.Reason == "" {
		return fmt.Sprintf("%d (no Status)", e.Code)
	}
	return fmt.Sprintf("%d %s", e.Code, e.Reason)
}

// Answers watches the HTTP answers of a partition's clients and keeps
// every 5xx, which the history then holds: a 500 is a violation (a fault
// of the cache, or of a dependency it did not answer for: an etcd that
// cannot serve must be a 503), every other 5xx is counted by status and
// reason.
//
// It also removes Retry-After from a 5xx answer to a write: client-go
// retries such an answer by itself, and a write retried after its first
// attempt was stored (a 503 says the write may or may not have been)
// answers 409 AlreadyExists or Conflict, which the history would take for
// a definite outcome. Without the header client-go hands the first answer
// over, which the history records as a write of unknown outcome. Reads are
// retried as client-go does: a read answered later is still a read
// between its call and its return.
type Answers struct {
	mu     sync.Mutex
	errors []ServerError
}

// Wrap is a rest.Config's WrapTransport: the answers through rt are
// watched.
func (a *Answers) Wrap(rt http.RoundTripper) http.RoundTripper {
	return answersTransport{next: rt, answers: a}
}

// take returns the 5xx answers kept so far and forgets them.
func (a *Answers) take() []ServerError {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.errors
	a.errors = nil
	return out
}

type answersTransport struct {
	next    http.RoundTripper
	answers *Answers
}

// maxStatusBytes bounds how much of a 5xx answer's body is read.
const maxStatusBytes = 1 << 16

func (t answersTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 500 {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	e := ServerError{Request: req.Method + " " + req.URL.Path, Code: resp.StatusCode}
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" {
		e.Reason, e.Message = string(status.Reason), status.Message
	} else {
		e.Message = string(body)
	}
	t.answers.mu.Lock()
	t.answers.errors = append(t.answers.errors, e)
	t.answers.mu.Unlock()
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		resp.Header.Del("Retry-After")
	}
	return resp, nil
}

// checkServerErrors counts the 5xx answers by kind and names each 500 as
// a violation.
func checkServerErrors(errs []ServerError) (map[string]int, []Violation) {
	var counts map[string]int
	var violations []Violation
	for _, e := range errs {
		if counts == nil {
			counts = map[string]int{}
		}
		counts[e.key()]++
		if e.Code == http.StatusInternalServerError {
			violations = append(violations, Violation{Check: "internal-error", Details: fmt.Sprintf("%s answered %s: %s", e.Request, e.key(), e.Message)})
		}
	}
	return counts, violations
}

// formatCounts renders counts in a stable order.
func formatCounts(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s: %d", k, counts[k])
	}
	if out == "" {
		return "none"
	}
	return out
}
