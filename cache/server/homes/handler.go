package homes

import (
	"encoding/json"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	kcpcache "github.com/kcp-cache/kcp-cache/cache"
)

// Handler serves kcpcache.HomesPath.
func (t *Table) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if req.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeJSONStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "homes"}, req.Method))
			return
		}
		shard := req.URL.Query().Get("shard")
		if shard != "" {
			if err := kcpcache.ValidateShardName(shard); err != nil {
				writeJSONStatus(w, apierrors.NewBadRequest(err.Error()))
				return
			}
		}
		asker := ""
		if u, ok := request.UserFrom(req.Context()); ok {
			asker, _ = kcpcache.PeerFromUser(u.GetName())
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(t.AnswerFor(shard, asker))
	})
}

func writeJSONStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
