// Package jsontext finds what encoding/json would decode as U+FFFD in
// JSON text that does not say U+FFFD: bytes that are not UTF-8, and a \u
// escape of half a surrogate pair. Such text decodes to a string other
// than the one sent, and distinct texts decode alike.
package jsontext

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// StringProblem says what in the inside of a JSON string, s, encoding/json
// would decode as U+FFFD although s does not say U+FFFD, and at which byte
// of the decoded string; "" when nothing would. s is valid JSON: the
// decoder has read it.
func StringProblem(s []byte) string {
	at := 0 // the byte of the decoded string that s[i] makes
	for i := 0; i < len(s); {
		switch {
		case s[i] == '\\' && s[i+1] == 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if pair := utf16.DecodeRune(r, hex4(s[i+2:i+6])); pair != utf8.RuneError {
						i += 6
						at += utf8.RuneLen(pair)
						continue
					}
				}
				return fmt.Sprintf("has \\u%04x at byte %d, a surrogate without its pair, which is not Unicode", r, at)
			}
			at += utf8.RuneLen(r)
		case s[i] == '\\':
			i += 2
			at++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				return fmt.Sprintf("is not valid UTF-8 at byte %d", at)
			}
			i += n
			at += n
		}
	}
	return ""
}

// hex4 is the value of four hex digits.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Problem is StringProblem of the first string of the JSON text doc
// that has one, object member names included; "" when none has. doc is
// valid JSON.
func Problem(doc []byte) string {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '"' {
			continue
		}
		j := i + 1
		for j < len(doc) && doc[j] != '"' {
			if doc[j] == '\\' {
				j++
			}
			j++
		}
		if p := StringProblem(doc[i+1 : min(j, len(doc))]); p != "" {
			return p
		}
		i = j
	}
	return ""
}
