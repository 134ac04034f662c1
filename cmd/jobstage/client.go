package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
)

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server  string
	json    bool
	timeout positiveDuration
}

// defaultRequestTimeout bounds one request of a client command: a server
// that accepts the connection and never answers does not hang it.
const defaultRequestTimeout = 30 * time.Second

func (c *cli) clientFlagSet(name, args string) (*flag.FlagSet, *clientFlags) {
	fs := c.newFlags(name, args)
	cf := &clientFlags{timeout: positiveDuration(defaultRequestTimeout)}
	c.requestTimeout = &cf.timeout
	fs.StringVar(&cf.server, "server", envOr("JOBSTAGE_SERVER", "http://127.0.0.1:8080"), "server URL (default $JOBSTAGE_SERVER)")
	fs.BoolVar(&cf.json, "json", false, "print JSON")
	fs.Var(&cf.timeout, "request-timeout", "give up on a request the server has not answered within this long (a long poll: its wait more)")
	return fs, cf
}

// client returns a client whose requests each get the request timeout.
func (cf *clientFlags) client() *httpapi.Client {
	return httpapi.NewClient(cf.server, os.Getenv("JOBSTAGE_TOKEN"), &http.Client{Timeout: time.Duration(cf.timeout)})
}

// longPollClient returns a client for a long poll of up to wait: the
// request timeout is on top of the wait.
func (cf *clientFlags) longPollClient(wait time.Duration) *httpapi.Client {
	return httpapi.NewClient(cf.server, os.Getenv("JOBSTAGE_TOKEN"), &http.Client{Timeout: wait + time.Duration(cf.timeout)})
}

// positiveDuration is a flag that refuses a duration that is not more
// than 0.
type positiveDuration time.Duration

func (d *positiveDuration) String() string { return time.Duration(*d).String() }

func (d *positiveDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 10s or 2m")
	}
	if v <= 0 {
		return fmt.Errorf("must be more than 0, got %s", s)
	}
	*d = positiveDuration(v)
	return nil
}

// timedOut reports whether err is a request that got no answer in time.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *cli) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(append(jsonText(b), '\n'))
	return err
}

func (c *cli) printJob(cf *clientFlags, j *httpapi.Job) error {
	if cf.json {
		return c.printJSON(j)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { printf(tw, "%s:\t%v\n", k, v) }
	row("type", j.Type)
	row("id", j.ID)
	state := string(j.State)
	if j.Outcome != "" {
		state += " (" + string(j.Outcome) + ")"
	}
	row("state", state)
	if j.Added != "" {
		row("enqueue", j.Added)
	}
	row("attempts", fmt.Sprintf("%d%s", j.Attempts, maxAttempts(j.MaxAttempts)))
	if j.Priority != 0 {
		row("priority", j.Priority)
	}
	if j.Key != "" {
		row("key", j.Key)
	}
	row("data", string(j.Data))
	if len(j.Result) > 0 {
		row("result", string(j.Result))
	}
	if j.Error != "" {
		row("error", j.Error)
	}
	if len(j.Progress) > 0 {
		row("progress", string(j.Progress))
	}
	if j.TraceID != "" {
		row("trace", j.TraceID)
	}
	if j.Holder != "" {
		row("holder", j.Holder)
	}
	for _, t := range []struct {
		k string
		v time.Time
	}{{"added", j.AddedAt}, {"scheduled", j.ScheduledAt}, {"started", j.StartedAt}, {"heartbeat", j.HeartbeatAt}, {"finished", j.FinishedAt}} {
		if !t.v.IsZero() {
			row(t.k, t.v.Local().Format(time.RFC3339Nano))
		}
	}
	for _, e := range j.Errors {
		row(fmt.Sprintf("attempt %d", e.Attempt), e.At.Local().Format(time.RFC3339Nano)+"  "+e.Error)
	}
	return tw.Flush()
}

func maxAttempts(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" of %d", n)
}

