package client

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultObservationChars is the per-stream character budget of FormatObservation.
const DefaultObservationChars = 4000

// ObservationOptions tune FormatObservation.
type ObservationOptions struct {
	// MaxChars is the per-stream budget in characters, tail kept (0: DefaultObservationChars; < 0: no limit).
	MaxChars int
}

var outcomeNotes = map[string]string{
	"timeout":      "the command ran out of time and was killed; the output is what it printed until then",
	"signal":       "the command was killed by a signal",
	"oom":          "the command was killed: the sandbox ran out of memory",
	"output_limit": "the command was killed: it printed more than the output limit",
	"sandbox_lost": "the sandbox stopped answering; the command's exit status is unknown",
}

// FormatObservation is the text a model should see for a command (docs/sdk.md gives the exact format, shared
// with the Python and TypeScript SDKs): exit code and duration, notes on anything cut, then the stderr tail
// and the stdout tail.
func FormatObservation(res *ExecResult, opts ObservationOptions) string {
	limit := opts.MaxChars
	if limit == 0 {
		limit = DefaultObservationChars
	}
	outcome := res.Outcome
	if outcome == "" {
		outcome = "exited"
	}
	code := res.ExitCode
	if outcome == "timeout" {
		code = ExitTimeout
	}
	lines := []string{fmt.Sprintf("exit_code: %d", code), fmt.Sprintf("duration_ms: %d", res.DurationMS)}
	if outcome != "exited" {
		if note, ok := outcomeNotes[outcome]; ok {
			lines = append(lines, "outcome: "+outcome+" ("+note+")")
		} else {
			lines = append(lines, "outcome: "+outcome)
		}
	}
	if res.Signal != "" {
		lines = append(lines, "signal: "+res.Signal)
	}
	if res.Detail != "" {
		lines = append(lines, "detail: "+res.Detail)
	}
	if res.OutputIncomplete {
		lines = append(lines, "note: part of the output was lost before it reached the gateway")
	}
	streams := []struct {
		name string
		text string
		info StreamTruncation
	}{{"stderr", res.Stderr, res.Truncation.Stderr}, {"stdout", res.Stdout, res.Truncation.Stdout}}
	sandboxCut := false
	for i := range streams {
		s := &streams[i]
		if s.info.Truncated {
			sandboxCut = true
			where := "the full " + s.name + " was not saved"
			if s.info.FullOutputPath != "" {
				where = "the full " + s.name + " is in " + s.info.FullOutputPath
			}
			lines = append(lines, fmt.Sprintf("note: the sandbox cut %s: %d bytes omitted; %s", s.name, s.info.OmittedBytes, where))
		}
		if n := utf8.RuneCountInString(s.text); limit > 0 && n > limit {
			omitted := n - limit
			s.text = fmt.Sprintf("[... %d characters omitted ...]\n", omitted) + tailRunes(s.text, limit)
			lines = append(lines, fmt.Sprintf("note: %s was shortened to its last %d characters (%d omitted)", s.name, limit, omitted))
		}
	}
	if res.Truncated && !sandboxCut {
		lines = append(lines, "note: the sandbox cut the output")
	}
	for _, s := range streams {
		if s.text == "" {
			lines = append(lines, s.name+": (empty)")
		} else {
			lines = append(lines, s.name+":\n"+strings.TrimSuffix(s.text, "\n"))
		}
	}
	return strings.Join(lines, "\n")
}

// tailRunes returns the last n characters of s.
func tailRunes(s string, n int) string {
	i := len(s)
	for ; n > 0 && i > 0; n-- {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
	}
	return s[i:]
}
