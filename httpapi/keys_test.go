package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"github.com/jobstage/jobstage/kv/tuple"
)

// keysEnv is a server with tokens whose type "tenants" has named key
// policies (idle ones among them), ready jobs of k00–k11, running jobs of
// k06–k11 and rated, and jobs without a key.
func keysEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, httpapi.Options{Tokens: testTokens})
	ctx := context.Background()
	s := fdbq.DefaultTypeSettings()
	s.Zones = 2
	s.KeyDefault = fdbq.KeyPolicy{MaxRunning: 10}
	s.Keys = map[string]fdbq.KeyPolicy{
		"idle":  {Weight: 4, Zones: 1},
		"rated": {MaxStarts: 10, Per: time.Hour},
		"k03":   {Weight: 2},
	}
	if err := e.q.SetType(ctx, e.db, "tenants", s); err != nil {
		t.Fatal(err)
	}
	var jobs []fdbq.NewJob
	for i := range 12 {
		for j := range 3 {
			jobs = append(jobs, fdbq.NewJob{Type: "tenants", ID: fmt.Sprintf("k%02d-%d", i, j), Key: fmt.Sprintf("k%02d", i)})
		}
	}
	jobs = append(jobs, fdbq.NewJob{Type: "tenants", ID: "r1", Key: "rated"}, fdbq.NewJob{Type: "tenants", ID: "none"})
	if _, err := e.q.AddBatch(ctx, e.db, jobs); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k06", "k07", "k08", "k09", "k10", "k11", "rated"} {
		if ls, err := e.q.Accept(ctx, "tenants", fdbq.AcceptOptions{Keys: []string{key}, Max: 2}); err != nil || len(ls) == 0 {
			t.Fatalf("accept %s: %v %v", key, ls, err)
		}
	}
	return e
}

