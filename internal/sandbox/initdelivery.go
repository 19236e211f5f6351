package sandbox

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
)

// InitDelivery is how a pod whose template does not say its image holds airlock-init (init: Volume) gets it
// from the init image: the operator's --init-delivery.
type InitDelivery string

const (
	// InitDeliveryAuto mounts the init image as an image volume where the API server and every node offer
	// image volumes, and copies it otherwise.
	InitDeliveryAuto InitDelivery = "auto"
	// InitDeliveryImageVolume mounts the init image read-only as an image volume (Kubernetes 1.35+ with the
	// ImageVolume feature on, containerd 2.1+ or CRI-O 1.31+).
	InitDeliveryImageVolume InitDelivery = "image-volume"
	// InitDeliveryCopy runs the init image as an init container that copies airlock-init into an emptyDir,
	// mounted read-only into the sandbox container: any Kubernetes, any runtime, one container start more.
	InitDeliveryCopy InitDelivery = "copy"
)

// ParseInitDelivery checks an --init-delivery value.
func ParseInitDelivery(s string) (InitDelivery, error) {
	switch d := InitDelivery(s); d {
	case InitDeliveryAuto, InitDeliveryImageVolume, InitDeliveryCopy:
		return d, nil
	}
	return "", fmt.Errorf("%q is not auto, image-volume or copy", s)
}

// Image volumes are on by default from Kubernetes 1.35 (API server and kubelet); containerd serves them from
// 2.1, CRI-O from 1.31.
var (
	minImageVolumeKubernetes = version.MustParseGeneric("1.35.0")
	minImageVolumeRuntime    = map[string]*version.Version{"containerd": version.MustParseGeneric("2.1.0"), "cri-o": version.MustParseGeneric("1.31.0")}
)

// ImageVolumesUnavailable says why a pod with an image volume would not start on this cluster, "" if it would:
// the API server's version (discovery's gitVersion), then each node's kubelet and container runtime
// (status.nodeInfo). A version that cannot be read counts as too old: the copy works everywhere.
func ImageVolumesUnavailable(serverVersion string, nodes []corev1.Node) string {
	if !atLeast(serverVersion, minImageVolumeKubernetes) {
		return fmt.Sprintf("the API server is %s, and image volumes are on by default from Kubernetes %s", orUnknown(serverVersion), minImageVolumeKubernetes)
	}
	if len(nodes) == 0 {
		return "no node reports its kubelet and container runtime"
	}
	for i := range nodes {
		info := nodes[i].Status.NodeInfo
		if !atLeast(info.KubeletVersion, minImageVolumeKubernetes) {
			return fmt.Sprintf("node %s runs kubelet %s, and image volumes are on by default from Kubernetes %s", nodes[i].Name, orUnknown(info.KubeletVersion), minImageVolumeKubernetes)
		}
		name, v, _ := strings.Cut(info.ContainerRuntimeVersion, "://")
		floor, known := minImageVolumeRuntime[name]
		if !known {
			return fmt.Sprintf("node %s runs container runtime %q, which is not known to serve image volumes (containerd 2.1+ and CRI-O 1.31+ do)", nodes[i].Name, info.ContainerRuntimeVersion)
		}
		if !atLeast(v, floor) {
			return fmt.Sprintf("node %s runs %s %s, which serves image volumes from %s", nodes[i].Name, name, orUnknown(v), floor)
		}
	}
	return ""
}

// atLeast reports whether a version such as "v1.33.5-gke.100" or "2.1.4" is floor or newer; an unreadable one
// is not.
func atLeast(v string, floor *version.Version) bool {
	parsed, err := version.ParseGeneric(v)
	return err == nil && parsed.AtLeast(floor)
}

func orUnknown(v string) string {
	if v == "" {
		return "of unknown version"
	}
	return v
}
