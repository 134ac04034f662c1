package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// TestStoredDefinitionRefused: a record that decodes as JSON but
// whose stored definition this version refuses (a zone the machine's
// tzdata does not know, an interval out of range) is unreadable data in
// the store: 500 corrupt, as for a record that is not JSON. It must not
// be answered 400 invalid, which tells the client its request was wrong.
func TestStoredDefinitionRefused(t *testing.T) {
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	if err := e.q.DeclareSchedule(ctx, e.db, fdbq.Schedule{Name: "nightly", Every: time.Minute, Job: fdbq.NewJob{Type: "email"}}); err != nil {
		t.Fatal(err)
	}
	key := append(append([]byte{}, fdbq.DefaultPrefix...), tuple.Tuple{21, "nightly"}.MustPack()...)
	rec := `{"def":{"type":"email","cron":"0 2 * * *","timezone":"Mars/Olympus","missed":0,"missed_limit":100,"grace":60000000000},"timing":"0 2 * * * in Mars/Olympus","last":1700000000000}`
	if err := e.db.Transact(ctx, func(tx kv.Tx) error { tx.Set(key, []byte(rec)); return nil }); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.do("GET", "/v1/schedules/nightly", "admin-secret", ""), http.StatusInternalServerError, httpapi.CodeCorrupt, "nightly")
	wantError(t, e.do("POST", "/v1/schedules/nightly/pause", "admin-secret", ""), http.StatusInternalServerError, httpapi.CodeCorrupt, "nightly")
}
