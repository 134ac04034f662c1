package jobstage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
	"github.com/jobstage/jobstage/kv/tuple"
)

// Open refuses a store in a layout this version does not read, with
// fdbq.ErrLayout, and closes it: the directory can be opened again.
func TestOpenRefusesAnotherLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, err := jobstage.Open(ctx, jobstage.Config{Dir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	layout := tuple.FromBytes(fdbq.DefaultPrefix).MustPack(tuple.Tuple{14})
	if err := c.DB().Transact(ctx, func(tx kv.Tx) error {
		tx.Set(layout, []byte{fdbq.Layout + 1, 0, 0, 0, 0, 0, 0, 0})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := jobstage.Open(ctx, jobstage.Config{Dir: dir, Logger: quiet})
		if !errors.Is(err, fdbq.ErrLayout) || !strings.Contains(err.Error(), fmt.Sprintf("layout %d", fdbq.Layout+1)) {
			t.Fatalf("Open of a layout-%d store: %v", fdbq.Layout+1, err)
		}
	}
}