// enqueue adds one job, or with --file every job of a JSON-lines file.
func (c *cli) enqueue(args []string) error {
	fs, cf := c.clientFlagSet("enqueue", "TYPE [DATA|-] | TYPE --file FILE")
	id := fs.String("id", "", "job id (default: the server makes one; an existing id resubmits that job)")
	priority := fs.Int("priority", 0, "priority: higher runs first")
	key := fs.String("key", "", "fairness key: a tenant, customer or group the type's key policies apply to (default: none)")
	at := fs.String("at", "", "run not before this time: RFC 3339, or a delay such as 10m")
	attempts := fs.Int("max-attempts", 0, "attempts in all (default: the type's retry policy)")
	file := fs.String("file", "", "JSON-lines file, one job per line: {\"id\":…,\"data\":…,\"priority\":…,\"key\":…,\"scheduled_at\":…,\"max_attempts\":…,\"unique\":{…}} (- reads stdin)")
	batch := fs.Int("batch", 500, "jobs per request with --file")
	wait := fs.Duration("wait", 0, "wait up to this long for the job to finish, then print it")
	unique := fs.Bool("unique", false, "add the job only if no duplicate of its data exists (the --unique-* flags and --on-duplicate imply it)")
	uniqueFields := fs.String("unique-fields", "", "comma-separated top-level fields of the data that make the job unique (default: the whole data)")
	uniqueStates := fs.String("unique-states", "", "comma-separated states in which an existing job is a duplicate: pending, running, succeeded, failed, canceled, finished (default: pending,running,succeeded)")
	uniqueWindow := fs.Duration("unique-window", 0, "how long a finished job counts as a duplicate after it finished (default: as long as it is kept)")
	onDuplicate := fs.String("on-duplicate", "", "what a duplicate does: return (the default: print the job that is there), replace, or refuse (exit 1)")
	pos, err := parse(fs, args, 1, 2)
	if err != nil {
		return err
	}
	typ := pos[0]
	cl := cf.client()
	if *file != "" {
		if len(pos) > 1 {
			return usagef("give DATA or --file, not both")
		}
		if *batch < 1 || *batch > 10_000 {
			return usagef("--batch must be between 1 and 10000")
		}
		return c.enqueueFile(cf, cl, typ, *file, *batch)
	}
	data := json.RawMessage("null")
	if len(pos) == 2 {
		raw := []byte(pos[1])
		if pos[1] == "-" {
			if raw, err = io.ReadAll(c.stdin); err != nil {
				return err
			}
		}
		raw = bytes.TrimSpace(raw)
		if !json.Valid(raw) {
			return usagef("DATA is not valid JSON: %s", excerpt(raw))
		}
		data = raw
	}
	nj := httpapi.NewJob{ID: *id, Data: data, Priority: *priority, Key: *key, MaxAttempts: *attempts}
	if *unique || *uniqueFields != "" || *uniqueStates != "" || *uniqueWindow != 0 || *onDuplicate != "" {
		if *uniqueWindow < 0 {
			return usagef("--unique-window must not be negative")
		}
		nj.Unique = &httpapi.Unique{Fields: splitList(*uniqueFields), States: splitList(*uniqueStates),
			Window: httpapi.Duration(*uniqueWindow), OnDuplicate: *onDuplicate}
	}
	if *at != "" {
		t, err := parseAt(*at)
		if err != nil {
			return err
		}
		nj.ScheduledAt = t
	}
	j, err := cl.Enqueue(c.ctx, typ, nj)
	if err != nil {
		return err
	}
	if *wait <= 0 {
		return c.printJob(cf, j)
	}
	if j, err = c.waitFinished(cf, typ, j.ID, *wait); err != nil {
		return err
	}
	if err := c.printJob(cf, j); err != nil {
		return err
	}
	return succeeded(j, *wait)
}

// splitList splits a comma-separated flag value, dropping spaces around
// its items; "" is none.
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// succeeded is nil when j finished successfully and otherwise says how it
// ended or where it is, so that `enqueue --wait` and `wait` exit 1 unless
// the job succeeded.
func succeeded(j *httpapi.Job, waited time.Duration) error {
	switch {
	case j.State != fdbq.Finished:
		return fmt.Errorf("%s %s not finished after %s: %s", j.Type, j.ID, waited, j.State)
	case j.Outcome != fdbq.Succeeded:
		msg := j.Error
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i] + " …"
		}
		return fmt.Errorf("%s %s finished %s: %s", j.Type, j.ID, j.Outcome, msg)
	}
	return nil
}

