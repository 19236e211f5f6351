//go:build !race

package egressproxy

const raceEnabled = false
