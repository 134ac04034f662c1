package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Everything the commands print for people goes through printf, which
// shows the control characters of the text it prints escaped: job ids,
// keys, data, results, errors and progress are anyone's text (a worker's
// error, an enqueuer's data), and an escape sequence in one would reach
// the operator's terminal, which acts on it (sets the window's title,
// clears the screen, moves the cursor over earlier lines), and a bidi
// override would show a line other than it is. JSON output (--json) is
// JSON, with those characters as \u escapes (jsonText).

// printf writes to w what fmt.Fprintf would, with each argument that is
// text (a string or a type of one, bytes, an error, a fmt.Stringer)
// passed through printable first. format is the command's own (a
// constant) and is written as it is.
func printf(w io.Writer, format string, args ...any) {
	for i, a := range args {
		args[i] = printableArg(a)
	}
	fmt.Fprintf(w, format, args...)
}

func printableArg(a any) any {
	switch v := a.(type) {
	case nil:
		return a
	case string:
		return printable(v)
	case []byte:
		return printable(string(v))
	case json.RawMessage:
		return printable(string(v))
	case error:
		return printable(v.Error())
	case fmt.Stringer:
		return printable(v.String())
	}
	switch rv := reflect.ValueOf(a); {
	case rv.Kind() == reflect.String:
		return printable(rv.String())
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
		return printable(string(rv.Bytes()))
	}
	return a
}

// printable returns s with the characters a terminal would act on shown
// as Go escapes them in a quoted string: the C0 controls (newline and tab
// too: \n, \t, \x1b), DEL and the C1 controls (\x7f, \u009b), the bidi
// controls (\u202e, \u2066, …) and each byte that is not UTF-8 (\xff).
// Everything else, a backslash too, is left as it is, so an id without
// such characters prints as it is typed.
func printable(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || unsafeRune(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unsafeRune(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// jsonText returns JSON that encoding/json wrote with the characters
// printable escapes that are not ASCII (C1, bidi) and DEL as \u escapes:
// the same JSON value, which a terminal shows as text. encoding/json
// escapes the C0 controls in strings itself, and outside strings JSON is
// ASCII (a newline or tab there is its indentation).
func jsonText(b []byte) []byte {
	if !bytes.ContainsFunc(b, jsonUnsafe) {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if jsonUnsafe(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

func jsonUnsafe(r rune) bool { return r >= 0x7f && unsafeRune(r) }

// unsafeRune reports whether r is a control character (C0, DEL, C1) or a
// bidi control (the embeddings, overrides and isolates, and the marks).
func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
