// Package auth holds the gateway's bearer API keys: their format, how they are stored hashed in Secrets, and
// an informer-backed store that authenticates requests without calling the API server.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeyPrefix starts every key, so that leaked keys are easy to recognise and scan for.
const KeyPrefix = "alk"

// A key is "alk_<id>_<secret>": the id names the Secret that holds the key's hash (it is not secret), the
// secret is 256 random bits. Only the SHA-256 of the whole key is stored.
const (
	idLen     = 10
	secretLen = 43 // base64url of 32 bytes
)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewKey returns a fresh key and its id.
func NewKey() (key, id string, err error) {
	raw := make([]byte, 32+idLen)
	if _, err := rand.Read(raw); err != nil {
		return "", "", fmt.Errorf("random key: %w", err)
	}
	id = idEncoding.EncodeToString(raw[32:])[:idLen]
	key = KeyPrefix + "_" + id + "_" + base64.RawURLEncoding.EncodeToString(raw[:32])
	return key, id, nil
}

// ErrMalformedKey is returned for strings that cannot be a key.
var ErrMalformedKey = errors.New("malformed API key")

// ParseKey returns the key's id after checking its shape.
func ParseKey(key string) (id string, err error) {
	rest, ok := strings.CutPrefix(key, KeyPrefix+"_")
	if !ok || len(rest) != idLen+1+secretLen || rest[idLen] != '_' {
		return "", ErrMalformedKey
	}
	id = rest[:idLen]
	if !ValidID(id) {
		return "", ErrMalformedKey
	}
	if _, err := base64.RawURLEncoding.DecodeString(rest[idLen+1:]); err != nil {
		return "", ErrMalformedKey
	}
	return id, nil
}

// ValidID reports whether id looks like a key id.
func ValidID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// HashKey is the stored form of a key: hex SHA-256.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// hashMatches compares in constant time, so response timing says nothing about how much of a guess was right.
func hashMatches(key, storedHex string) bool {
	stored, err := hex.DecodeString(storedHex)
	if err != nil || len(stored) != sha256.Size {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(sum[:], stored) == 1
}
