package fdbq

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is how the delay before a retry grows with the attempt number.
type Backoff string

// Backoffs. Exponential is base·2^(attempt−1) with full jitter (a uniform
// random delay between half and all of it), the others are exact.
const (
	Exponential Backoff = "exponential"
	Linear      Backoff = "linear"   // base·attempt
	Constant    Backoff = "constant" // base
)

// RetryPolicy says how often and when a failed job runs again.
type RetryPolicy struct {
	// MaxAttempts is how many attempts a job gets in all; after the last
	// one fails it finishes with outcome failed. 1 means no retries.
	MaxAttempts int           `json:"max_attempts"`
	Backoff     Backoff       `json:"backoff"`
	Base        time.Duration `json:"base"`
	Max         time.Duration `json:"max"` // cap on one delay; 0: none
}

// Defaults of TypeSettings.
const (
	DefaultActivityTimeout = 30 * time.Second
	DefaultMaxAttempts     = 5
	DefaultBackoffBase     = time.Second
	DefaultBackoffMax      = time.Hour
	DefaultRetention       = 24 * time.Hour
)

// DefaultRetryPolicy: 5 attempts, exponential from 1 s, at most 1 h apart.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: DefaultMaxAttempts, Backoff: Exponential, Base: DefaultBackoffBase, Max: DefaultBackoffMax}

// Validate reports what is wrong with p.
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 1 {
		return errorf(ErrInvalidJob, "max_attempts %d is below 1", p.MaxAttempts)
	}
	if p.MaxAttempts > maxCount {
		return fmt.Errorf("%w: retry policy: max_attempts %d is above %d", ErrInvalidJob, p.MaxAttempts, maxCount)
	}
	switch p.Backoff {
	case Exponential, Linear, Constant:
	default:
		return errorf(ErrInvalidJob, "unknown backoff %q (exponential, linear or constant)", p.Backoff)
	}
	if p.Base < 0 || p.Max < 0 {
		return errorf(ErrInvalidJob, "negative delay (base or max)")
	}
	return nil
}

// Delay returns the wait before attempt+1, after attempt (1-based) failed.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	var d time.Duration
	switch p.Backoff {
	case Linear:
		d = p.Base * time.Duration(attempt)
	case Constant:
		d = p.Base
	default:
		exp := math.Min(float64(attempt-1), 62)
		f := float64(p.Base) * math.Pow(2, exp)
		if f > math.MaxInt64/2 {
			f = math.MaxInt64 / 2
		}
		d = time.Duration(f)
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	if p.Backoff == Exponential && d > 1 {
		d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	}
	return d
}

// TypeSettings are the settings of a job type.
type TypeSettings struct {
	// ActivityTimeout: a running job whose worker has not heartbeated for
	// this long is taken back by the activity monitor and retried.
	ActivityTimeout time.Duration `json:"activity_timeout"`
	Retry           RetryPolicy   `json:"retry"`
	// Paused types are not accepted; adds still work and nothing is lost.
	Paused bool `json:"paused"`
	// Retention is how long finished jobs are kept; 0 keeps them forever.
	Retention time.Duration `json:"retention"`
	// Zones is how many zones the jobs of one fairness key are spread
	// over, by a hash of their ids (0: DefaultZones). An accept merges the
	// first entries of a key's zones, so priority and order hold across
	// them; see Fairness in the package doc. A change
	// applies to jobs added from then on.
	Zones int `json:"zones,omitempty"`
	// MaxRunning bounds the type's running jobs across every process
	// (0: no bound). Accepts of a bounded type conflict with every start
	// and end of its jobs, so they run one at a time.
	MaxRunning int `json:"max_running,omitempty"`
	// Keys are the policies of named fairness keys; KeyDefault is every
	// other key's, and gives the weight of the jobs without a key.
	Keys       map[string]KeyPolicy `json:"keys,omitempty"`
	KeyDefault KeyPolicy            `json:"key_default,omitzero"`
}

// KeyPolicy is how the jobs of one fairness key share a type.
type KeyPolicy struct {
	// Weight is the key's share of accepts among the keys with ready jobs
	// (0: 1): a key of weight 2 is chosen twice as often as one of 1.
	Weight int `json:"weight,omitempty"`
	// MaxRunning bounds the key's running jobs across every process (0:
	// no bound). With 1 the key's jobs run one at a time, in order.
	MaxRunning int `json:"max_running,omitempty"`
	// MaxStarts jobs of the key start in each Per, a window that begins
	// at the first start after the last one ended (0: no bound).
	MaxStarts int           `json:"max_starts,omitempty"`
	Per       time.Duration `json:"per,omitempty"`
	// Zones overrides the type's Zones for the key (0: the type's).
	Zones int `json:"zones,omitempty"`
}

// Bounds of the fairness settings.
const (
	// DefaultZones is how many zones a key's jobs are spread over when
	// the type does not say: 16 ranges take one key's adds and accepts,
	// so that one type's writes spread over a FoundationDB cluster's
	// storage servers. An accept merges the first entries of a key's
	// zones, so priority and order hold across them as within one; a
	// type of small volume may take 1 for the fewest reads per accept.
	DefaultZones = 16
	// MaxZones bounds the zones of one key.
	MaxZones = 256
	// MaxKeyPolicies bounds TypeSettings.Keys: the settings are one value.
	MaxKeyPolicies = 1000
	// MaxKeyWeight bounds KeyPolicy.Weight.
	MaxKeyWeight = 1000
)

