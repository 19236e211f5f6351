package runwrap

import (
	"fmt"
	"io"
)

// Exit codes of the wrapper itself. Otherwise it exits with the command's
// code, 128+N when the command died from signal N, and 124 on timeout, so that
// even a caller that ignores the trailer sees something sensible.
const (
	ExitWrapperError = 125
	ExitTimeout      = 124
)

// wrapperFailed reports a failure of the wrapper itself: a message, and a
// trailer when the nonce is usable so the caller need not guess.
func wrapperFailed(nonce string, stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "airlock-init: %v\n", err)
	if ValidNonce(nonce) {
		if t, ferr := FormatTrailer(nonce, Trailer{ExitCode: -1, OOMKills: -1, WrapperError: err.Error()}); ferr == nil {
			_, _ = stderr.Write(t)
		}
	}
	return ExitWrapperError
}
