// Package initproc is what airlock-init does before and around the commands of a sandbox: it keeps the sandbox
// container alive as its PID 1 and reaps orphans (pid1.go), and in the init container it installs itself for the
// sandbox container and holds the pod back until network isolation is in effect (setup.go).
package initproc
