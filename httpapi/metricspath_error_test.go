package httpapi_test

import (
	"errors"
	"testing"

	"github.com/jobstage/jobstage/httpapi"
)

// TestMetricsPathError: CheckMetricsPath's refusal carries the path and
// the reason as fields.
func TestMetricsPathError(t *testing.T) {
	err := httpapi.CheckMetricsPath("metrics")
	var pe *httpapi.MetricsPathError
	if !errors.As(err, &pe) || pe.Path != "metrics" || pe.Reason != "must start with /" {
		t.Fatalf("%#v, want a *MetricsPathError of %q: must start with /", err, "metrics")
	}
	if want := `httpapi: metrics path "metrics" must start with /`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}
