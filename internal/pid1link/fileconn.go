package pid1link

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// FileConn is a net.Conn over a pair of descriptors: in is read, out is written (an exec's stdin and stdout).
// Deadlines work where the descriptors can be polled (pipes, sockets); elsewhere they are ignored.
func FileConn(in, out *os.File) net.Conn { return &fileConn{in: in, out: out} }

type fileConn struct {
	in, out   *os.File
	closeOnce sync.Once
	closeErr  error
}

func (c *fileConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *fileConn) Write(p []byte) (int, error) { return c.out.Write(p) }

func (c *fileConn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = errors.Join(c.in.Close(), c.out.Close()) })
	return c.closeErr
}

func (c *fileConn) LocalAddr() net.Addr  { return stdioAddr{} }
func (c *fileConn) RemoteAddr() net.Addr { return stdioAddr{} }

func (c *fileConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

func (c *fileConn) SetReadDeadline(t time.Time) error {
	return ignoreNoDeadline(c.in.SetReadDeadline(t))
}
func (c *fileConn) SetWriteDeadline(t time.Time) error {
	return ignoreNoDeadline(c.out.SetWriteDeadline(t))
}

func ignoreNoDeadline(err error) error {
	if errors.Is(err, os.ErrNoDeadline) {
		return nil
	}
	return err
}

type stdioAddr struct{}

func (stdioAddr) Network() string { return "stdio" }
func (stdioAddr) String() string  { return "exec stdio" }
