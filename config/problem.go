package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a config: where it is and what is wrong.
type Problem struct {
	File string
	// Line and Column are 1-based; 0 when unknown: an environment variable
	// that overrides no key has no place in the file, and YAML syntax
	// errors come with a line only.
	Line, Column int
	// Key is the dotted path of the key, with map keys (type and
	// pipeline names) and list indexes as segments: pipelines.resize.type,
	// http.tokens.0.role. Empty when the problem is not about one key.
	Key     string
	Message string
}

// String formats p as "file:line:column: key: message", leaving out what p
// does not have.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Column)
		}
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// suggest returns ` (did you mean "x"?)` for the candidate closest to s,
// when one is close enough to be a likely typo, else "".
func suggest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := distance(strings.ToLower(s), c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(1, len(best)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// distance is the edit distance between a and b in bytes, counting a
// swap of neighbours as one edit (optimal string alignment).
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
