package reload

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Interval is how often a Watcher reads its files again: a rotated token
// file or peer kubeconfig is in force at most this long after it was
// written.
const Interval = 2 * time.Second

// Digest identifies the content of a set of files: Digest of the same
// files with the same content is the same.
type Digest [sha256.Size]byte

// Digester computes a Digest from files as a source reads them.
type Digester struct{ sum []byte }

// Add adds one file's name and content.
func (d *Digester) Add(path string, content []byte) {
	h := sha256.New()
	h.Write(d.sum)
	fmt.Fprintf(h, "%d:%s\x00", len(path), path)
	h.Write(content)
	d.sum = h.Sum(nil)
}

// Sum is the digest of the files added so far.
func (d *Digester) Sum() Digest {
	var out Digest
	copy(out[:], d.sum)
	return out
}

// ReadFile reads path and adds it to d.
func (d *Digester) ReadFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d.Add(path, b)
	return b, nil
}

// Source is what a Watcher keeps in force.
type Source interface {
	// Files are the files the last Load read, in the order it read them.
	Files() []string
	// Load reads the files and puts what they hold in force, or keeps what
	// is in force and says why not. It returns the Digest of the content it
	// read (the zero Digest when it could not read it all), so that the
	// same content is not loaded again.
	Load() (Digest, error)
}

// Watcher reloads a Source whenever the content of its files changes.
// Only Run (or Check) uses it; the Source serves its users meanwhile.
type Watcher struct {
	// name is the source in logs and in the metrics' source label.
	name string
	src  Source

	mu sync.Mutex
	// loaded is the digest of the content Load last read.
	loaded Digest
	// lastErr is the error Load last reported, so that a file that stays
	// broken is logged and counted once, not at every poll.
	lastErr string
}

// NewWatcher loads src once and returns a Watcher that keeps it current;
// an error means src could not be loaded at all. name identifies the
// source in logs and metrics (its label values must stay few: one per
// flag or peer).
func NewWatcher(name string, src Source) (*Watcher, error) {
	registerMetrics()
	d, err := src.Load()
	if err != nil {
		return nil, err
	}
	reloadFailing.WithLabelValues(name).Set(0)
	return &Watcher{name: name, src: src, loaded: d}, nil
}

// Run checks the source every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check(ctx)
		}
	}
}

// Check reads the source's files once and loads them again when their
// content differs from what was last loaded; it reports whether the
// content now in force changed.
func (w *Watcher) Check(ctx context.Context) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("source", w.name)
	var current Digester
	unchanged := true
	for _, f := range w.src.Files() {
		if _, err := current.ReadFile(f); err != nil {
			// Load reads the files again and says what is wrong: a file
			// the new content no longer names may be gone.
			unchanged = false
			break
		}
	}
	if unchanged && current.Sum() == w.loaded {
		return false
	}
	d, err := w.src.Load()
	w.loaded = d
	if err != nil {
		reloadFailing.WithLabelValues(w.name).Set(1)
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			reloads.WithLabelValues(w.name, "error").Inc()
			logger.Error(err, "Could not reload a changed file; what was in force stays in force")
		}
		return false
	}
	w.lastErr = ""
	reloadFailing.WithLabelValues(w.name).Set(0)
	reloads.WithLabelValues(w.name, "success").Inc()
	logger.Info("Reloaded a changed file", "files", w.src.Files())
	return true
}
