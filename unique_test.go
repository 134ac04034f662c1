package jobstage_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobstage/jobstage"
	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/jobstagetest"
)

// MonthlyBill is unique by its customer and month for a day after it is
// done.
type MonthlyBill struct {
	Customer string `json:"customer"`
	Month    string `json:"month"`
	Note     string `json:"note,omitempty"`
}

func (MonthlyBill) Kind() string { return "monthly_bill" }

func (MonthlyBill) Defaults() jobstage.Defaults {
	return jobstage.Defaults{Unique: &fdbq.Unique{Fields: []string{"customer", "month"}, Window: 24 * time.Hour}}
}

// TestEnqueueUnique: a kind's Defaults.Unique holds back a second job of
// the same customer and month; EnqueueOptions.Unique overrides it.
func TestEnqueueUnique(t *testing.T) {
	ctx := within(t)
	c := jobstagetest.Open(t, jobstage.Config{Logger: quiet})
	a, err := jobstage.Enqueue(ctx, c, MonthlyBill{Customer: "acme", Month: "2026-11"}, nil)
	if err != nil || a.Added != fdbq.AddedNew {
		t.Fatalf("first: %+v %v", a, err)
	}
	b, err := jobstage.Enqueue(ctx, c, MonthlyBill{Customer: "acme", Month: "2026-11", Note: "again"}, nil)
	if err != nil || b.Added != fdbq.AddedDuplicate || b.ID != a.ID {
		t.Fatalf("second: %+v %v", b, err)
	}
	_, err = jobstage.Enqueue(ctx, c, MonthlyBill{Customer: "acme", Month: "2026-11"},
		&jobstage.EnqueueOptions{Unique: &fdbq.Unique{Fields: []string{"customer", "month"}, OnDuplicate: fdbq.DuplicateRefuse}})
	if !errors.Is(err, fdbq.ErrDuplicate) {
		t.Fatalf("refuse: %v", err)
	}
	other, err := jobstage.Enqueue(ctx, c, MonthlyBill{Customer: "acme", Month: "2026-12"}, nil)
	if err != nil || other.Added != fdbq.AddedNew {
		t.Fatalf("other month: %+v %v", other, err)
	}
	if jobs := jobstagetest.Enqueued[MonthlyBill](t, c.DB(), c); len(jobs) != 2 {
		t.Fatalf("%d bills enqueued, want 2", len(jobs))
	}
}
