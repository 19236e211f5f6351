package runwrap

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/sleepers"
)

func TestParseArgs(t *testing.T) {
	c, err := ParseArgs([]string{"--timeout", "1m30s", "--env", "A=1", "--env", "B=", "--cwd", "/w", "--no-stdin", "--", "ls", "-l", "--", "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{ID: c.ID, Timeout: 90 * time.Second, Grace: DefaultGrace, StallTimeout: DefaultStallTimeout,
		Cwd: "/w", Env: []string{"A=1", "B="}, Argv: []string{"ls", "-l", "--", "x"}, NoStdin: true, Keep: DefaultKeep}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	c, err = ParseArgs([]string{"--shell", "echo hi"})
	if err != nil || !reflect.DeepEqual(c.command(), []string{ShellPath, "-c", "echo hi"}) {
		t.Fatalf("%v %v", c.command(), err)
	}
	for _, bad := range [][]string{
		{},                           // no command
		{"--shell", "x", "--", "ls"}, // both
		{"--env", "NOEQUALS", "--", "ls"},
		{"--timeout", "-1s", "--", "ls"},
		{"--keep", "0", "--", "ls"},
		{"--", ""},
	} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) accepted", bad)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{"test-run-0000000000000001": true, "short": false, "with space 0123456789": false,
		strings.Repeat("a", 128): true, strings.Repeat("a", 129): false} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %t", id, got)
		}
		c := Config{ID: id, Keep: 1, Argv: []string{"true"}}
		if err := c.validate(); (err == nil) != want {
			t.Errorf("validate with id %q: %v", id, err)
		}
	}
}

func TestOutFilesNumberingAndRotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	for i := 1; i <= 5; i++ {
		o, err := openOutFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		if o.n != i {
			t.Fatalf("run %d got number %d", i, o.n)
		}
		_ = o.close()
	}
	if err := rotateOutFiles(dir, 2); err != nil {
		t.Fatal(err)
	}
	nums, _ := outNumbers(dir)
	if !reflect.DeepEqual(nums, []int{4, 5}) {
		t.Fatalf("kept %v", nums)
	}
	// A number taken by someone else is skipped.
	if err := os.WriteFile(filepath.Join(dir, "6.stdout"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if o, err := openOutFiles(dir); err != nil || o.n != 7 {
		t.Fatalf("%v %v", o, err)
	}
}

func TestRotationThroughWrapper(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	for i := 0; i < 4; i++ {
		r := runWrapper(t, nil, "--out-dir", dir, "--keep", "2", "--", "echo", "x")
		if r.trailer == nil || r.trailer.StdoutPath != filepath.Join(dir, []string{"1", "2", "3", "4"}[i]+".stdout") {
			t.Fatalf("run %d: %+v", i, r.trailer)
		}
	}
	nums, _ := outNumbers(dir)
	if !reflect.DeepEqual(nums, []int{3, 4}) {
		t.Fatalf("kept %v", nums)
	}
}

func TestParseOOMKill(t *testing.T) {
	v2 := "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	if n, ok := parseOOMKill([]byte(v2)); !ok || n != 2 {
		t.Fatalf("v2: %d %v", n, ok)
	}
	v1 := "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
	if n, ok := parseOOMKill([]byte(v1)); !ok || n != 5 {
		t.Fatalf("v1: %d %v", n, ok)
	}
	if _, ok := parseOOMKill([]byte("nothing here")); ok {
		t.Fatal("parsed garbage")
	}
}

func TestLiveDescendantsSeesOwnChild(t *testing.T) {
	s := sleepers.Unique(t)
	r := startRun(t, s, 1, "--timeout", "30s", "--", "sleep", s)
	defer statusOf(t, Request{Config: Config{ID: r.cfg.ID}, Cancel: true, Wait: 5 * time.Second})
	ds := liveDescendants(os.Getpid())
	found := false
	for _, pid := range ds {
		for _, p := range sleepers.List(s) {
			found = found || pid == p
		}
	}
	if !found {
		t.Fatalf("sleep %s not among descendants %v", s, ds)
	}
}
