package gateway

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The answer to an output read holds no more than outputAnswerCost counts, whatever the bytes read: control
// bytes (6 bytes of JSON each), invalid bytes (a 3-byte U+FFFD each), short secret values shown as a longer
// [masked:NAME]. Fails with the former count (16 bytes per byte read): checked.
func TestOutputAnswerCostBoundsTheAnswer(t *testing.T) {
	const n = 4096
	secret := &masker{names: []string{"A_RATHER_LONG_SECRET_NAME"}, values: []string{"abcd"}, hold: 3, pending: map[string]string{}}
	outputs := map[string][]byte{
		"control bytes": bytes.Repeat([]byte{1}, n),
		"invalid bytes": bytes.Repeat([]byte{0xff}, n),
		"secret values": bytes.Repeat([]byte("abcd"), n/4),
		"text":          bytes.Repeat([]byte("a"), n),
	}
	for name, out := range outputs {
		for _, mask := range []*masker{{}, secret} {
			text, _ := readText(mask, out, 0, 0, n, n, false)
			var js bytes.Buffer
			enc := json.NewEncoder(&js)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(text); err != nil {
				t.Fatal(err)
			}
			held := 2 * int64(len(text)+js.Len()) // both streams
			if cost := outputAnswerCost(mask, n); held > cost {
				t.Errorf("%s (secrets %v): the answer holds %d bytes, counted %d", name, mask.names, held, cost)
			}
		}
	}
}
