// Package runwrap runs every command of a sandbox, from the sandbox's PID 1,
// so that the exec gateway gets an outcome it can trust from any image, and a
// timeout holds whatever the command does:
//
//   - The engine execs `airlock-init exec` (ExecMain), a thin client with a
//     fixed argv. The request (a Config: command, env, limits, a per-call id
//     and nonce) is one frame on its stdin (WriteFrame), never in argv or the
//     exec URL. The client makes itself undumpable, then hands the request and
//     its stdio descriptors (SCM_RIGHTS) to the Supervisor in PID 1 over an
//     abstract unix socket, and waits. PID 1 is the one process a command
//     cannot kill with kill -9 -1, so killing the client changes nothing.
//   - The Supervisor serves only clients: a peer whose parent chain leads to
//     PID 1 is a command or its orphan. It starts one keeper per run (itself
//     re-executed, see Reexec; undumpable before it receives the stream).
//   - The keeper is a child subreaper and runs the command in its own
//     session, so every process the command starts, including ones that
//     setsid() or double-fork, stays its descendant: "the command's tree" is
//     found by walking /proc parent links; nothing is matched by name. At the
//     timeout, on output over the limit, or when the stream breaks (EPIPE, a
//     write stalled past the stall timeout, or the engine cancels the run) the
//     tree gets SIGTERM (and SIGCONT), then SIGKILL after the grace. When the
//     command exits on its own, processes it left behind are killed the same
//     way unless KeepLeftovers is set.
//   - The command only holds pipes to its keeper, which tees them into
//     numbered files and the exec stream and then writes the trailer (see
//     Trailer) as the last bytes of stderr. The Supervisor creates those
//     pipes and keeps their read ends: if the command kills its keeper, the
//     Supervisor adopts the orphaned tree, forwards its further output, kills
//     it at the deadline and writes the trailer itself. It keeps recent outcomes by id, which
//     `airlock-init status` (StatusMain) reads back after a lost stream.
//   - PID 1's memory guard (MemoryGuard) polls the sandbox's memory and,
//     near the limit, SIGKILLs the largest command tree by RSS (through its
//     keeper, which marks the trailer's oom_guard), before the host's OOM
//     killer takes the whole sandbox (gVisor) or the kernel picks a victim.
package runwrap
