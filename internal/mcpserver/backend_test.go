package mcpserver

import (
	"strings"
	"testing"
)

// FitText keeps the longest start of a file whose JSON fits the limit: escapes count as what they become, a
// character is never cut, a token stands for its bytes whole or not at all, and only bytes before the cut
// must be UTF-8.
func TestFitText(t *testing.T) {
	mask := func(b []byte, i int) (string, int) {
		if strings.HasPrefix(string(b[i:]), "SECRET") {
			return "[masked:S]", len("SECRET")
		}
		return "", 0
	}
	for _, tc := range []struct {
		name    string
		in      string
		max     int
		more    bool
		token   func([]byte, int) (string, int)
		text    string
		n       int
		notUTF8 bool
	}{
		{name: "whole", in: "abc", max: 10, text: "abc", n: 3},
		{name: "cut", in: "abcdef", max: 4, text: "abcd", n: 4},
		{name: "escapes count six", in: "\x01\x01\x01", max: 13, text: "\x01\x01", n: 2},
		{name: "newline counts two", in: "a\nb", max: 3, text: "a\n", n: 2},
		{name: "html counts six", in: "<<", max: 11, text: "<", n: 1},
		{name: "character not cut", in: "aé", max: 2, text: "a", n: 1},
		{name: "character cut by the read", in: "a\xc3", max: 10, more: true, text: "a", n: 1},
		{name: "character cut by the file's end", in: "a\xc3", max: 10, notUTF8: true, n: 1},
		{name: "invalid before the cut", in: "ab\xffc", max: 10, notUTF8: true, n: 2},
		{name: "invalid after the cut", in: "ab\xffc", max: 2, text: "ab", n: 2},
		{name: "token fits", in: "xSECRETy", max: 20, token: mask, text: "x[masked:S]y", n: 8},
		{name: "token does not fit", in: "xSECRETy", max: 8, token: mask, text: "x", n: 1},
	} {
		text, n, ok := FitText([]byte(tc.in), tc.max, tc.more, tc.token)
		if ok == tc.notUTF8 || n != tc.n || ok && text != tc.text {
			t.Errorf("%s: FitText(%q, %d) = %q, %d, %v; want %q, %d, UTF-8 %v", tc.name, tc.in, tc.max, text, n, ok, tc.text, tc.n, !tc.notUTF8)
		}
	}
}

func TestJSONTextLen(t *testing.T) {
	for in, want := range map[string]int{"abc": 3, "a\"b": 4, "\x01": 6, "é": 2, "<&>": 18, "\xff": 6, "\u2028": 6} {
		if got := JSONTextLen(in); got != want {
			t.Errorf("JSONTextLen(%q) = %d, want %d", in, got, want)
		}
	}
}
