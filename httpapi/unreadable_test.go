package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// plant writes key=value pairs as a damaged store would hold them.
func (e *env) plant(kvs ...[]byte) {
	e.t.Helper()
	if err := e.db.Transact(context.Background(), func(tx kv.Tx) error {
		for i := 0; i+1 < len(kvs); i += 2 {
			tx.Set(kvs[i], kvs[i+1])
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

var root = tuple.FromBytes(fdbq.DefaultPrefix)

// A job whose record cannot be read is listed as unreadable beside the
// others, answers 500 corrupt saying what is wrong, and can be deleted.
func TestUnreadableJob(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	for _, id := range []string{"a", "bad", "c"} {
		if _, err := c.Enqueue(ctx, "email", httpapi.NewJob{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	badKey := root.MustPack(tuple.Tuple{2, "email", nil})
	e.plant(root.MustPack(tuple.Tuple{1, "email", "bad"}), []byte{0x7f, 1, 2}, badKey, nil)

	for _, limit := range []int{1, 2, 100} {
		var jobs []string
		var bad []httpapi.Unreadable
		o := httpapi.ListOptions{Limit: limit}
		for {
			p, err := c.List(ctx, "email", o)
			if err != nil {
				t.Fatalf("list, limit %d: %v", limit, err)
			}
			for _, j := range p.Jobs {
				jobs = append(jobs, j.ID)
			}
			bad = append(bad, p.Unreadable...)
			if o.Cursor = p.Next; o.Cursor == "" {
				break
			}
		}
		slices.Sort(jobs) // listed by zone, then order
		if strings.Join(jobs, ",") != "a,c" || len(bad) != 2 {
			t.Fatalf("limit %d: jobs %v, unreadable %+v", limit, jobs, bad)
		}
		for _, u := range bad {
			switch u.ID {
			case "bad":
				if !strings.Contains(u.Error, "email/bad: corrupt record: unknown format 0x7f") || !strings.Contains(u.Key, `\x02bad\x00`) {
					t.Fatalf("unreadable %+v", u)
				}
			case "":
				if !strings.Contains(u.Error, "malformed pending index entry") || !strings.HasSuffix(u.Key, `\x02email\x00\x00`) {
					t.Fatalf("unreadable %+v", u)
				}
			default:
				t.Fatalf("unreadable %+v", u)
			}
		}
	}
	a := e.do("GET", "/v1/types/email/jobs?limit=10", "", "")
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `"unreadable":[`) {
		t.Fatalf("list: %d %s", a.status, a.body)
	}

	wantError(t, e.do("GET", "/v1/types/email/jobs/bad", "", ""), http.StatusInternalServerError, httpapi.CodeCorrupt,
		"job email/bad: corrupt record")
	wantError(t, e.do("POST", "/v1/types/email/jobs/bad/cancel", "", ""), http.StatusInternalServerError, httpapi.CodeCorrupt,
		"email/bad", "cannot cancel")
	wantError(t, e.do("POST", "/v1/types/email/jobs/bad/requeue", "", ""), http.StatusInternalServerError, httpapi.CodeCorrupt,
		"email/bad", "cannot requeue")
	if err := c.Delete(ctx, "email", "bad"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	var ae *httpapi.APIError
	if _, err := c.Get(ctx, "email", "bad"); !errors.As(err, &ae) || ae.Code != httpapi.CodeNotFound {
		t.Fatalf("get after delete: %v", err)
	}
}

// A type whose settings cannot be read is listed with its error, its jobs
// can be listed, and PUT replaces its settings.
func TestUnreadableType(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	ctx := context.Background()
	c := e.client("")
	if _, err := c.SetType(ctx, "sms", httpapi.TypeSettings{}); err == nil {
		t.Fatal("zero settings were accepted")
	}
	if a := e.do("PUT", "/v1/types/sms", "", ""); a.status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	if _, err := c.Enqueue(ctx, "sms", httpapi.NewJob{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	e.plant(root.MustPack(tuple.Tuple{8, "sms"}), []byte("garbage"))

	types, err := c.Types(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 2 || types[0].Name != "email" || types[0].Error != "" ||
		types[1].Name != "sms" || types[1].Pending != 1 || !strings.Contains(types[1].Error, `type "sms": corrupt settings`) {
		t.Fatalf("types %+v", types)
	}
	if p, err := c.List(ctx, "sms", httpapi.ListOptions{}); err != nil || len(p.Jobs) != 1 {
		t.Fatalf("list of the type: %+v, %v", p, err)
	}
	wantError(t, e.do("POST", "/v1/types/sms/pause", "", ""), http.StatusInternalServerError, httpapi.CodeCorrupt, `type "sms": corrupt settings`)

	a := e.do("PUT", "/v1/types/sms", "", `{"retention": "1h"}`)
	if a.status != http.StatusOK {
		t.Fatalf("PUT over unreadable settings: %d %s", a.status, a.body)
	}
	want := fdbq.DefaultTypeSettings()
	want.Retention = 3600e9
	if info, err := e.q.GetType(ctx, e.db, "sms"); err != nil || !info.Settings.Equal(want) {
		t.Fatalf("after PUT: %+v, %v", info, err)
	}
}
