package pid1link

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// keyPrefix names the key's algorithm in its string form, so another one can follow without ambiguity.
const keyPrefix = "ed25519:"

// serverName is what the certificate names; the gateway checks the pinned key, not names.
const serverName = "airlock-pid1"

// Identity is PID 1's key pair and the self-signed certificate TLS presents for it.
type Identity struct {
	cert tls.Certificate
	pub  ed25519.PublicKey
}

// NewIdentity generates a fresh key pair.
func NewIdentity() (*Identity, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: serverName},
		DNSNames:     []string{serverName},
		// Validity is not checked (the key is pinned); a wide window keeps clock skew irrelevant.
		NotBefore:   now.Add(-24 * time.Hour),
		NotAfter:    now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("self-sign: %w", err)
	}
	return &Identity{cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, pub: pub}, nil
}

// PublicKey is the key's public half as published and recorded: "ed25519:" + base64 (standard, unpadded).
func (id *Identity) PublicKey() string { return FormatPublicKey(id.pub) }

// FormatPublicKey renders pub as PublicKey does.
func FormatPublicKey(pub ed25519.PublicKey) string {
	return keyPrefix + base64.RawStdEncoding.EncodeToString(pub)
}

// ParsePublicKey reads a key in PublicKey's form.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b64, ok := strings.CutPrefix(s, keyPrefix)
	if !ok {
		return nil, fmt.Errorf("supervisor key %q: want %s followed by base64", s, keyPrefix)
	}
	raw, err := base64.RawStdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("supervisor key: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("supervisor key: %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// alpn names this protocol in the TLS handshake, so a peer speaking anything else fails there.
const alpn = "airlock-pid1/1"

// ServerTLS is PID 1's side: TLS 1.3 only, its own certificate, no client certificate (the gateway is
// authenticated by the API server's pods/exec authorization; PID 1 serves only clients the container runtime
// exec'd, never a command).
func ServerTLS(id *Identity) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		NextProtos:   []string{alpn},
	}
}

// ErrWrongKey is a server that does not hold the pinned key.
var ErrWrongKey = errors.New("the sandbox's supervisor did not prove the key recorded for it")

// ClientTLS is the gateway's side: it accepts exactly the server whose certificate carries pin. The chain is
// not verified against any CA (there is none): the pin is the whole trust decision.
func ClientTLS(pin ed25519.PublicKey) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{alpn},
		ServerName:         serverName,
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection's key pin
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return ErrWrongKey
			}
			got, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
			if !ok || !bytes.Equal(got, pin) {
				return ErrWrongKey
			}
			if cs.NegotiatedProtocol != alpn {
				return fmt.Errorf("the sandbox's supervisor speaks %q, not %s", cs.NegotiatedProtocol, alpn)
			}
			return nil
		},
	}
}
