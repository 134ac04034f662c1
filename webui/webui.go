// Package webui is jobstage's web UI: a page of plain HTML, JavaScript
// modules and CSS, embedded in the binary, that reads and acts through
// the HTTP API (package httpapi) with the caller's token.
//
// Handler serves the files; httpapi serves it under /ui/ when
// httpapi.Options.UI is set, and decides what needs a token: the login
// page (login.html) and the assets (assets/…) are public, the page
// (index.html, at /ui/) is not. Nothing is loaded from elsewhere, so the
// UI works offline, and the pages run no inline script, so the API's
// Content-Security-Policy can allow scripts from the server only.
//
// The page is one document with views chosen by the URL's fragment:
//
//	#/                         the types: counts, paused, oldest due job; pause and resume
//	#/types/{type}?state=…     a type's jobs by state, a page at a time, filtered (key, id_prefix, since, until); enqueue
//	#/types/{type}/jobs/{id}   a job: data, result, error, progress, times, workflow; cancel, requeue, delete
//	#/schedules                the periodic schedules
//	#/workflows/{id}           a workflow and its jobs
//
// It asks GET /v1/whoami for the caller's role and shows only the
// buttons the role may use (the API refuses the others all the same).
// It follows GET /v1/events, a server-sent event stream of job changes,
// and reloads what an event touches, at most a few times a second; it
// never reloads on a timer. A stream the server refuses (503) is tried
// again, with a growing delay, from the last event's cursor.
package webui

import (
	"embed"
	"io"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Handler serves the UI's files: / (index.html), /login.html and
// /assets/…, with the path relative to where the UI is mounted. It
// serves regular files by their clean paths only: a path with an empty,
// "." or ".." segment, one that names a directory, and any other path
// answer 404, so that no spelling of a path reaches the page by another
// name than / (the one that needs a token).
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := fileName(r.URL.Path)
		if !ok {
			http.NotFound(w, r)
			return
		}
		f, err := sub.Open(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		rs, seeks := f.(io.ReadSeeker)
		if err != nil || !st.Mode().IsRegular() || !seeks {
			http.NotFound(w, r)
			return
		}
		// Each start serves the files of its binary: a browser checks
		// with the server before it uses what it has kept.
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, name, st.ModTime(), rs)
	})
}

// fileName is the embedded file a request's path names: index.html for
// /, login.html, or a file below assets/ by a clean path.
func fileName(p string) (string, bool) {
	switch {
	case p == "/":
		return "index.html", true
	case p == "/login.html":
		return "login.html", true
	}
	name, ok := strings.CutPrefix(p, "/assets/")
	if !ok || !fs.ValidPath(name) || name == "." || strings.Contains(name, `\`) {
		return "", false
	}
	return "assets/" + name, true
}
