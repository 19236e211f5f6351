// Package sandbox turns a Sandbox (and its template) into the objects that realise it: the resolved
// settings, the Pod and the NetworkPolicy. Everything here is pure: no API calls, easy to test.
package sandbox
