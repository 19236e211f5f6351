package podexec

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	amhttpstream "k8s.io/apimachinery/pkg/util/httpstream" //nolint:staticcheck // client-go's upgrader interface still returns this type
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// Protocol selects the exec transport.
type Protocol string

const (
	// ProtocolAuto tries WebSocket (v5 channel protocol) and falls back to
	// SPDY when the upgrade fails, as kubectl does.
	ProtocolAuto      Protocol = "auto"
	ProtocolSPDY      Protocol = "spdy"
	ProtocolWebSocket Protocol = "websocket"
)

// ShouldFallback reports whether a WebSocket attempt failed in a way that
// makes SPDY worth trying: the upgrade was refused, or an HTTPS proxy got in
// the way. It must use k8s.io/streaming's httpstream: since client-go v0.36
// the executors return that package's UpgradeFailureError, and the
// look-alike in k8s.io/apimachinery/pkg/util/httpstream never matches it.
func ShouldFallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// attempt records what happened on the way to a stream, so that the engine
// can tell "never started" from "started, then lost".
type attempt struct {
	fellBack      atomic.Bool // auto fell back to SPDY
	spdyConnected atomic.Bool // the SPDY upgrade succeeded
}

// connectedUpgrader notes a successful SPDY upgrade.
type connectedUpgrader struct {
	spdy.Upgrader
	a *attempt
}

// client-go's spdy.Upgrader still speaks apimachinery's httpstream types.
func (u connectedUpgrader) NewConnection(resp *http.Response) (amhttpstream.Connection, error) {
	c, err := u.Upgrader.NewConnection(resp)
	if err == nil {
		u.a.spdyConnected.Store(true)
	}
	return c, err
}

func newExecutor(cfg *rest.Config, p Protocol, u *url.URL, a *attempt) (remotecommand.Executor, error) {
	newSPDY := func() (remotecommand.Executor, error) {
		rt, up, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("spdy transport: %w", err)
		}
		return remotecommand.NewSPDYExecutorForTransports(rt, connectedUpgrader{up, a}, http.MethodPost, u)
	}
	// RFC 6455 requires GET for the WebSocket upgrade.
	newWS := func() (remotecommand.Executor, error) {
		ex, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
		if err != nil {
			return nil, fmt.Errorf("websocket transport: %w", err)
		}
		return ex, nil
	}
	switch p {
	case ProtocolSPDY:
		return newSPDY()
	case ProtocolWebSocket:
		return newWS()
	case ProtocolAuto, "":
		ws, err := newWS()
		if err != nil {
			return nil, err
		}
		sp, err := newSPDY()
		if err != nil {
			return nil, err
		}
		return remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
			fb := ShouldFallback(err)
			a.fellBack.Store(fb)
			return fb
		})
	}
	return nil, fmt.Errorf("unknown exec protocol %q", p)
}

// usedProtocol names the transport the call ended up on.
func usedProtocol(p Protocol, a *attempt) string {
	if p == ProtocolSPDY || a.fellBack.Load() {
		return string(ProtocolSPDY)
	}
	return string(ProtocolWebSocket)
}

// notStarted reports whether err shows that no exec session was ever
// established (refused upgrade, unreachable server), as opposed to a session
// that broke.
func notStarted(err error, usedSPDY bool, a *attempt) bool {
	if err == nil {
		return false
	}
	if usedSPDY && !a.spdyConnected.Load() {
		return true
	}
	var op *net.OpError
	return httpstream.IsUpgradeFailure(err) || (errors.As(err, &op) && op.Op == "dial")
}

// runtimeStartFailed reports whether the exec's status is the kubelet's
// report that the runtime did not start the process: our wrapper prints
// nothing before it runs, so with no output at all this means nothing ran.
func runtimeStartFailed(err error) bool {
	var ce utilexec.CodeExitError
	return err != nil && !errors.As(err, &ce) && strings.Contains(err.Error(), "failed to exec in container")
}

// forbidden reports whether a failed upgrade was the API server's 403: the
// WebSocket executor keeps the Status (inside an UpgradeFailureError, which
// does not unwrap), the SPDY one only its message ("pods "x" is forbidden:
// User "..." cannot create resource "pods/exec" ...").
func forbidden(err error) bool {
	var ue *httpstream.UpgradeFailureError
	if errors.As(err, &ue) && apierrors.IsForbidden(ue.Cause) {
		return true
	}
	return apierrors.IsForbidden(err) || strings.Contains(err.Error(), " is forbidden: ")
}

// notFound reports whether a failed upgrade was the API server's 404: the pod or its container is gone.
func notFound(err error) bool {
	var ue *httpstream.UpgradeFailureError
	if errors.As(err, &ue) && apierrors.IsNotFound(ue.Cause) {
		return true
	}
	return apierrors.IsNotFound(err) || strings.Contains(err.Error(), " not found")
}

// execURL is the pods/exec subresource URL for argv, with stdin: the request
// always travels there, never in the URL.
func execURL(cfg *rest.Config, r *Request, argv []string) (*url.URL, error) {
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("server url: %w", err)
	}
	u := *base
	u.Path = path.Join("/", base.Path, "api/v1/namespaces", r.Namespace, "pods", r.Pod, "exec")
	q := url.Values{"command": argv, "stdin": {"true"}, "stdout": {"true"}, "stderr": {"true"}}
	if r.Container != "" {
		q.Set("container", r.Container)
	}
	u.RawQuery = q.Encode()
	return &u, nil
}
