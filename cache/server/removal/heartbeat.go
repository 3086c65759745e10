package removal

import (
	"encoding/json"
	"fmt"
	"time"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// heartbeat is what the purger reads of a stored heartbeat object.
type heartbeat struct {
	// modRevision is the etcd revision of its last renewal; 0 when absent.
	modRevision int64
	// expiry is when it stops being current (renewTime + leaseDuration).
	expiry time.Time
	// readable is false when the stored value could not be decoded: its
	// freshness is unknown.
	readable bool
}

func decodeHeartbeat(value []byte, modRevision int64) heartbeat {
	var obj struct {
		Spec kcpcache.HeartbeatSpec `json:"spec"`
	}
	hb := heartbeat{modRevision: modRevision}
	if err := json.Unmarshal(value, &obj); err != nil || obj.Spec.RenewTime.IsZero() {
		return hb
	}
	hb.readable = true
	hb.expiry = obj.Spec.RenewTime.Add(time.Duration(obj.Spec.LeaseDurationSeconds) * time.Second)
	return hb
}

// exists reports whether a heartbeat was stored.
func (h heartbeat) exists() bool { return h.modRevision != 0 }

// fresh reports whether the heartbeat is current at now; a heartbeat that
// cannot be read counts as fresh, so that nothing is purged on a guess.
func (h heartbeat) fresh(now time.Time) bool {
	return h.exists() && (!h.readable || !now.After(h.expiry))
}

// expiredLongerThan reports whether the heartbeat has been expired for more
// than retention at now. The renew time is the shard's clock; against a
// retention of hours, clock skew does not matter.
func (h heartbeat) expiredLongerThan(now time.Time, retention time.Duration) bool {
	return h.exists() && h.readable && now.Sub(h.expiry) > retention
}

func (h heartbeat) String() string {
	switch {
	case !h.exists():
		return "none"
	case !h.readable:
		return "unreadable"
	default:
		return fmt.Sprintf("expires %s", h.expiry.UTC().Format(time.RFC3339))
	}
}
