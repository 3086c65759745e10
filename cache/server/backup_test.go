package server

import (
	"net/http"
	"testing"

	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// A backup is long-running, as watches are; other paths keep what
// upstream's check says of them.
func TestBackupIsLongRunning(t *testing.T) {
	check := withLongRunningBackup(newGenericConfig().LongRunningFunc)
	req, _ := http.NewRequest(http.MethodGet, "https://cache"+kcpcache.BackupPath, nil)
	for _, tt := range []struct {
		name string
		info apirequest.RequestInfo
		want bool
	}{
		{"the backup", apirequest.RequestInfo{Path: kcpcache.BackupPath, Verb: "get"}, true},
		{"home claims", apirequest.RequestInfo{Path: kcpcache.HomesPath, Verb: "get"}, false},
		{"a path below the backup's", apirequest.RequestInfo{Path: kcpcache.BackupPath + "/x", Verb: "get"}, false},
		{"a watch", apirequest.RequestInfo{IsResourceRequest: true, Verb: "watch", Resource: "apiexports"}, true},
		{"a list", apirequest.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "apiexports"}, false},
	} {
		if got := check(req, &tt.info); got != tt.want {
			t.Errorf("%s: long-running %v, want %v", tt.name, got, tt.want)
		}
	}
}
