package fdbq

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Bounds of a page of Keys.
const (
	DefaultKeysLimit = 50
	MaxKeysLimit     = 200
)

// KeysOptions select a page of a type's fairness keys (Queue.Keys).
type KeysOptions struct {
	// Limit is how many keys a page holds at most (0: DefaultKeysLimit;
	// 1 to MaxKeysLimit). The jobs without a key, listed first on the
	// first page, are beyond it.
	Limit int
	// After is the last key of the previous page (KeyPage.Next); empty:
	// the first page. It is a key: ValidateKey's rules.
	After string
}

// KeyPage is one page of a type's fairness keys.
type KeyPage struct {
	// Keys in key order; on the first page, the jobs without a key (Key
	// "") first when they have ready jobs.
	Keys []KeyInfo
	// Unreadable are the entries of the zone marks, running counts and
	// rate windows the page met that cannot be read: a key that is not
	// one fdbq writes (it names no valid fairness key: reported once, its
	// entries passed over), or a value that does not decode. The keys
	// they belong to are listed with what could be read.
	Unreadable []Unreadable
	// Next is the After of the next page; empty when this is the last.
	Next string
}

// KeyInfo is what the store holds about one fairness key of a type.
type KeyInfo struct {
	// Key is the fairness key; "" is the jobs without a key.
	Key string
	// Named: the type's settings name a policy for the key
	// (TypeSettings.Keys); else KeyDefault applies.
	Named bool
	// Policy is the policy that applies to the key, made explicit: Weight
	// at least 1, and Zones the zones its new jobs are spread over (the
	// key's, else the type's, else DefaultZones). The jobs without a key
	// have no per-key bounds: their Policy has KeyDefault's weight and
	// the type's zones alone.
	Policy KeyPolicy
	// ReadyZones is how many of the key's zones are marked as holding
	// ready jobs (see Fairness in the package doc): 0 when it has none.
	ReadyZones int
	// Running is the sum of the key's running counts: its jobs that run
	// now. The jobs without a key are not counted per key (they have no
	// per-key bound), so the "" key's Running is 0; the type's count
	// (TypeInfo.Running) includes them. A key keeps its count entries,
	// at 0, after its last job ends, so every key that ever ran a job is
	// listed.
	Running int64
	// Window is the key's rate window when its policy has MaxStarts and
	// one of its jobs has started; nil otherwise.
	Window *RateWindow
}

// RateWindow is a key's rate window as the store holds it: Started jobs
// started from Start; MaxStarts bounds them until End (Start plus Per),
// after which the next start opens a new window.
type RateWindow struct {
	Start   time.Time
	End     time.Time
	Started int64
	// Current: the window holds at the read by the Queue's clock, as an
	// accept would judge it; false once it ended (the next start opens a
	// new one, and Started no longer counts).
	Current bool
}

// keyScanBatch is how many entries one read of a subspace of Keys takes:
// every zone of a key and the first entry after them.
const keyScanBatch = MaxZones + 1

