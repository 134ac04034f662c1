package fdbq

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzComparableText: data that comparableText passes decodes to strings
// with a U+FFFD only where the text has one (as the character or as
// \ufffd), so the digest of unique data never merges distinct strings.
func FuzzComparableText(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\udfff"`, "\"\xff\"", `"\ud83d\ude42"`, `"\\ud800"`, `{"\ud800":1}`,
		`["\ud83d\u0041"]`, `"\ufffd"`, `"�"`, `"\\\ud800"`, `"\ud83d\ude42\ud83d"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if json.Unmarshal(b, &v) != nil {
			return
		}
		if !comparableText(b) {
			return
		}
		hasFFFD := bytes.ContainsRune(b, '\uFFFD') || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`))
		if !hasFFFD && holdsFFFD(v) {
			t.Fatalf("comparableText passed %q, which decodes to a U+FFFD it does not hold", b)
		}
	})
}

func holdsFFFD(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, '\uFFFD')
	case []any:
		for _, e := range v {
			if holdsFFFD(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, '\uFFFD') || holdsFFFD(e) {
				return true
			}
		}
	}
	return false
}
