package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's description (OpenAPI 3.0, YAML), served at
// GET /v1/openapi.yaml. A test checks it against the server's routes and
// the statuses they answer.
//
//go:embed openapi.yaml
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
	return nil
}
