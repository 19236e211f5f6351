package exec

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"airlock.dev/airlock/internal/runwrap"
)

// A trailer from PID 1's memory guard is oom with the guard's detail, and
// the pod is not asked.
func TestClassifyOOMGuard(t *testing.T) {
	hook := &fakeOOM{}
	e := &Engine{opts: Options{OOMChecker: hook}}
	res := &Result{}
	tr := &runwrap.Trailer{ExitCode: -1, Signal: "SIGKILL", OOMKills: -1, OOMGuard: "the sandbox's memory guard killed it at 900 MiB used of 1024 MiB"}
	e.classify(context.Background(), logr.Discard(), &Request{}, res, tr, nil, nil, time.Now())
	if res.Outcome != OutcomeOOM || res.Detail != tr.OOMGuard || hook.calls != 0 {
		t.Fatalf("%+v (pod asked %d times)", res, hook.calls)
	}
}
