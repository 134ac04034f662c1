package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/jobstage/jobstage/fdbq"
	"github.com/jobstage/jobstage/httpapi"
	"go.yaml.in/yaml/v3"
)

// TestOpenAPIRoutes: every route the server serves is described, and
// every described operation is served.
func TestOpenAPIRoutes(t *testing.T) {
	e := newEnv(t, httpapi.Options{Metrics: http.NotFoundHandler()})
	doc, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, r := range e.srv.Routes() {
		served[r] = true
	}
	described := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			described[strings.ToUpper(method)+" "+path] = true
		}
	}
	for r := range served {
		if !described[r] {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for r := range described {
		if !served[r] {
			t.Errorf("openapi.yaml describes %s, which the server does not serve", r)
		}
	}
	if len(served) < 19 {
		t.Errorf("only %d routes served: %v", len(served), e.srv.Routes())
	}
}

// TestOpenAPIExamples: every request body example decodes with the
// server's own strict decoder.
func TestOpenAPIExamples(t *testing.T) {
	doc, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	decoders := map[string]func(io.Reader) error{
		"POST /v1/types/{type}/jobs":                func(r io.Reader) error { _, _, err := httpapi.DecodeEnqueue(r, "email"); return err },
		"POST /v1/types/{type}/accept":              func(r io.Reader) error { _, err := httpapi.DecodeAccept(r); return err },
		"POST /v1/types/{type}/jobs/{id}/heartbeat": func(r io.Reader) error { _, err := httpapi.DecodeHeartbeat(r); return err },
		"POST /v1/types/{type}/jobs/{id}/finish":    func(r io.Reader) error { _, err := httpapi.DecodeFinish(r); return err },
		"POST /v1/types/{type}/jobs/{id}/fail":      func(r io.Reader) error { _, err := httpapi.DecodeFail(r); return err },
		"POST /v1/workflows":                        func(r io.Reader) error { _, err := httpapi.DecodeWorkflow(r); return err },
		"POST /v1/login":                            func(r io.Reader) error { _, err := httpapi.DecodeLogin(r); return err },
		"PUT /v1/types/{type}": func(r io.Reader) error {
			_, err := httpapi.DecodeSettings(r, fdbq.DefaultTypeSettings())
			return err
		},
	}
	checked := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if op.RequestBody == nil {
				continue
			}
			name := strings.ToUpper(method) + " " + path
			decode, ok := decoders[name]
			if !ok {
				t.Errorf("%s takes a body but the test has no decoder for it", name)
				continue
			}
			for ct, content := range op.RequestBody.Content {
				examples := map[string]any{}
				if !content.Example.IsZero() {
					var v any
					if err := content.Example.Decode(&v); err != nil {
						t.Fatal(err)
					}
					examples["example"] = v
				}
				for k, ex := range content.Examples {
					var v any
					if err := ex.Value.Decode(&v); err != nil {
						t.Fatal(err)
					}
					examples[k] = v
				}
				if len(examples) == 0 {
					t.Errorf("%s %s has no example", name, ct)
				}
				for k, v := range examples {
					b, err := json.Marshal(v)
					if err != nil {
						t.Fatalf("%s example %s: %v", name, k, err)
					}
					if err := decode(bytes.NewReader(b)); err != nil {
						t.Errorf("%s example %s (%s) does not decode: %v", name, k, b, err)
					}
					checked++
				}
			}
		}
	}
	if checked < 7 {
		t.Errorf("only %d examples checked", checked)
	}
}

// TestOpenAPIListParameters: the list route's query parameters are the
// ones openapi.yaml describes, and each, with its example, is taken.
func TestOpenAPIListParameters(t *testing.T) {
	e := newEnv(t, httpapi.Options{})
	doc, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range doc.Paths["/v1/types/{type}/jobs"]["get"].Parameters {
		if p.In != "query" {
			continue
		}
		names = append(names, p.Name)
		a := e.do("GET", "/v1/types/email/jobs?"+url.Values{p.Name: {p.Example}}.Encode(), "", "")
		if a.status != http.StatusOK {
			t.Errorf("%s=%q, the example openapi.yaml gives: %d %s", p.Name, p.Example, a.status, a.body)
		}
	}
	sort.Strings(names)
	if want := []string{"cursor", "id_prefix", "key", "limit", "since", "state", "until"}; !reflect.DeepEqual(names, want) {
		t.Errorf("openapi.yaml describes the list route's query parameters %v; it takes %v", names, want)
	}
}

