// Command release builds and pushes Airlock's release images; hack/release.sh runs it for `make release` and
// `make push`.
//
//	release image --name NAME --version V --out DIR --binary linux/amd64=PATH --binary linux/arm64=PATH [-- ARGS...]
//	    one static Go binary per platform, each on an empty base, as a multi-arch OCI image layout in DIR
//	release wrap --name NAME --version V --out DIR --image linux/amd64=OCI.tar [--image linux/arm64=OCI.tar]
//	    images already built (hack/images.sh's OCI tarballs, one image each) joined into one multi-arch layout
//	release push --images DIR --registry HOST[:PORT]/PATH [--plain-http] --out digests.json
//	    every layout under DIR pushed as REGISTRY/NAME:VERSION (its index and all its images); digests recorded
//	release pin-chart --chart DIR --digests digests.json --out DIR
//	    a copy of the chart whose values name the pushed images by registry and digest
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: release image|wrap|push|pin-chart [flags] (see the package comment)")
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "image":
		err = runImage(args)
	case "wrap":
		err = runWrap(args)
	case "push":
		err = runPush(args)
	case "pin-chart":
		err = runPinChart(args)
	default:
		err = fmt.Errorf("unknown command %q: want image, wrap, push or pin-chart", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
