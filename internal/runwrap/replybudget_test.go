package runwrap

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A control reply is counted before it is read: ReserveReply gets the reply's length from its header, a refusal
// ends the call with that error, and an accepted length is the reply's exact size.
func TestControlReservesTheReplyBeforeReadingIt(t *testing.T) {
	p := startBackground(t, "echo budget; sleep 30", time.Minute)
	defer ctl(t, &Request{Op: OpKill, Config: Config{ID: p.ID}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	over := errors.New("over the budget")
	_, err := openSession(t, supervisorKey).Control(ctx, &Request{Op: OpList, ReserveReply: func(int) error { return over }})
	if !errors.Is(err, over) {
		t.Fatalf("a refused reservation: the call returned %v, want %v", err, over)
	}
	var counted int
	rep, err := openSession(t, supervisorKey).Control(ctx, &Request{Op: OpList, ReserveReply: func(n int) error { counted = n; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if counted != len(js) || len(rep.Processes) == 0 {
		t.Fatalf("counted %d bytes for a reply of %d listing %d runs", counted, len(js), len(rep.Processes))
	}
}

// A frame longer than the reader's limit is refused from its header, before its body is allocated or read.
func TestFrameOverTheLimitIsRefusedFromItsHeader(t *testing.T) {
	_, err := readFrameHeader(strings.NewReader(frameMagic+"5000000\n"), maxControlReply)
	if err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a 5 MB frame against a %d byte limit: %v", maxControlReply, err)
	}
	n, err := readFrameHeader(strings.NewReader(frameMagic+"12\n{}"), maxControlReply)
	if err != nil || n != 12 {
		t.Fatalf("a 12 byte frame: %d, %v", n, err)
	}
}
