// Package egressproxy is Airlock's egress proxy: an HTTP forward proxy (CONNECT for TLS, absolute-URI requests
// for plain HTTP) that Restricted sandboxes reach instead of the network. It lets a sandbox open connections
// only to the hosts on its own allowlist, identifies the sandbox by the connection's source IP (never by
// anything the sandbox sends), resolves names itself and refuses loopback, link-local, private and cluster
// addresses whatever a name resolves to.
package egressproxy
