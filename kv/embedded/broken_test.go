package embedded

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/jobstage/jobstage/kv"
)

// TestFailedWriteIsFinal: when a write to the data directory fails, the
// commits in flight answer commit_unknown_result and the store refuses
// all later work, so DB.Transact (which writes this store no commit
// markers) can never apply a transaction twice; its error says the
// outcome is unknown.
func TestFailedWriteIsFinal(t *testing.T) {
	failing := &errorfs.Toggle{Injector: errorfs.ErrInjected}
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return failing.MaybeError(op)
		}
		return nil
	}))
	s, err := Open("", Options{fs: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := kv.NewDB(s, kv.Options{})
	ctx := context.Background()
	if err := db.Transact(ctx, func(tx kv.Tx) error { tx.Add([]byte("n"), 1); return nil }); err != nil {
		t.Fatal(err)
	}
	failing.On()
	runs := 0
	err = db.Transact(ctx, func(tx kv.Tx) error { runs++; tx.Add([]byte("n"), 1); return nil })
	t.Logf("Transact with a failing disk: %v after %d runs", err, runs)
	if !errors.Is(err, kv.ErrCommitUnknownResult) {
		t.Fatalf("Transact with a failing disk: %v, want commit_unknown_result", err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	failing.Off()
	if _, err := s.Begin(ctx); err == nil {
		t.Fatal("Begin after a failed write succeeded")
	}
}
