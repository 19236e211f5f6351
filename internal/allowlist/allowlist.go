// Package allowlist parses and matches the host allowlists of Restricted sandboxes (network.allow): exact names
// and "*.suffix" wildcards, on ports 80 and 443 unless an entry names its port.
package allowlist

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultPorts are the ports an allowlist entry permits when it names none.
var DefaultPorts = []int{80, 443}

// List is a sandbox's permitted destinations: exact host names and "*.suffix" wildcards (which match
// names below the suffix, not the suffix itself), each on ports 80 and 443 unless it names one ("host:8443").
type List struct {
	entries []entry
}

type entry struct {
	// host is lower case without a trailing dot; for a wildcard it is ".suffix".
	host     string
	wildcard bool
	// port is 0 for DefaultPorts.
	port int
}

// Parse parses entries such as "pypi.org", "*.pythonhosted.org" or "registry.example:8443".
func Parse(items []string) (List, error) {
	var a List
	for _, it := range items {
		e, err := parseEntry(it)
		if err != nil {
			return List{}, err
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

func parseEntry(s string) (entry, error) {
	var e entry
	host := s
	if h, p, ok := strings.Cut(s, ":"); ok {
		port, err := strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return entry{}, fmt.Errorf("allowlist entry %q: port %q is not 1-65535", s, p)
		}
		host, e.port = h, port
	}
	host = NormalizeHost(host)
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, e.wildcard = "."+rest, true
	}
	if err := checkName(strings.TrimPrefix(host, ".")); err != nil {
		return entry{}, fmt.Errorf("allowlist entry %q: %w", s, err)
	}
	e.host = host
	return e, nil
}

// checkName accepts DNS names of letters, digits, hyphens and dots only: no IP literals (an allowlist names
// hosts; addresses are what the guard decides on) and nothing a matcher could read two ways.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("not a host name")
	}
	allDigits := true
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("%q is not a host name", name)
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r == '-':
				allDigits = false
			case r >= '0' && r <= '9':
			default:
				return fmt.Errorf("%q is not a host name", name)
			}
		}
	}
	if allDigits {
		return fmt.Errorf("%q is an address, not a host name", name)
	}
	return nil
}

// NormalizeHost lower-cases a host name and drops a trailing dot, so "PyPI.org." matches "pypi.org".
func NormalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// Permits reports whether host (a name as the client sent it) on port is on the list.
func (a List) Permits(host string, port int) bool {
	host = NormalizeHost(host)
	if checkName(host) != nil {
		return false
	}
	for _, e := range a.entries {
		if !e.portMatches(port) {
			continue
		}
		if e.wildcard && strings.HasSuffix(host, e.host) || !e.wildcard && host == e.host {
			return true
		}
	}
	return false
}

func (e entry) portMatches(port int) bool {
	if e.port != 0 {
		return port == e.port
	}
	return slices.Contains(DefaultPorts, port)
}

// Covers reports whether every destination entry s permits is also permitted by a: how a sandbox's list is
// checked against its template's, which it may narrow but not widen.
func (a List) Covers(s string) bool {
	e, err := parseEntry(s)
	if err != nil {
		return false
	}
	for _, t := range a.entries {
		portsCovered := e.port == t.port || t.port == 0 && slices.Contains(DefaultPorts, e.port)
		hostsCovered := t.wildcard && strings.HasSuffix(e.host, t.host) || !t.wildcard && !e.wildcard && e.host == t.host
		if portsCovered && hostsCovered {
			return true
		}
	}
	return false
}