// GET /v1/types/{type}/keys over a real listener: the pages, followed by
// next, list every key once, in order, with its policy, ready zones,
// running jobs and rate window; the jobs without a key come first,
// without a running count.
func TestKeysRoute(t *testing.T) {
	e := keysEnv(t)
	ctx := context.Background()
	c := e.client("producer-secret")
	for _, limit := range []int{0, 1, 4, 200} {
		var got []httpapi.KeyInfo
		o := httpapi.KeysOptions{Limit: limit}
		for {
			p, err := c.Keys(ctx, "tenants", o)
			if err != nil {
				t.Fatalf("keys, limit %d: %v", limit, err)
			}
			if len(p.Unreadable) != 0 {
				t.Fatalf("unreadable: %+v", p.Unreadable)
			}
			got = append(got, p.Keys...)
			if o.After = p.Next; o.After == "" {
				break
			}
		}
		var keys []string
		for _, k := range got {
			keys = append(keys, k.Key)
		}
		want := []string{"", "idle", "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "k10", "k11", "rated"}
		if !slices.Equal(keys, want) {
			t.Fatalf("limit %d: keys %q, want %q", limit, keys, want)
		}
		for _, k := range got {
			switch k.Key {
			case "":
				if k.Running != nil || k.ReadyZones != 1 || k.Named || k.Policy != (httpapi.KeyPolicy{Weight: 1, Zones: 2}) {
					t.Fatalf("the jobs without a key: %+v", k)
				}
			case "idle":
				if !k.Named || k.Running == nil || *k.Running != 0 || k.ReadyZones != 0 || k.Policy != (httpapi.KeyPolicy{Weight: 4, Zones: 1}) {
					t.Fatalf("idle: %+v", k)
				}
			case "k03":
				if !k.Named || *k.Running != 0 || k.ReadyZones == 0 || k.Policy != (httpapi.KeyPolicy{Weight: 2, Zones: 2}) {
					t.Fatalf("k03: %+v", k)
				}
			case "k07":
				if k.Named || *k.Running != 2 || k.ReadyZones < 1 || k.Policy != (httpapi.KeyPolicy{Weight: 1, MaxRunning: 10, Zones: 2}) || k.Window != nil {
					t.Fatalf("k07: %+v", k)
				}
			case "rated":
				if w := k.Window; *k.Running != 1 || w == nil || w.Started != 1 || !w.Current || w.End.Sub(w.Start) != time.Hour {
					t.Fatalf("rated: %+v %+v", k, k.Window)
				}
			}
		}
	}
	// The JSON: no running for the jobs without a key, 0 for a key.
	a := e.do("GET", "/v1/types/tenants/keys?limit=1", "producer-secret", "")
	var raw struct {
		Keys []map[string]any `json:"keys"`
		Next string           `json:"next"`
	}
	if err := json.Unmarshal(a.body, &raw); a.status != 200 || err != nil || len(raw.Keys) != 2 || raw.Next != "idle" {
		t.Fatalf("%d %s (%v)", a.status, a.body, err)
	}
	if _, ok := raw.Keys[0]["running"]; ok {
		t.Fatalf("the jobs without a key have a running count: %s", a.body)
	}
	if v, ok := raw.Keys[1]["running"]; !ok || v != float64(0) {
		t.Fatalf("idle's running count: %s", a.body)
	}
	if a := e.do("GET", "/v1/types/tenants/keys?after=k10", "admin-secret", ""); a.status != 200 ||
		!strings.Contains(string(a.body), `"key":"k11"`) || strings.Contains(string(a.body), `"key":"k10"`) {
		t.Fatalf("after k10: %d %s", a.status, a.body)
	}
}

// The keys route refuses bad parameters naming them, an unknown type, a
// worker's token; a value the store holds that cannot be read is
// reported, settings that cannot be read answer 500 corrupt.
func TestKeysRouteRefused(t *testing.T) {
	e := keysEnv(t)
	for _, c := range []struct {
		query, token string
		status       int
		code         string
		words        []string
	}{
		{"?limit=0", "producer-secret", 400, httpapi.CodeInvalid, []string{"limit", "1 to 200"}},
		{"?limit=201", "producer-secret", 400, httpapi.CodeInvalid, []string{"limit"}},
		{"?limit=x", "producer-secret", 400, httpapi.CodeInvalid, []string{"limit"}},
		{"?after=a%01", "producer-secret", 400, httpapi.CodeInvalid, []string{"after", "control character"}},
		{"?after=%ff", "producer-secret", 400, httpapi.CodeInvalid, []string{"after", "not valid UTF-8"}},
		{"?after=" + strings.Repeat("k", 129), "producer-secret", 400, httpapi.CodeInvalid, []string{"after", "longer than 128"}},
		{"?cursor=x", "producer-secret", 400, httpapi.CodeInvalid, []string{"cursor"}},
		{"", "worker-secret", 403, httpapi.CodeForbidden, []string{"worker"}},
		{"", "", 401, httpapi.CodeUnauthorized, nil},
	} {
		wantError(t, e.do("GET", "/v1/types/tenants/keys"+c.query, c.token, ""), c.status, c.code, c.words...)
	}
	wantError(t, e.do("GET", "/v1/types/nope/keys", "producer-secret", ""), 404, httpapi.CodeUnknownType, "nope")
	wantError(t, e.do("GET", "/v1/types/"+url.PathEscape("a b")+"/keys", "producer-secret", ""), 400, httpapi.CodeInvalid, "type name")
	if a := e.do("GET", "/v1/types/tenants/keys?after=", "producer-secret", ""); a.status != 200 {
		t.Fatalf("an empty after: %d %s", a.status, a.body)
	}

	running := root.MustPack(tuple.Tuple{16, "tenants", "k07", int64(9)})
	e.plant(running, []byte{1})
	p, err := e.client("admin-secret").Keys(context.Background(), "tenants", httpapi.KeysOptions{})
	if err != nil || len(p.Unreadable) != 1 || !strings.Contains(p.Unreadable[0].Error, `running count of fairness key "k07": a value of 1 bytes, not 8`) ||
		p.Unreadable[0].Key != `\x02jobstage\x00\x15\x10\x02tenants\x00\x02k07\x00\x15\x09` {
		t.Fatalf("a running count that cannot be read: %+v %v", p, err)
	}
	e.plant(root.MustPack(tuple.Tuple{8, "tenants"}), []byte("{"))
	wantError(t, e.do("GET", "/v1/types/tenants/keys", "producer-secret", ""), http.StatusInternalServerError, httpapi.CodeCorrupt, "tenants")
}