// TestOpenAPISchemas: each schema's properties are the JSON fields of the
// Go type the server encodes or decodes.
func TestOpenAPISchemas(t *testing.T) {
	doc, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"Job":              httpapi.Job{},
		"NewJob":           httpapi.NewJob{},
		"Page":             httpapi.Page{},
		"Unreadable":       httpapi.Unreadable{},
		"TypeInfo":         httpapi.TypeInfo{},
		"TypeSettings":     httpapi.TypeSettings{},
		"RetryPolicy":      httpapi.RetryPolicy{},
		"KeyPolicy":        httpapi.KeyPolicy{},
		"AcceptRequest":    httpapi.AcceptRequest{},
		"HeartbeatRequest": httpapi.HeartbeatRequest{},
		"FinishRequest":    httpapi.FinishRequest{},
		"FailRequest":      httpapi.FailRequest{},
		"Error":            httpapi.APIError{},
		"Unique":           httpapi.Unique{},
		"Schedule":         httpapi.Schedule{},
		"NewWorkflow":      httpapi.NewWorkflow{},
		"WorkflowJob":      httpapi.WorkflowJob{},
		"Workflow":         httpapi.Workflow{},
		"WorkflowNode":     httpapi.WorkflowNode{},
		"Whoami":           httpapi.Whoami{},
		"LoginRequest":     httpapi.LoginRequest{},
		"TypeStats":        httpapi.TypeStats{},
		"TypeHistory":      httpapi.TypeHistory{},
		"HistoryMinute":    httpapi.HistoryMinute{},
		"KeyPage":          httpapi.KeyPage{},
		"KeyInfo":          httpapi.KeyInfo{},
		"RateWindow":       httpapi.RateWindow{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		fields := jsonFields(reflect.TypeOf(v))
		if fmt.Sprint(props) != fmt.Sprint(fields) {
			t.Errorf("schema %s has properties %v; the Go type has %v", name, props, fields)
		}
		for _, r := range s.Required {
			if _, ok := s.Properties[r]; !ok {
				t.Errorf("schema %s requires %s, which it does not have", name, r)
			}
		}
	}
	// The Go types the server also decodes with: their fields match the
	// ones the decoders know (a field added to one only is refused).
	for name, body := range map[string]string{
		"NewJob":        `{"id":"a","data":{"a":1},"scheduled_at":"2030-01-01T00:00:00Z","priority":1,"key":"k","max_attempts":1,"unique":{"fields":["a"],"states":["pending"],"window":"1h","on_duplicate":"refuse"}}`,
		"AcceptRequest": `{"max":1,"wait":"1s","holder":"w"}`,
		"Unique":        `{"fields":["a"],"states":["pending","finished"],"window":"1h","on_duplicate":"replace"}`,
		"TypeSettings":  `{"activity_timeout":"1s","retry":{"max_attempts":1,"backoff":"constant","base":"1s","max":"1s"},"paused":true,"retention":"1s","zones":2,"max_running":5,"keys":{"k":{"weight":2}},"key_default":{"weight":1,"max_running":1,"max_starts":1,"per":"1s","zones":1}}`,
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var props []string
		for p := range doc.Components.Schemas[name].Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		if fmt.Sprint(keys) != fmt.Sprint(props) {
			t.Fatalf("%s test body has %v, schema %v", name, keys, props)
		}
		var err error
		switch name {
		case "NewJob":
			_, _, err = httpapi.DecodeEnqueue(strings.NewReader(body), "email")
		case "Unique":
			_, _, err = httpapi.DecodeEnqueue(strings.NewReader(`{"data":{"a":1},"unique":`+body+`}`), "email")
		case "AcceptRequest":
			_, err = httpapi.DecodeAccept(strings.NewReader(body))
		case "TypeSettings":
			_, err = httpapi.DecodeSettings(strings.NewReader(body), fdbq.DefaultTypeSettings())
		}
		if err != nil {
			t.Errorf("a %s with every field does not decode: %v", name, err)
		}
	}
}

// jsonFields returns the sorted JSON names of t's fields, embedded
// structs flattened.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue // encoding/json writes neither
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIRefs: every $ref names a component the file defines.
func TestOpenAPIRefs(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal(httpapi.OpenAPI, &root); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	refs := 0
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "$ref" {
				refs++
				var at any = doc
				for _, part := range strings.Split(strings.TrimPrefix(v.Value, "#/"), "/") {
					m, _ := at.(map[string]any)
					at = m[part]
				}
				if at == nil || !strings.HasPrefix(v.Value, "#/") {
					t.Errorf("line %d: $ref %s names nothing in the file", v.Line, v.Value)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if refs < 50 {
		t.Fatalf("only %d $refs found", refs)
	}
}