// Keys returns the fairness keys of a type, a page at a time, in key
// order: the keys with a zone marked as holding ready jobs (P, 15), the
// keys with a running count (P, 16), and the keys the type's settings
// name (TypeSettings.Keys), each with its policy, its marked zones, its
// running jobs and its rate window (P, 17). Reads are snapshot reads: a
// caller's transaction gets no conflicts from them.
//
// A page never reads the whole of a type's zones: it reads the marks and
// the running counts from just after After, in reads of keyScanBatch
// entries, and takes the smallest next key of the two and of the named
// ones, key after key, so its reads are bounded by Limit, whatever the
// number of keys, zones and jobs after the page: the type's settings,
// at most 2·(1+Limit) range reads (a key has at most MaxZones entries in
// each), and one read of each listed key's rate window when its policy
// has MaxStarts; entries that cannot be read may add a range read for
// each keyScanBatch of them, and one for each key with more than
// MaxZones. Such an entry is reported in KeyPage.Unreadable (see there)
// and the page goes on.
func (q *Queue) Keys(ctx context.Context, tr kv.ReadTransactor, typ string, o KeysOptions) (*KeyPage, error) {
	if err := checkName("type name", typ); err != nil {
		return nil, err
	}
	limit := o.Limit
	switch {
	case limit == 0:
		limit = DefaultKeysLimit
	case limit < 0 || limit > MaxKeysLimit:
		return nil, errorf(ErrInvalidJob, "keys: limit %d is out of range (1 to %d; 0 for %d)", o.Limit, MaxKeysLimit, DefaultKeysLimit)
	}
	if o.After != "" {
		if err := ValidateKey(o.After); err != nil {
			return nil, errorf(ErrInvalidJob, "keys: after: %s", detailOf(err))
		}
	}
	return kv.ReadTransact(ctx, tr, func(tx kv.ReadTx) (*KeyPage, error) {
		snap := snapshotOf(tx)
		s, err := q.settings(snap, typ)
		if err != nil {
			return nil, err
		}
		var named []string
		for k := range s.Keys {
			if k > o.After {
				named = append(named, k)
			}
		}
		slices.Sort(named)
		page := &KeyPage{}
		marks := newKeyScan(q.k.zonesType(typ), o.After, "zone mark")
		counts := newKeyScan(q.k.root.Sub(tagKeyRunning, typ), o.After, "running count")
		now := q.nowMs()
		listed := 0
		for {
			mk, mok, err := marks.head(snap, page)
			if err != nil {
				return nil, err
			}
			rk, rok, err := counts.head(snap, page)
			if err != nil {
				return nil, err
			}
			key, ok := "", false
			for _, c := range []struct {
				k  string
				ok bool
			}{{mk, mok}, {rk, rok}, {firstOf(named), len(named) > 0}} {
				if c.ok && (!ok || c.k < key) {
					key, ok = c.k, true
				}
			}
			if !ok {
				return page, nil
			}
			if key != "" && listed == limit {
				page.Next = page.Keys[len(page.Keys)-1].Key
				// What the look for a next key met past the page, the
				// next page meets again.
				page.Unreadable = slices.DeleteFunc(page.Unreadable, func(u Unreadable) bool {
					return marks.isPast(u.Key, page.Next) || counts.isPast(u.Key, page.Next)
				})
				return page, nil
			}
			_, isNamed := s.Keys[key]
			info := KeyInfo{Key: key, Named: isNamed && key != "", Policy: effectivePolicy(s, key)}
			if mok && mk == key {
				es, err := marks.group(snap, key, page)
				if err != nil {
					return nil, err
				}
				for _, e := range es {
					if _, ok := q.k.parseZoneMark(typ, e.Key); ok {
						info.ReadyZones++
					} else {
						page.Unreadable = append(page.Unreadable, Unreadable{Key: e.Key,
							Err: corruptf("malformed zone mark %q of fairness key %q", e.Key, key)})
					}
				}
			}
			if rok && rk == key {
				es, err := counts.group(snap, key, page)
				if err != nil {
					return nil, err
				}
				for _, e := range es {
					if len(e.Value) != 8 {
						page.Unreadable = append(page.Unreadable, Unreadable{Key: e.Key,
							Err: corruptf("running count of fairness key %q: a value of %d bytes, not 8", key, len(e.Value))})
						continue
					}
					info.Running += kv.DecodeInt64(e.Value)
				}
			}
			if len(named) > 0 && named[0] == key {
				named = named[1:]
			}
			if key != "" && info.Policy.MaxStarts > 0 {
				w, err := q.rateWindow(snap, typ, key, info.Policy, now, page)
				if err != nil {
					return nil, err
				}
				info.Window = w
			}
			page.Keys = append(page.Keys, info)
			if key != "" {
				listed++
			}
		}
	})
}

// effectivePolicy is the policy of key in s with its defaults made
// explicit (see KeyInfo.Policy).
func effectivePolicy(s TypeSettings, key string) KeyPolicy {
	p := s.policy(key)
	if key == "" {
		p = KeyPolicy{Weight: p.Weight}
	}
	p.Weight = p.weight()
	p.Zones = s.zonesOf(key)
	return p
}

