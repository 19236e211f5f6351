package podexec

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
	// The kernel's OOM kill inside the container's cgroup (runc), of the command or of a shell's child.
	for _, tr := range []*runwrap.Trailer{{ExitCode: -1, Signal: "SIGKILL", OOMKills: 1}, {ExitCode: 137, OOMKills: 1}} {
		res := &Result{}
		e.classify(context.Background(), logr.Discard(), &Request{}, res, tr, nil, nil, time.Now())
		if res.Outcome != OutcomeOOM || hook.calls != 0 {
			t.Errorf("%+v: got %+v", tr, res)
		}
	}
	res = &Result{}
	e.classify(context.Background(), logr.Discard(), &Request{}, res, &runwrap.Trailer{ExitCode: 137}, nil, nil, time.Now())
	if res.Outcome != OutcomeExited {
		t.Errorf("exit 137 without an OOM kill is exited, got %+v", res)
	}
}
