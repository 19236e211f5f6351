// Package exec runs commands in sandbox pods over the pods/exec subresource
// and returns an outcome a model can rely on.
//
// Every command goes through the in-sandbox supervisor (package runwrap):
// the engine execs `airlock-init exec` with the request on stdin (never in
// the URL), and the sandbox's PID 1 enforces the timeout on the whole process
// tree, keeps the full output in files there, and ends stderr with a trailer
// carrying a per-call nonce. The trailer, not the exec status, is the source
// of truth: client-go reports an exec whose status never arrived as success.
// A call without a trailer asks PID 1 for the outcome (`airlock-init
// status`); only when none comes back is it sandbox_lost, never "exited 0".
//
// Output is kept per stream within a budget (a little head, mostly tail, and
// a marker line saying how much was omitted and which sandbox file has it
// all) in buffers that grow with the output up to the budget, never beyond,
// so memory does not grow with the output. The budget counts the text as
// returned (an invalid byte escaped as \xNN costs 4).
//
// Transports: WebSocket (v5 channel protocol, with stdin half-close) with
// SPDY fallback by default, like kubectl; either can be forced.
package exec
