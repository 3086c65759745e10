package partition

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// quotaStorage stands in for etcd at its quota, as etcd's apply answers:
// a write it applies may still be answered ErrNoSpace (the one that
// crosses the quota); one it refuses is not applied.
type quotaStorage struct {
	storage.Interface
	objects map[string]*metav1.PartialObjectMetadata
	rev     int
	// apply: the write is applied before ErrNoSpace is answered.
	apply bool
	// other: another write lands on the key instead of the refused one.
	other bool
}

func (q *quotaStorage) put(key string, o *metav1.PartialObjectMetadata) {
	q.rev++
	o = o.DeepCopy()
	o.ResourceVersion = strconv.Itoa(q.rev)
	q.objects[key] = o
}

func (q *quotaStorage) Create(_ context.Context, key string, obj, _ runtime.Object, _ uint64) error {
	if q.apply {
		q.put(key, obj.(*metav1.PartialObjectMetadata))
	}
	if q.other {
		q.put(key, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "someone-else"}})
	}
	return rpctypes.ErrNoSpace
}

func (q *quotaStorage) GuaranteedUpdate(_ context.Context, key string, _ runtime.Object, _ bool, _ *storage.Preconditions, tryUpdate storage.UpdateFunc, _ runtime.Object) error {
	cur := q.objects[key]
	out, _, err := tryUpdate(cur.DeepCopy(), storage.ResponseMeta{})
	if err != nil {
		return err
	}
	if q.apply {
		q.put(key, out.(*metav1.PartialObjectMetadata))
	}
	if q.other {
		changed := cur.DeepCopy()
		changed.Labels = map[string]string{"by": "someone-else"}
		q.put(key, changed)
	}
	return rpctypes.ErrNoSpace
}

func (q *quotaStorage) Get(_ context.Context, key string, _ storage.GetOptions, out runtime.Object) error {
	o, ok := q.objects[key]
	if !ok {
		return storage.NewKeyNotFoundError(key, 0)
	}
	o.DeepCopyInto(out.(*metav1.PartialObjectMetadata))
	return nil
}

// A write etcd answered with its quota error is done when etcd applied it,
// and refused (507, nothing written) only when it did not: etcd applies
// the write that crosses its quota and reports the quota with it.
func TestAWriteEtcdAppliedAtItsQuotaIsDone(t *testing.T) {
	const key = "/apis.kcp.io/apiexports/amber/root/x"
	newObject := func() *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "mine", Labels: map[string]string{"v": "1"}}}
	}
	relabel := func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		o := input.(*metav1.PartialObjectMetadata).DeepCopy()
		o.Labels = map[string]string{"v": "2"}
		return o, nil, nil
	}
	for _, tc := range []struct {
		name         string
		apply, other bool
		wantDone     bool
	}{
		{"applied", true, false, true},
		{"refused", false, false, false},
		{"refused, another write landed", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(verb string, err error, out *metav1.PartialObjectMetadata, want string) {
				t.Helper()
				if tc.wantDone {
					if err != nil || out.Labels["v"] != want || out.ResourceVersion == "" {
						t.Errorf("%s etcd applied: %v, object %+v; want it done, with the stored object", verb, err, out.ObjectMeta)
					}
					return
				}
				var st *apierrors.StatusError
				if !errors.As(err, &st) || st.ErrStatus.Code != http.StatusInsufficientStorage || !strings.Contains(st.ErrStatus.Message, "nothing was written") {
					t.Errorf("%s etcd refused: %v, want 507 saying nothing was written", verb, err)
				}
			}
			q := &quotaStorage{objects: map[string]*metav1.PartialObjectMetadata{}, apply: tc.apply, other: tc.other}
			s := withEtcdAnswers(q, testResource)
			out := &metav1.PartialObjectMetadata{}
			check("a create", s.Create(context.Background(), key, newObject(), out, 0), out, "1")

			q.apply, q.other = false, false
			q.objects = map[string]*metav1.PartialObjectMetadata{}
			q.put(key, newObject())
			q.apply, q.other = tc.apply, tc.other
			out = &metav1.PartialObjectMetadata{}
			check("an update", s.GuaranteedUpdate(context.Background(), key, out, false, nil, relabel, nil), out, "2")
		})
	}
}
