package homes

import (
	"encoding/json"
	"fmt"
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
		ans := t.AnswerFor(shard, asker)
		if id := req.URL.Query().Get(kcpcache.SearchParameter); id != "" {
			budget, err := t.searchBudget(req.URL.Query().Get(kcpcache.SearchBudgetParameter))
			claimant := req.URL.Query().Get(kcpcache.SearchClaimantParameter)
			switch {
			case err != nil:
			case shard == "":
				err = fmt.Errorf("a search is about one shard: shard is required")
			case len(id) > 64:
				err = fmt.Errorf("%s is at most 64 characters", kcpcache.SearchParameter)
			case claimant != "":
				err = kcpcache.ValidateCacheName(claimant)
			}
			if err != nil {
				writeJSONStatus(w, apierrors.NewBadRequest(err.Error()))
				return
			}
			ans = t.answerSearch(req.Context(), shard, id, claimant, asker, budget)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	})
}

func writeJSONStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
