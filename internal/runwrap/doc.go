// Package runwrap is the command wrapper that runs inside every sandbox
// container as `airlock-init run ...` (see Main). It exists so that the exec
// gateway gets an outcome it can trust from any image, with no daemon:
//
//   - The user's command runs in its own session and process group. Two
//     processes are involved: the "front" (the process the container runtime
//     exec'd, which the runtime may SIGKILL when the exec stream goes away) and
//     a re-executed "supervisor" child that does the work. The front holds the
//     write end of a lifeline pipe; when it dies for any reason the supervisor
//     reads EOF and kills the command's whole tree.
//   - Both processes are child subreapers (PR_SET_CHILD_SUBREAPER), so every
//     process the command starts — including ones that setsid() or
//     double-fork to escape the process group — stays a descendant of the
//     supervisor. "The command's tree" is therefore found robustly by walking
//     /proc parent links from the supervisor; nothing is matched by name or
//     start time, and nothing outside the tree is touched.
//   - At the timeout, on output over --max-output, when the stream breaks
//     (EPIPE, or a write stalled past --stall-timeout) or the front dies, the
//     tree gets SIGTERM (and SIGCONT), then SIGKILL after --grace. When the
//     command exits on its own, processes it left behind are killed the same
//     way unless --keep-leftovers is given.
//   - Full stdout and stderr are teed to numbered files (rotated) and a
//     trailer line with the caller's nonce ends stderr, so the caller can tell
//     a real exit status from a lost stream (see Trailer).
package runwrap
