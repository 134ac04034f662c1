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