// rateWindow reads key's rate window (P, 17, type, key), judged at now
// as allowance judges it; nil when the key has started no job.
func (q *Queue) rateWindow(snap kv.ReadTx, typ, key string, p KeyPolicy, now int64, page *KeyPage) (*RateWindow, error) {
	k := q.k.keyStarts(typ, key)
	b, err := snap.Get(k)
	if err != nil || b == nil {
		return nil, err
	}
	start, started, ok := decodeStarts(b)
	if !ok {
		page.Unreadable = append(page.Unreadable, Unreadable{Key: k,
			Err: corruptf("rate window of fairness key %q: a value of %d bytes, not 16", key, len(b))})
		return nil, nil
	}
	per := p.Per.Milliseconds()
	return &RateWindow{
		Start:   time.UnixMilli(start),
		End:     time.UnixMilli(start + per),
		Started: started,
		Current: !windowEnded(start, per, now),
	}, nil
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// detailOf is what err says without its sentinel's text, for an error
// that wraps it in another's words.
func detailOf(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Detail != "" {
		return e.Detail
	}
	return err.Error()
}

// keyScan reads one subspace of a type whose keys begin with a fairness
// key, (P, tag, type, key, …), a key's entries at a time in key order,
// in reads of keyScanBatch entries from where the last one ended. Only
// the keys whose next element is a string are read: nothing else names
// a fairness key.
type keyScan struct {
	prefix []byte // (P, tag, type)
	from   []byte // where the next read begins
	end    []byte // the end of the keys whose next element is a string
	buf    []kv.KeyValue
	done   bool // nothing is left after buf
	what   string
}

// newKeyScan scans sub from after the entries of key after ("": from the
// beginning).
func newKeyScan(sub tuple.Subspace, after, what string) *keyScan {
	prefix := sub.Bytes()
	ks := &keyScan{prefix: prefix, what: what,
		from: append(slices.Clip(prefix), 0x02),
		end:  append(slices.Clip(prefix), 0x03)}
	if after != "" {
		ks.from = ks.past(after)
	}
	return ks
}

// past is the first key after the entries of key: the packed key
// followed by 0xff, before which come exactly the keys whose next
// element reads as key.
func (ks *keyScan) past(key string) []byte {
	return append(appendString(slices.Clip(ks.prefix), key), 0xff)
}

// isPast reports whether k is an entry of the subspace after the
// entries of key.
func (ks *keyScan) isPast(k []byte, key string) bool {
	return bytes.HasPrefix(k, ks.prefix) && bytes.Compare(k, ks.past(key)) >= 0
}

// fill reads the next entries when none is left in buf.
func (ks *keyScan) fill(snap kv.ReadTx) error {
	if len(ks.buf) > 0 || ks.done {
		return nil
	}
	kvs, err := snap.GetRange(kv.Range{Begin: ks.from, End: ks.end}, kv.RangeOptions{Limit: keyScanBatch})
	if err != nil {
		return err
	}
	ks.buf = kvs
	if len(kvs) < keyScanBatch {
		ks.done = true
	} else {
		ks.from = kv.KeyAfter(kvs[len(kvs)-1].Key)
	}
	return nil
}

// keyOf reads the fairness key an entry of the subspace belongs to.
func (ks *keyScan) keyOf(e kv.KeyValue) (string, bool) {
	name, _, ok := readString(e.Key[len(ks.prefix):])
	return name, ok
}

// head returns the key of the next entry, passing over (and reporting in
// page) the entries that name no valid fairness key; false at the end.
func (ks *keyScan) head(snap kv.ReadTx, page *KeyPage) (string, bool, error) {
	for {
		if err := ks.fill(snap); err != nil {
			return "", false, err
		}
		if len(ks.buf) == 0 {
			return "", false, nil
		}
		e := ks.buf[0]
		name, ok := ks.keyOf(e)
		if !ok {
			page.Unreadable = append(page.Unreadable, Unreadable{Key: e.Key, Err: corruptf("malformed %s key %q", ks.what, e.Key)})
			ks.buf = ks.buf[1:]
			continue
		}
		if name == "" {
			return name, true, nil
		}
		verr := ValidateKey(name)
		if verr == nil {
			return name, true, nil
		}
		page.Unreadable = append(page.Unreadable, Unreadable{Key: e.Key,
			Err: corruptf("%s of a fairness key that is not valid: %s", ks.what, detailOf(verr))})
		if _, err := ks.group(snap, name, nil); err != nil {
			return "", false, err
		}
	}
}

// group takes the entries of key, which head returned: at most MaxZones
// (a key's shards are below it), the rest of them passed over and
// reported in page (nil: passed over silently).
func (ks *keyScan) group(snap kv.ReadTx, key string, page *KeyPage) ([]kv.KeyValue, error) {
	var out []kv.KeyValue
	for {
		if err := ks.fill(snap); err != nil {
			return nil, err
		}
		if len(ks.buf) == 0 {
			return out, nil
		}
		if name, ok := ks.keyOf(ks.buf[0]); !ok || name != key {
			return out, nil
		}
		if len(out) == MaxZones {
			if page != nil {
				page.Unreadable = append(page.Unreadable, Unreadable{Key: ks.buf[0].Key,
					Err: corruptf("fairness key %q has more than %d %ss; the rest were not read", key, MaxZones, ks.what)})
			}
			ks.buf, ks.done, ks.from = nil, false, ks.past(key)
			return out, nil
		}
		out = append(out, ks.buf[0])
		ks.buf = ks.buf[1:]
	}
}