// waitFinished long-polls until the job is finished or d passes; the
// server bounds one poll, so a long d takes several.
func (c *cli) waitFinished(cf *clientFlags, typ, id string, d time.Duration) (*httpapi.Job, error) {
	deadline := time.Now().Add(d)
	for {
		// At least a millisecond: a timeout of 0 would be the server's
		// default wait, longer than the client gives the poll.
		poll := max(min(time.Until(deadline), httpapi.MaxWait), time.Millisecond)
		j, err := cf.longPollClient(poll).Wait(c.ctx, typ, id, fdbq.Finished, poll)
		if err != nil {
			return nil, err
		}
		if j.State == fdbq.Finished || time.Until(deadline) <= 0 {
			return j, nil
		}
	}
}

func parseAt(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--at %q: want RFC 3339 (2026-01-02T15:04:05Z) or a delay (10m)", s)
	}
	return t, nil
}

func excerpt(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

// batchBytes bounds the JSON of one enqueue request from a file, below
// the server's default body limit of 1 MiB.
const batchBytes = 768 << 10

// enqueueFile reads the whole file first and refuses it if any line is
// bad, so that a corrupt line enqueues nothing; then it sends the jobs in
// batches (each batch is one transaction), reporting progress on stderr.
func (c *cli) enqueueFile(cf *clientFlags, cl *httpapi.Client, typ, path string, batch int) error {
	var r io.Reader = c.stdin
	name := "stdin"
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r, name = f, path
	}
	var jobs []httpapi.NewJob
	var sizes, lines []int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var nj httpapi.NewJob
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&nj); err != nil {
			return fmt.Errorf("%s:%d: %v (nothing was enqueued)", name, line, err)
		}
		if dec.More() {
			return fmt.Errorf("%s:%d: more than one JSON value on the line (nothing was enqueued)", name, line)
		}
		jobs = append(jobs, nj)
		sizes = append(sizes, len(b)+1)
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s:%d: %v (nothing was enqueued)", name, line+1, err)
	}
	if len(jobs) == 0 {
		return fmt.Errorf("%s: no jobs", name)
	}
	start := time.Now()
	last := start
	var done []*httpapi.Job
	for i := 0; i < len(jobs); {
		// A request holds at most batch jobs and about batchBytes of them,
		// below the server's default body limit.
		end, size := i, 0
		for end < len(jobs) && end-i < batch && (end == i || size+sizes[end] <= batchBytes) {
			size += sizes[end]
			end++
		}
		got, err := cl.EnqueueBatch(c.ctx, typ, jobs[i:end])
		if err != nil {
			return &contextError{err: err, context: fmt.Sprintf("%d of %d jobs enqueued; jobs %d–%d (lines %d–%d) refused, and the rest not sent (enqueueing the file again resubmits the jobs with ids)",
				i, len(jobs), i+1, end, lines[i], lines[end-1])}
		}
		i = end
		done = append(done, got...)
		if now := time.Now(); now.Sub(last) >= time.Second || len(done) == len(jobs) {
			printf(c.stderr, "enqueued %d/%d (%.0f jobs/s)\n", len(done), len(jobs), float64(len(done))/now.Sub(start).Seconds())
			last = now
		}
	}
	if cf.json {
		return c.printJSON(done)
	}
	printf(c.stdout, "enqueued %d %s jobs\n", len(done), typ)
	return nil
}

// jobCommand runs get, cancel, requeue and delete.
func (c *cli) jobCommand(cmd string, args []string) error {
	fs, cf := c.clientFlagSet(cmd, "TYPE ID")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	cl := cf.client()
	var j *httpapi.Job
	switch cmd {
	case "get":
		j, err = cl.Get(c.ctx, pos[0], pos[1])
	case "cancel":
		j, err = cl.Cancel(c.ctx, pos[0], pos[1])
	case "requeue":
		j, err = cl.Requeue(c.ctx, pos[0], pos[1])
	case "delete":
		if err = cl.Delete(c.ctx, pos[0], pos[1]); err == nil {
			if cf.json {
				return c.printJSON(map[string]any{"deleted": true, "type": pos[0], "id": pos[1]})
			}
			printf(c.stdout, "deleted %s %s\n", pos[0], pos[1])
			return nil
		}
	}
	if err != nil {
		return err
	}
	return c.printJob(cf, j)
}

