package child

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChildDiesWithParent runs an intermediate process (this test binary again) that starts `sleep` with
// DieWithParent and is then SIGKILLed, as `go test -timeout` would kill a test binary: the sleep must die too.
// Without DieWithParent the sleep is reparented and keeps running (checked once by removing the call).
func TestChildDiesWithParent(t *testing.T) {
	if os.Getenv("CHILD_TEST_PARENT") == "1" {
		c := DieWithParent(exec.Command("sleep", "600"))
		if err := c.Start(); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(strconv.Itoa(c.Process.Pid) + "\n")
		time.Sleep(time.Hour)
		return
	}
	parent := exec.Command(os.Args[0], "-test.run", "^TestChildDiesWithParent$")
	parent.Env = append(os.Environ(), "CHILD_TEST_PARENT=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := DieWithParent(parent).Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatalf("reading the grandchild's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("grandchild pid %q: %v", buf[:n], err)
	}
	_ = parent.Process.Kill()
	_ = parent.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// A zombie or a missing process both count as dead; the grandchild is reparented and reaped by init.
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("sleep (pid %d) outlived its killed parent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
