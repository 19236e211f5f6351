// Package version holds the release version and the image names derived from it. The Makefile sets Version
// at link time (-X), so binaries and the images they reference always agree.
package version

// Version is the Airlock release, set with -ldflags "-X airlock.dev/airlock/internal/version.Version=...".
var Version = "0.1.0"

// ImageRepository is where Airlock's own images are named; locally built images live under localhost/.
var ImageRepository = "localhost/airlock"

// InitImage is the image holding /airlock-init for this release.
func InitImage() string { return ImageRepository + "/init:" + Version }

// InitProtocol is the contract between the manager and gateway and the airlock-init in a sandbox: PID 1's
// flags, its attestation and the session (pid1link, runwrap's calls). Bump it when any changes incompatibly. The
// manager passes it to PID 1 (--protocol), which refuses to start under another: an image that ships its own
// airlock-init (a template's init: Image) may hold one of another release. 2: sessions and attestation.
const InitProtocol = 2
