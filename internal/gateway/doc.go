// Package gateway is Airlock's HTTP API for agents: create, list, extend and delete sandboxes, run commands in
// them (whole or streamed as NDJSON) and move files in and out. Each bearer key belongs to one tenant, and a
// tenant is a namespace: every call is scoped to it, so another tenant's sandbox is simply not found.
//
// The REST handlers and MCP's tools (/mcp) call one service layer (service*.go), which holds the rules: tenancy,
// rates, slots, the memory budget, audit, activity and the masking of scoped secrets.
//
// Commands go through internal/podexec (pods/exec plus the in-sandbox wrapper); nothing runs in the image but
// the wrapper and, for files, a few standard tools (see files.go).
package gateway
