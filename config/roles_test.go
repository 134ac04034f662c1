package config_test

import (
	"strings"
	"testing"

	"github.com/jobstage/jobstage/config"
	"github.com/jobstage/jobstage/httpapi"
)

// TestTokenRolesAreHTTPAPIRoles: a token's role is the HTTP API's Role,
// and every one of httpapi.Roles, and nothing else, is accepted.
func TestTokenRolesAreHTTPAPIRoles(t *testing.T) {
	for _, r := range httpapi.Roles() {
		c := mustParse(t, "http:\n  tokens:\n    - {name: a, role: "+string(r)+", value_env: A_TOKEN}\n", map[string]string{"A_TOKEN": "s"})
		tok := httpapi.Token{Name: c.HTTP.Tokens[0].Name, Role: c.HTTP.Tokens[0].Role, Secret: c.HTTP.Tokens[0].Value}
		if tok.Role != r {
			t.Errorf("role %s parsed as %q", r, tok.Role)
		}
	}
	_, probs := config.Parse("test.yaml", []byte("http:\n  tokens:\n    - {name: a, role: boss, value_env: A_TOKEN}\n"), env(map[string]string{"A_TOKEN": "s"}))
	if len(probs) != 1 || !strings.Contains(probs[0].Message, `unknown value "boss"; one of admin, producer, worker, metrics`) {
		t.Errorf("problems %v", probs)
	}
}
