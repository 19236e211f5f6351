package mcpserver

import (
	"context"
	"time"
	"unicode/utf8"

	"airlock.dev/airlock/pkg/client"
)

// Backend is what the tools act through, for one caller: the gateway's service layer in process
// (internal/gateway, for /mcp) or its REST API through pkg/client with the caller's key (ClientBackend, for
// `airlock mcp` on stdio). Its errors are *client.Error, or wrap one, so that errors.Is tells their kind
// (client.ErrNotFound, ...).
type Backend interface {
	// Create makes a sandbox and waits until it is Ready (or the gateway's ready timeout passes).
	Create(ctx context.Context, opts client.CreateOptions) (*client.Info, error)
	Get(ctx context.Context, id string) (*client.Info, error)
	List(ctx context.Context) ([]client.Info, error)
	// Delete deletes sandbox id; one already gone is client.ErrNotFound.
	Delete(ctx context.Context, id string) error
	// Exec runs cmd; a timeout is a result with client.ExitTimeout, as pkg/client reports it.
	Exec(ctx context.Context, id string, cmd Command) (*client.ExecResult, error)
	WriteFile(ctx context.Context, id, path, content string) error
	// ReadText returns the start of the text file path that fits maxText characters of JSON (FitText);
	// client.ErrInvalidRequest if that start is not UTF-8.
	ReadText(ctx context.Context, id, path string, maxText int) (*FileText, error)
}

// Command is what Backend.Exec runs: a shell command (sh -c) or an argv.
type Command struct {
	Shell string
	Argv  []string
	// Timeout kills the command's whole process tree (0: the gateway's default, 60 s).
	Timeout time.Duration
}

// FileText is the start of a text file.
type FileText struct {
	// Text is the file's first Shown bytes as text (scoped secrets masked).
	Text string
	// Size is the whole file's size in bytes; Size - Shown bytes are left out.
	Size, Shown int64
}

// ReadFileTextLimit is the most read_file returns, counted as JSON text: a character JSON escapes counts as
// its escape (\u0001 is six), since that is what the result holds, twice (as text and as structured content).
// A model rarely needs more of a file at once; run_command reads any part of it.
const ReadFileTextLimit = 64 << 10

// FitText returns the longest start of b that is whole UTF-8 characters and fits maxText characters of JSON,
// and how many bytes of b it is. token, if set, may stand for the bytes at b[i:]: it returns a text and how
// many bytes that text replaces (0: none), which are then shown as that text or not at all. more says b is
// cut short: a character cut at its end is then left out rather than invalid. ok is false when b is not
// UTF-8 before the cut.
func FitText(b []byte, maxText int, more bool, token func(b []byte, i int) (string, int)) (text string, n int, ok bool) {
	out := make([]byte, 0, min(len(b), maxText))
	cost := 0
	for n < len(b) && cost < maxText { // every character costs at least one
		if token != nil {
			if t, k := token(b, n); k > 0 {
				if cost+len(t) > maxText {
					break
				}
				out, cost, n = append(out, t...), cost+len(t), n+k
				continue
			}
		}
		r, size := utf8.DecodeRune(b[n:])
		if r == utf8.RuneError && size <= 1 {
			if more && !utf8.FullRune(b[n:]) {
				break
			}
			return "", n, false
		}
		c := jsonTextLen(r, size)
		if cost+c > maxText {
			break
		}
		out, cost, n = append(out, b[n:n+size]...), cost+c, n+size
	}
	return string(out), n, true
}

// JSONTextLen is how many characters JSON takes for s's text (without quotes), HTML escaping included.
func JSONTextLen(s string) int {
	n := 0
	for _, r := range s {
		if r == utf8.RuneError {
			n += 6 // an invalid byte is encoded as \ufffd
			continue
		}
		n += jsonTextLen(r, utf8.RuneLen(r))
	}
	return n
}

// jsonTextLen is how many characters JSON takes for r (size bytes in UTF-8), HTML escaping included.
func jsonTextLen(r rune, size int) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}
