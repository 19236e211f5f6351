package runwrap

import (
	"fmt"
	"io"
)

// Exit codes of a run, for an outcome that has no exit code of its own: the
// wrapper failed, or the command timed out.
const (
	ExitWrapperError = 125
	ExitTimeout      = 124
)

// wrapperFailed reports a failure of airlock-init itself on stderr.
func wrapperFailed(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "airlock-init: %v\n", err)
	return ExitWrapperError
}
