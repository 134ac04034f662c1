// Package browsertest runs a headless Chromium for end-to-end tests of the
// web UI, driven with chromedp.
//
// The browser is Debian's chromium (/usr/bin/chromium, or the first
// chromium or chromium-browser in $PATH; $JOBSTAGE_CHROMIUM names another).
// Without one a test is skipped, saying so, unless JOBSTAGE_REQUIRE_BROWSER
// is set (as CI sets it): then it fails. Each browser gets a new empty
// profile and the flags that keep it from reaching any host but the ones
// a test opens: no background networking, component updates, sync or
// QUIC, and no first-run pages.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// RequireEnv is the environment variable that turns a missing browser
// from a skip into a failure.
const RequireEnv = "JOBSTAGE_REQUIRE_BROWSER"

// Path returns the browser to run, or skips (fails under RequireEnv)
// when there is none.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("JOBSTAGE_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("no chromium found and %s is set: install Debian's chromium (apt-get install chromium)", RequireEnv)
	}
	t.Skipf("no chromium found: this browser test is skipped (install Debian's chromium to run it; set %s=1 to make a missing browser fail)", RequireEnv)
	return ""
}

// New starts a headless browser and returns a chromedp context for a tab
// of it, which has already run once (so a caller may derive timeouts
// from it). The browser stops when the test ends.
func New(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Path(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("lang", "en-US"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", Path(t), err)
	}
	return ctx
}
