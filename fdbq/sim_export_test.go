package fdbq

// StoredJob is a job record as stored, for the tests that read the store
// underneath the queue (the simulation's commit log, the fault table's
// consistency check): the job as Get returns it, and the fields Get does
// not show.
type StoredJob struct {
	Job
	Lock      string // running: the holder's lock
	LastLock  string // the lock that last left running, and how ("lock:finish")
	LastAdd   string // the AddBatch call that last wrote the job
	ExpiresAt int64  // running: the activity deadline, in ms
	// ResubmitAt is where a running job that was added again goes when
	// its worker is done, in ms.
	ResubmitAt int64
	// ActiveVersion and ActiveTimeoutMs (running) key the job's activity
	// entry: the read version of its last renewal, the timeout it gave.
	// The version depends on the store's history, so comparisons of what
	// two runs stored (JSON) leave it out.
	ActiveVersion   int64 `json:"-"`
	ActiveTimeoutMs int64
}

// DecodeStoredJob decodes the record stored under a job key.
func DecodeStoredJob(b []byte, typ, id string) (*StoredJob, error) {
	r, err := decodeRecord(b, typ, id)
	if err != nil {
		return nil, err
	}
	return &StoredJob{Job: *r.job(typ, id), Lock: r.Lock, LastLock: r.LastLock, LastAdd: r.LastAdd,
		ExpiresAt: r.ExpiresAt, ResubmitAt: r.ResubmitAt,
		ActiveVersion: r.ActiveVersion, ActiveTimeoutMs: r.activityTimeoutMs()}, nil
}
