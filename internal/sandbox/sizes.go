package sandbox

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	airlockv1 "airlock.dev/airlock/api/v1alpha1"
)

// sizeTable is the one place sizes are defined (documented in docs/sizes.md). Requests are below limits because
// agent sandboxes idle most of their life between commands: CPU requests are a quarter of the limit, memory
// and disk requests half of it, so a node packs several times more sandboxes than it could if each reserved
// its peak. Limits are hard: a command over the memory limit is OOM-killed and reported as such.
var sizeTable = map[airlockv1.Size]struct {
	cpuRequest, cpuLimit, memRequest, memLimit, diskRequest, diskLimit, workdir string
}{
	airlockv1.SizeSmall:  {"250m", "1", "512Mi", "1Gi", "1Gi", "2Gi", "1Gi"},
	airlockv1.SizeMedium: {"500m", "2", "2Gi", "4Gi", "5Gi", "10Gi", "5Gi"},
	airlockv1.SizeLarge:  {"1", "4", "4Gi", "8Gi", "10Gi", "20Gi", "10Gi"},
}

// DefaultSize is the size of sandboxes and templates that name none.
const DefaultSize = airlockv1.SizeSmall

// Resources returns the requests and limits of a size, or the template's override for it.
func Resources(size airlockv1.Size, overrides *airlockv1.SizeResources) (corev1.ResourceRequirements, error) {
	if o := override(size, overrides); o != nil {
		return *o.DeepCopy(), nil
	}
	row, ok := sizeTable[size]
	if !ok {
		return corev1.ResourceRequirements{}, fmt.Errorf("unknown size %q: want small, medium or large", size)
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(row.cpuRequest),
			corev1.ResourceMemory:           resource.MustParse(row.memRequest),
			corev1.ResourceEphemeralStorage: resource.MustParse(row.diskRequest),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(row.cpuLimit),
			corev1.ResourceMemory:           resource.MustParse(row.memLimit),
			corev1.ResourceEphemeralStorage: resource.MustParse(row.diskLimit),
		},
	}, nil
}

// WorkdirLimit is the size limit of the working-directory volume of a size.
func WorkdirLimit(size airlockv1.Size) resource.Quantity {
	row, ok := sizeTable[size]
	if !ok {
		row = sizeTable[DefaultSize]
	}
	return resource.MustParse(row.workdir)
}

func override(size airlockv1.Size, o *airlockv1.SizeResources) *corev1.ResourceRequirements {
	if o == nil {
		return nil
	}
	switch size {
	case airlockv1.SizeSmall:
		return o.Small
	case airlockv1.SizeMedium:
		return o.Medium
	case airlockv1.SizeLarge:
		return o.Large
	}
	return nil
}
