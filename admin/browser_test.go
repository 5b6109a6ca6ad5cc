package admin_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
)

// chromium finds the browser, or skips the test saying how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: install it (Debian: apt-get install -y chromium) to run the browser test; .ci/run does")
	return ""
}

// TestPageInChromium opens the admin page in headless Chromium against a
// running relay and table: a dead letter whose payload and last_error hold
// <script> and an onerror handler is shown as text and runs nothing; its
// Retry button, clicked and confirmed, makes the relay deliver it.
// HERALD_ADMIN_SCREENSHOT=path saves a PNG of the page (docs/admin.png is
// made so: HERALD_ADMIN_SCREENSHOT=$PWD/docs/admin.png go test -run
// TestPageInChromium/postgres ./admin).
func TestPageInChromium(t *testing.T) {
	bin := chromium(t)
	// Not on MySQL: the page is the same on every dialect, and the Admin
	// calls behind it are tested on MySQL by the other tests; a third
	// browser at once only slows CI.
	eachDialectOf(t, []envelope.Dialect{envelope.Postgres, envelope.SQLite}, func(t *testing.T, e *env) {
		ctx := context.Background()
		evs := e.enqueue(t,
			msg("shop.order.paid", "order-1042", map[string]any{"fail": hostile, "order": 1042}),
			msg("mail.sent", "", map[string]any{"fail": "smtp 550 mailbox unavailable", "to": "ada@example.com"}),
		)
		e.waitDead(t, evs...)
		e.enqueue(t, msg("shop.order.paid", "order-1042", map[string]any{"order": 1042, "step": "shipped"}))
		if err := e.adm.Pause(ctx, "billing.invoice", "provider incident"); err != nil {
			t.Fatal(err)
		}
		e.enqueue(t, msg("billing.invoice", "", map[string]any{"invoice": 7}))
		e.recv.heal()
		srv := e.server(t, &authLog{})

		actx, cancel := chromedp.NewExecAllocator(ctx,
			chromedp.ExecPath(bin),
			chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.UserDataDir(t.TempDir()),
			chromedp.WindowSize(1200, 820),
		)
		defer cancel()
		bctx, cancel := chromedp.NewContext(actx)
		defer cancel()
		bctx, cancel = context.WithTimeout(bctx, 40*time.Second)
		defer cancel()

		var mu sync.Mutex
		var dialogs []string
		events := chromedp.Events(bctx, page.JavascriptDialogOpening)
		go func() {
			for ev, err := range events {
				if err != nil {
					return
				}
				mu.Lock()
				dialogs = append(dialogs, string(ev.Type)+": "+ev.Message)
				mu.Unlock()
				if _, err := chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
					t.Logf("accept the dialog: %v", err)
				}
			}
		}()

		row := "#ev-" + evs[0].ID.String()
		pwnedJS := chromedp.Evaluate[string](`String(window.__pwned)`)
		if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/herald/"), chromedp.WaitVisible(row)); err != nil {
			t.Fatal(err)
		}
		pwned, err := chromedp.Run(bctx, pwnedJS)
		if err != nil {
			t.Fatal(err)
		}
		if pwned != "undefined" {
			t.Fatalf("the hostile payload ran: window.__pwned = %s", pwned)
		}
		for _, what := range []string{"payload", "err"} {
			s, err := chromedp.Run(bctx, chromedp.Text(row+" pre."+what))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(s, "<script>window.__pwned = 1</script>") || !strings.Contains(s, `onerror=`) {
				t.Fatalf("%s is not shown as the text it is: %q", what, s)
			}
		}
		if path := os.Getenv("HERALD_ADMIN_SCREENSHOT"); path != "" {
			png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
		}

		if err := chromedp.Do(bctx, chromedp.Click(row+" button.retry", chromedp.NodeVisible)); err != nil {
			t.Fatalf("click Retry: %v", err)
		}

		if err := chromedp.Do(bctx, chromedp.WaitVisible("#msg")); err != nil {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("click Retry: %v (dialogs: %q)", err, dialogs)
		}
		flash, err := chromedp.Run(bctx, chromedp.Text("#msg"))
		if err != nil {
			t.Fatal(err)
		}
		if pwned, err = chromedp.Run(bctx, pwnedJS); err != nil {
			t.Fatal(err)
		}
		if flash != "Retried 1 dead letter(s)." || pwned != "undefined" {
			t.Fatalf("after the click: %q, window.__pwned = %s", flash, pwned)
		}
		mu.Lock()
		got := strings.Join(dialogs, "\n")
		n := len(dialogs)
		mu.Unlock()
		if n != 1 || !strings.HasPrefix(got, "confirm: Retry event") {
			t.Fatalf("dialogs opened: %q; want the one confirmation", got)
		}
		waitFor(t, "the retried dead letter delivered by the relay and marked published", func() bool {
			return e.recv.delivered(evs[0].ID) && e.state(t, evs[0].ID).State == admin.StatePublished
		})
	})
}