// Validate reports what is wrong with p.
func (p KeyPolicy) Validate() error {
	switch {
	case p.Weight < 0 || p.Weight > MaxKeyWeight:
		return errorf(ErrInvalidJob, "weight %d is out of range (0 to %d)", p.Weight, MaxKeyWeight)
	case p.MaxRunning < 0 || p.MaxRunning > maxCount:
		return errorf(ErrInvalidJob, "max_running %d is out of range (0 to %d)", p.MaxRunning, maxCount)
	case p.MaxStarts < 0 || p.MaxStarts > maxCount:
		return errorf(ErrInvalidJob, "max_starts %d is out of range (0 to %d)", p.MaxStarts, maxCount)
	case p.MaxStarts > 0 && p.Per < time.Millisecond:
		return errorf(ErrInvalidJob, "max_starts %d needs a period (per) of at least 1ms, not %v", p.MaxStarts, p.Per)
	case p.Per < 0:
		return errorf(ErrInvalidJob, "negative period (per) %v", p.Per)
	case p.Zones < 0 || p.Zones > MaxZones:
		return errorf(ErrInvalidJob, "zones %d is out of range (0 to %d)", p.Zones, MaxZones)
	}
	return nil
}

// policy is the policy of fairness key key.
func (s TypeSettings) policy(key string) KeyPolicy {
	if p, ok := s.Keys[key]; ok && key != "" {
		return p
	}
	return s.KeyDefault
}

// weight is the key's weight, at least 1.
func (p KeyPolicy) weight() int { return max(p.Weight, 1) }

// limited says whether the key's starts are bounded (running or rate).
func (p KeyPolicy) limited() bool { return p.MaxRunning > 0 || p.MaxStarts > 0 }

// zonesOf is how many zones the jobs of key are spread over.
func (s TypeSettings) zonesOf(key string) int {
	n := s.policy(key).Zones
	if n == 0 {
		n = s.Zones
	}
	if n <= 0 {
		n = DefaultZones
	}
	return min(n, MaxZones)
}

// DefaultTypeSettings returns the settings a type gets when none are given.
func DefaultTypeSettings() TypeSettings {
	return TypeSettings{ActivityTimeout: DefaultActivityTimeout, Retry: DefaultRetryPolicy, Retention: DefaultRetention}
}

// Validate reports what is wrong with s.
func (s TypeSettings) Validate() error {
	if s.ActivityTimeout < 100*time.Millisecond {
		return errorf(ErrInvalidJob, "activity timeout %v is below 100ms", s.ActivityTimeout)
	}
	if s.Retention < 0 {
		return errorf(ErrInvalidJob, "negative retention")
	}
	if s.Zones < 0 || s.Zones > MaxZones {
		return errorf(ErrInvalidJob, "zones %d is out of range (0 to %d)", s.Zones, MaxZones)
	}
	if s.MaxRunning < 0 || s.MaxRunning > maxCount {
		return errorf(ErrInvalidJob, "max_running %d is out of range (0 to %d)", s.MaxRunning, maxCount)
	}
	if len(s.Keys) > MaxKeyPolicies {
		return errorf(ErrInvalidJob, "%d key policies, more than %d", len(s.Keys), MaxKeyPolicies)
	}
	if err := s.KeyDefault.Validate(); err != nil {
		return fmt.Errorf("key_default: %w", err)
	}
	for name, p := range s.Keys {
		if err := ValidateKey(name); err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("keys: %q: %w", name, err)
		}
	}
	return s.Retry.Validate()
}

func decodeSettings(b []byte, name string) (TypeSettings, error) {
	var s TypeSettings
	if err := json.Unmarshal(b, &s); err != nil {
		return s, corruptf("type %q: corrupt settings: %w", name, err)
	}
	return s, nil
}

// TypeDef is a job type and its settings, as a program declares it
// (Queue.DeclareType).
type TypeDef struct {
	Name     string
	Settings TypeSettings
}

// TypeInfo is a registered type, its settings and its job counts.
type TypeInfo struct {
	Name     string
	Settings TypeSettings
	Pending  int64
	Running  int64
	Finished int64
	// Err, set only by Types, says why the type's settings (or, with Name
	// empty, its key) cannot be read; it wraps ErrCorrupt. Settings are
	// then zero; the counts are read all the same.
	Err error
}

// Equal says whether s and o are the same settings (a Keys map that is
// nil and one that is empty are the same).
func (s TypeSettings) Equal(o TypeSettings) bool {
	if s.ActivityTimeout != o.ActivityTimeout || s.Retry != o.Retry || s.Paused != o.Paused || s.Retention != o.Retention ||
		s.Zones != o.Zones || s.MaxRunning != o.MaxRunning || s.KeyDefault != o.KeyDefault || len(s.Keys) != len(o.Keys) {
		return false
	}
	for k, p := range s.Keys {
		if q, ok := o.Keys[k]; !ok || q != p {
			return false
		}
	}
	return true
}