func (c *cli) wait(args []string) error {
	fs, cf := c.clientFlagSet("wait", "TYPE ID")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	if *timeout < 0 {
		return usagef("--timeout %s is negative", *timeout)
	}
	j, err := c.waitFinished(cf, pos[0], pos[1], *timeout)
	if err != nil {
		return err
	}
	if err := c.printJob(cf, j); err != nil {
		return err
	}
	return succeeded(j, *timeout)
}

func (c *cli) list(args []string) error {
	fs, cf := c.clientFlagSet("list", "TYPE")
	state := fs.String("state", "pending", "pending, running or finished")
	limit := fs.Int("limit", 100, "jobs per page (at most 1000)")
	cursor := fs.String("cursor", "", "the next-page cursor a previous list printed (with the same filters)")
	all := fs.Bool("all", false, "follow the pages to the end")
	key := fs.String("key", "", "only the jobs of this fairness key")
	idPrefix := fs.String("id-prefix", "", "only the jobs whose id begins with this")
	since := fs.String("since", "", "only the jobs whose time in the state (pending: scheduled, running: started, finished: finished) is at or after this: RFC 3339 (2026-01-02T15:04:05Z), or how long ago (1h)")
	until := fs.String("until", "", "only the jobs whose time in the state is before this: RFC 3339, or how long ago (10m)")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl := cf.client()
	o := httpapi.ListOptions{State: fdbq.State(*state), Limit: *limit, Cursor: *cursor, Key: *key, IDPrefix: *idPrefix}
	if o.Since, err = parseAgo("since", *since); err != nil {
		return err
	}
	if o.Until, err = parseAgo("until", *until); err != nil {
		return err
	}
	jobs := []*httpapi.Job{}
	var bad []httpapi.Unreadable
	next := ""
	for {
		page, err := cl.List(c.ctx, pos[0], o)
		if err != nil {
			return err
		}
		jobs = append(jobs, page.Jobs...)
		bad = append(bad, page.Unreadable...)
		next = page.Next
		if !*all || next == "" {
			break
		}
		o.Cursor = next
	}
	if cf.json {
		return c.printJSON(httpapi.Page{Jobs: jobs, Unreadable: bad, Next: next})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	printf(tw, "ID\tSTATE\tOUTCOME\tATTEMPTS\tPRIORITY\tSCHEDULED\n")
	for _, j := range jobs {
		printf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", j.ID, j.State, j.Outcome, j.Attempts, j.Priority, j.ScheduledAt.Local().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c.printUnreadable(pos[0], bad)
	if next != "" {
		// The filters as given (a time as the instant it was), which the
		// cursor goes with.
		more := []string{"jobstage", "list", pos[0], "--state", *state}
		for _, f := range []struct{ flag, v string }{{"--key", o.Key}, {"--id-prefix", o.IDPrefix}} {
			if f.v != "" {
				more = append(more, f.flag, f.v)
			}
		}
		for _, f := range []struct {
			flag string
			t    time.Time
		}{{"--since", o.Since}, {"--until", o.Until}} {
			if !f.t.IsZero() {
				more = append(more, f.flag, f.t.UTC().Format(time.RFC3339Nano))
			}
		}
		more = append(more, "--cursor", next)
		for i, w := range more {
			more[i] = shellQuote(w)
		}
		printf(c.stderr, "more: %s\n", strings.Join(more, " "))
	}
	return nil
}

// parseAgo reads a time flag of list: RFC 3339, or a duration before
// now; "" is no time.
func parseAgo(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, usagef("--%s %q: a duration says how long ago, and is not negative", flag, s)
		}
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or how long ago (1h)", flag, s)
	}
	return t, nil
}

