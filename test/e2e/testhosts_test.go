package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"airlock.dev/airlock/internal/testutil/child"
)

// Stand-ins for "the internet" and "the metadata server": test hosts in a network namespace that this test
// creates on this machine and removes afterwards. No traffic ever leaves the machine.
const (
	internetIP = "203.0.113.10"    // TEST-NET-3
	metadataIP = "169.254.169.254" // the usual cloud metadata address, answered here by our own netns
	hostsNetns = "airlock-e2e-inet"
	hostVeth   = "airlock-e2e-h"
	nsVeth     = "airlock-e2e-n"
	hostSideIP = "203.0.113.1"
)

// Set by `make test-e2e` from hack/local-cluster.sh: the policy-routing table for traffic from the pod bridge
// (containment: it otherwise blackholes everything), and the pod and node addresses.
var (
	podRouteTable = os.Getenv("AIRLOCK_E2E_POD_ROUTE_TABLE")
	podCIDR       = os.Getenv("AIRLOCK_E2E_POD_CIDR")
	nodeIP        = os.Getenv("AIRLOCK_E2E_NODE_IP")
)

// startTestHosts creates the netns hosts with an HTTP server on port 80 of both addresses, and routes only pod
// traffic (the containment table) to them; the host's own routes are untouched. Cleanup undoes exactly that.
func startTestHosts(t testing.TB) {
	t.Helper()
	if podRouteTable == "" || podCIDR == "" || nodeIP == "" {
		t.Fatal("AIRLOCK_E2E_POD_ROUTE_TABLE, AIRLOCK_E2E_POD_CIDR and AIRLOCK_E2E_NODE_IP must be set: run 'make test-e2e'")
	}
	var undo []func()
	t.Cleanup(func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	})
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	runUndo := func(do, un []string) {
		run(do...)
		undo = append(undo, func() { _ = exec.Command(un[0], un[1:]...).Run() })
	}
	// Forwarding between the pod bridge and our veth; restored to what it was.
	if v, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(v)) == "0" {
		runUndo([]string{"sysctl", "-qw", "net.ipv4.ip_forward=1"}, []string{"sysctl", "-qw", "net.ipv4.ip_forward=0"})
	}
	// Leftovers of an interrupted earlier run (our own names only) would make the adds below fail.
	_ = exec.Command("ip", "link", "del", hostVeth).Run()
	_ = exec.Command("ip", "netns", "del", hostsNetns).Run()
	runUndo([]string{"ip", "netns", "add", hostsNetns}, []string{"ip", "netns", "del", hostsNetns})
	// Deleting the link removes both ends at once; a netns deletion alone frees the pair only lazily.
	runUndo([]string{"ip", "link", "add", hostVeth, "type", "veth", "peer", "name", nsVeth, "netns", hostsNetns},
		[]string{"ip", "link", "del", hostVeth})
	run("ip", "addr", "add", hostSideIP+"/32", "dev", hostVeth)
	run("ip", "link", "set", hostVeth, "up")
	for _, ip := range []string{internetIP, metadataIP} {
		run("ip", "-n", hostsNetns, "addr", "add", ip+"/32", "dev", nsVeth)
	}
	run("ip", "-n", hostsNetns, "link", "set", "lo", "up")
	run("ip", "-n", hostsNetns, "link", "set", nsVeth, "up")
	run("ip", "-n", hostsNetns, "route", "add", hostSideIP+"/32", "dev", nsVeth)
	run("ip", "-n", hostsNetns, "route", "add", podCIDR, "via", hostSideIP, "dev", nsVeth)
	for _, ip := range []string{internetIP, metadataIP} {
		runUndo([]string{"ip", "route", "add", ip + "/32", "dev", hostVeth, "table", podRouteTable},
			[]string{"ip", "route", "del", ip + "/32", "dev", hostVeth, "table", podRouteTable})
	}
	server := child.DieWithParent(exec.Command("ip", "netns", "exec", hostsNetns, "python3", "-m", "http.server", "80", "--bind", "0.0.0.0"))
	if err := server.Start(); err != nil {
		t.Fatalf("starting the test hosts' HTTP server: %v", err)
	}
	undo = append(undo, func() { _ = server.Process.Kill(); _ = server.Wait() })
	eventually(t, 10*time.Second, "test hosts answer", func() error {
		out, err := exec.Command("ip", "netns", "exec", hostsNetns, "python3", "-c",
			fmt.Sprintf("import socket; socket.create_connection(('%s', 80), 1).close()", internetIP)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}
