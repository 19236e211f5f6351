# gVisor's containerd shim sets oom_score_adj -999 on itself and fails the whole sandbox when that write is
# refused. Machines without CAP_SYS_RESOURCE (this VM's bounding set) always refuse it, so treat a permission
# error as "keep the inherited score", as containerd's own helper already does for unprivileged callers.
s|if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {|if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil \&\& !os.IsPermission(err) { // airlock: tolerate EPERM|
