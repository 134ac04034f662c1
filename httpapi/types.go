package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/kv"
)

// The handlers of the type routes and of the operations routes.

// typesAnswer is the answer of GET /v1/types.
type typesAnswer struct {
	Types []*TypeInfo `json:"types"`
}

// types: GET /v1/types. A type whose settings cannot be read is listed
// with its error.
func (s *Server) types(w http.ResponseWriter, r *http.Request) error {
	infos, err := s.q.Types(r.Context(), s.db)
	if err != nil {
		return err
	}
	out := typesAnswer{Types: make([]*TypeInfo, len(infos))}
	for i, t := range infos {
		out.Types[i] = toTypeInfo(t)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// setType: PUT /v1/types/{type}. The body's fields replace the type's
// settings (the defaults for a new type, or for one whose settings cannot
// be read); fields left out keep theirs. 201 when the type is new, else
// 200; both answer the TypeInfo.
func (s *Server) setType(w http.ResponseWriter, r *http.Request) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	type result struct {
		info    *fdbq.TypeInfo
		created bool
	}
	// Read, merge and write in one transaction, so a concurrent change
	// between the read and the write makes it retry, not get lost. The
	// body was read before: a retried function only decodes it again.
	res, err := kv.Transact(r.Context(), s.db, func(tx kv.Tx) (result, error) {
		base, created := fdbq.DefaultTypeSettings(), true
		switch cur, err := s.q.GetType(r.Context(), tx, typ); {
		case err == nil:
			base, created = cur.Settings, false
		case errors.Is(err, fdbq.ErrCorrupt):
			created = false
		case !errors.Is(err, fdbq.ErrUnknownType):
			return result{}, err
		}
		settings, err := decodeSettings(bytes.NewReader(body), base)
		if err != nil {
			return result{}, err
		}
		if err := s.q.SetType(r.Context(), tx, typ, settings); err != nil {
			return result{}, err
		}
		info, err := s.q.GetType(r.Context(), tx, typ)
		return result{info, created}, err
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if res.created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toTypeInfo(res.info))
	return nil
}

// pause: POST /v1/types/{type}/pause; answers the TypeInfo.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) error {
	return s.changeType(w, r, s.q.Pause)
}

// resume: POST /v1/types/{type}/resume; answers the TypeInfo.
func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	return s.changeType(w, r, s.q.Resume)
}

func (s *Server) changeType(w http.ResponseWriter, r *http.Request, op func(context.Context, kv.Transactor, string) error) error {
	typ, err := pathType(r)
	if err != nil {
		return err
	}
	info, err := kv.Transact(r.Context(), s.db, func(tx kv.Tx) (*fdbq.TypeInfo, error) {
		if err := op(r.Context(), tx, typ); err != nil {
			return nil, err
		}
		return s.q.GetType(r.Context(), tx, typ)
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toTypeInfo(info))
	return nil
}

// healthz: GET /healthz; the process serves HTTP.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz: GET /readyz; Options.Ready says whether the process is ready
// (store open, pipelines started).
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) error {
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			return &APIError{Status: http.StatusServiceUnavailable, Code: CodeNotReady, Message: err.Error()}
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}
