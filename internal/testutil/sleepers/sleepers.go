// Package sleepers finds `sleep ARG` processes by a unique ARG, so tests can check that a command's whole
// process tree really died. Only test code imports it.
package sleepers

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Unique returns a sleep argument no other process uses; such sleeps are killed when the test ends, whatever
// its outcome.
func Unique(t testing.TB) string {
	s := fmt.Sprintf("%d.%06d", 900+rand.IntN(99), rand.IntN(1000000))
	t.Cleanup(func() {
		for _, pid := range List(s) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return s
}

// List returns the live (non-zombie) `sleep arg` processes.
func List(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Equal(b, []byte("sleep\x00"+arg+"\x00")) {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(st, ')'); err == nil && i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// WaitNone waits until no `sleep arg` is alive, failing the test after d.
func WaitNone(t testing.TB, arg string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(List(arg)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sleep %s still running after %v: %v", arg, d, List(arg))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitCount waits until at least n `sleep arg` are alive, failing the test after 10 s.
func WaitCount(t testing.TB, arg string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(List(arg)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("want %d `sleep %s`, have %v", n, arg, List(arg))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
