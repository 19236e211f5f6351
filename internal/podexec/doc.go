// Package podexec runs commands in sandbox pods over the pods/exec subresource
// and returns an outcome a model can rely on.
//
// Every command goes through the in-sandbox supervisor (package runwrap):
// the engine execs `airlock-init connect`, whose stdin and stdout carry a
// session with the sandbox's PID 1 (package pid1link: TLS pinned to the key
// PID 1 attested, HTTP/2 inside). The request travels inside it, never in the
// URL; PID 1 enforces the timeout on the whole process tree, keeps the full
// output in files there, and ends the run's answer with its outcome. That
// outcome, not the exec status, is the source of truth: client-go reports an
// exec whose status never arrived as success. A run whose answer broke off
// asks PID 1 for the outcome on a new session; only when none comes back is
// it sandbox_lost, never "exited 0".
//
// Output is kept per stream within a budget (a little head, mostly tail, and
// a marker line saying how much was omitted and which sandbox file has it
// all) in buffers that grow with the output up to the budget, never beyond,
// so memory does not grow with the output. The budget counts the text as
// returned (an invalid byte escaped as \xNN costs 4).
//
// Transports: WebSocket (v5 channel protocol, with stdin half-close) with
// SPDY fallback by default, like kubectl; either can be forced.
package podexec
