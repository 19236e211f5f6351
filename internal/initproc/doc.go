// Package initproc is what airlock-init does before and around the commands of a sandbox: as the sandbox
// container's PID 1 it first proves the runtime's and the network policy's isolation (gate.go), then keeps the
// container alive, reaps orphans and serves commands (pid1_linux.go).
package initproc
