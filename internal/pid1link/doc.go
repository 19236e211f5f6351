// Package pid1link is the authenticated channel between the exec gateway and a sandbox's PID 1.
//
// Everything the gateway trusts about a sandbox — a command's output and outcome, a background process's state,
// the answers to status queries — comes from PID 1 (airlock-init pid1), but it travels through processes that
// sandbox code could reach: the per-exec client runs as the sandbox user, and for a moment after execve (before
// it makes itself undumpable) any process of that user may open its /proc/<pid>/fd/* and so read and write the
// exec stream. Undumpability cannot close that window under gVisor (see docs/security.md), so the stream is
// made worthless to such a process instead:
//
//   - PID 1 generates an Ed25519 key (Identity) when it starts, before any command can exist, and publishes the
//     public half in its attestation (package attestation), which the controller records in the Sandbox's
//     status.supervisorKey.
//   - The gateway speaks TLS 1.3 over the exec's stdin and stdout and accepts only a server holding that key
//     (ClientTLS pins it); PID 1 terminates TLS itself (the client process only hands it the descriptors). A
//     process that reads the stream sees ciphertext, one that writes to it breaks the session, which the
//     gateway then reports as lost — it never believes a forged byte.
//   - Inside TLS, HTTP/2 multiplexes calls (a run, a control query) as independent streams with their own flow
//     control (Dial, Serve); a run's output comes back as typed frames (WriteFrame, ReadFrame).
package pid1link
