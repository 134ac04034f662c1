package httpapi

import (
	"net/http"
	"time"

	"github.com/jobstage/jobstage/fdbq"
)

// keys: GET /v1/types/{type}/keys?limit=&after=. A page of the type's
// fairness keys (fdbq.Queue.Keys); an unregistered type is a 404, a type
// whose settings cannot be read a 500 corrupt (the keys' policies come
// from them).
func (s *Server) keys(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	if err := onlyParams(q, "limit", "after"); err != nil {
		return err
	}
	o := fdbq.KeysOptions{After: q.Get("after")}
	n, err := parseLimit(q, fdbq.MaxKeysLimit)
	if err != nil {
		return err
	}
	o.Limit = n
	if o.After != "" {
		if err := fdbq.ValidateKey(o.After); err != nil {
			return nameInvalid("after", err)
		}
	}
	page, err := s.q.Keys(r.Context(), s.db, typ, o)
	if err != nil {
		return err
	}
	out := &KeyPage{Keys: make([]KeyInfo, len(page.Keys)), Next: page.Next}
	for i, k := range page.Keys {
		out.Keys[i] = toKeyInfo(k)
	}
	for _, u := range page.Unreadable {
		out.Unreadable = append(out.Unreadable, toUnreadable(u))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// KeyPage is the answer of GET /v1/types/{type}/keys: a page of the
// type's fairness keys in key order.
type KeyPage struct {
	// Keys; on the first page, the jobs without a key (key "") first
	// when they have ready jobs, beyond the limit.
	Keys []KeyInfo `json:"keys"`
	// Unreadable are the entries the page met that cannot be read (a
	// value that does not decode, a key that names no valid fairness
	// key); the keys are listed with what could be read.
	Unreadable []Unreadable `json:"unreadable,omitempty"`
	// Next is the after of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

// KeyInfo is one fairness key of a type (fdbq.KeyInfo).
type KeyInfo struct {
	// Key is the fairness key; "" the jobs without a key.
	Key string `json:"key"`
	// Named: the type's settings name the key's policy; else key_default
	// applies.
	Named bool `json:"named"`
	// Policy is the policy that applies, made explicit: weight at least
	// 1, zones the zones its new jobs are spread over. The jobs without
	// a key have no per-key bounds: weight and zones alone.
	Policy KeyPolicy `json:"policy"`
	// ReadyZones is how many of the key's zones are marked as holding
	// ready jobs.
	ReadyZones int `json:"ready_zones"`
	// Running is how many of the key's jobs run; absent for the jobs
	// without a key, which are not counted per key (the type's running
	// count has them).
	Running *int64 `json:"running,omitempty"`
	// Window is the key's rate window, when its policy has max_starts
	// and one of its jobs has started.
	Window *RateWindow `json:"window,omitempty"`
}

// RateWindow is a fairness key's rate window: started jobs started from
// start; max_starts bounds them until end, after which the next start
// opens a new window. Current is false once the window has ended.
type RateWindow struct {
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Started int64     `json:"started"`
	Current bool      `json:"current"`
}

// KeysOptions select a page of keys: Limit (default 50, at most 200) and
// After, the Next of the previous KeyPage.
type KeysOptions struct {
	Limit int
	After string
}

func toKeyInfo(k fdbq.KeyInfo) KeyInfo {
	out := KeyInfo{Key: k.Key, Named: k.Named, Policy: toKeyPolicy(k.Policy), ReadyZones: k.ReadyZones}
	if k.Key != "" {
		n := k.Running
		out.Running = &n
	}
	if w := k.Window; w != nil {
		out.Window = &RateWindow{Start: w.Start, End: w.End, Started: w.Started, Current: w.Current}
	}
	return out
}