// shellQuote quotes s for a POSIX shell, when it needs it.
func shellQuote(s string) string {
	plain := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,", r)) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printUnreadable tells on stderr which entries of a listing name a job
// the server cannot read, and how to get rid of one.
func (c *cli) printUnreadable(typ string, bad []httpapi.Unreadable) {
	withID := false
	for _, u := range bad {
		if u.ID != "" {
			printf(c.stderr, "unreadable: %s: %s\n", u.ID, u.Error)
			withID = true
		} else {
			printf(c.stderr, "unreadable: %s\n", u.Error) // it quotes the key
		}
	}
	if withID {
		printf(c.stderr, "a job that cannot be read can only be deleted: jobstage delete %s ID\n", typ)
	}
}

func (c *cli) types(args []string) error {
	fs, cf := c.clientFlagSet("types", "")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	ts, err := cf.client().Types(c.ctx)
	if err != nil {
		return err
	}
	if cf.json {
		return c.printJSON(map[string]any{"types": ts})
	}
	return c.printTypes(ts)
}

// printTypes prints the types as a table; one whose settings cannot be
// read shows "?" for them, and why on stderr.
func (c *cli) printTypes(ts []*httpapi.TypeInfo) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	printf(tw, "TYPE\tPENDING\tRUNNING\tFINISHED\tPAUSED\tACTIVITY TIMEOUT\tMAX ATTEMPTS\n")
	var bad []*httpapi.TypeInfo
	for _, t := range ts {
		if t.Error != "" {
			bad = append(bad, t)
			if t.Name != "" {
				printf(tw, "%s\t%d\t%d\t%d\t?\t?\t?\n", t.Name, t.Pending, t.Running, t.Finished)
			}
			continue
		}
		printf(tw, "%s\t%d\t%d\t%d\t%v\t%s\t%d\n", t.Name, t.Pending, t.Running, t.Finished, t.Settings.Paused,
			time.Duration(t.Settings.ActivityTimeout), t.Settings.Retry.MaxAttempts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range bad {
		printf(c.stderr, "unreadable: %s\n", t.Error)
	}
	if len(bad) > 0 {
		printf(c.stderr, "settings that cannot be read are replaced by the type's settings in the config at the next start, or by PUT /v1/types/TYPE\n")
	}
	return nil
}

func (c *cli) pauseResume(cmd string, args []string) error {
	fs, cf := c.clientFlagSet(cmd, "TYPE")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	cl := cf.client()
	var t *httpapi.TypeInfo
	if cmd == "pause" {
		t, err = cl.Pause(c.ctx, pos[0])
	} else {
		t, err = cl.Resume(c.ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if cf.json {
		return c.printJSON(t)
	}
	return c.printTypes([]*httpapi.TypeInfo{t})
}

// contextError is a failed request with what the command knows besides:
// the command reports the context, then the request's error in its words.
type contextError struct {
	context string
	err     error
}

func (e *contextError) Error() string { return e.context + ": " + e.err.Error() }
func (e *contextError) Unwrap() error { return e.err }

// apiError explains a failed request in one line: the server's error
// answer, or why no answer was read.
func apiError(err error) string {
	var ae *httpapi.APIError
	if errors.As(err, &ae) {
		return fmt.Sprintf("%s (HTTP %d): %s", ae.Code, ae.Status, ae.Message)
	}
	var re *httpapi.RequestError
	if errors.As(err, &re) {
		return re.Describe()
	}
	return err.Error()
}

// wantsJSON reports whether a command was given --json.
func wantsJSON(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "-json" || a == "--json=true" || a == "-json=true" {
			return true
		}
	}
	return false
}

// printJSONError writes a failure as the API's error object, with the
// HTTP status when the server answered. context, when set, says what the
// client knows of the failure besides what the error says.
func printJSONError(w io.Writer, err error, context string) {
	out := struct {
		Code    string `json:"error"`
		Message string `json:"message"`
		Status  int    `json:"status,omitempty"`
	}{Code: "client", Message: apiError(err)}
	var ae *httpapi.APIError
	if errors.As(err, &ae) {
		out.Code, out.Message, out.Status = ae.Code, ae.Message, ae.Status
	}
	if context != "" {
		out.Message = context + ": " + out.Message
	}
	b, _ := json.Marshal(out)
	w.Write(append(jsonText(b), '\n'))
}
