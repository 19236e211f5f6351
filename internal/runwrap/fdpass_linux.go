package runwrap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// SocketEnv overrides the supervisor's socket address (tests run several
// supervisors on one host). A leading "@" names an abstract socket.
const SocketEnv = "AIRLOCK_SUPERVISOR_SOCKET"

// DefaultSocket is the abstract socket PID 1 listens on. It is bound before
// any command runs and held until the container ends, so no command can
// take the name.
const DefaultSocket = "@airlock-supervisor"

func socketAddr() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocket
}

// sendFrameFiles writes v as a frame, then one byte carrying files
// (SCM_RIGHTS), so the receiver reads the frame exactly and the descriptors
// apart from it.
func sendFrameFiles(c *net.UnixConn, v any, files []*os.File) error {
	if err := WriteFrame(c, v); err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix([]byte{0}, oob, nil); err != nil {
		return fmt.Errorf("pass descriptors: %w", err)
	}
	return nil
}

// recvFrameFiles reads what sendFrameFiles wrote: at most maxFiles
// descriptors, received close-on-exec (net sets MSG_CMSG_CLOEXEC), so none
// leaks into a command by accident.
func recvFrameFiles(c *net.UnixConn, v any, maxFiles int) ([]*os.File, error) {
	if err := ReadFrame(c, v); err != nil {
		return nil, err
	}
	return recvFiles(c, maxFiles)
}

// recvFiles reads the descriptors that follow a frame sendFrameFiles wrote.
func recvFiles(c *net.UnixConn, maxFiles int) ([]*os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*max(maxFiles, 1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("receive descriptors: %w", err)
	}
	if n != 1 {
		return nil, errors.New("receive descriptors: connection closed")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "fd"+strconv.Itoa(fd)))
		}
	}
	if flags&unix.MSG_CTRUNC != 0 || len(files) > maxFiles {
		closeAll(files)
		return nil, errors.New("receive descriptors: too many")
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

// peerPID is the process that connected c (SO_PEERCRED, taken at connect).
func peerPID(c *net.UnixConn) (int, error) {
	sc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := sc.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("peer credentials: %w", serr)
	}
	return int(cred.Pid), nil
}

// setNotDumpable keeps same-uid processes (the commands) out of this
// process's memory, environment and descriptors in /proc, and out of ptrace.
func setNotDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
