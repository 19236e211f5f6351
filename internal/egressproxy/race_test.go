//go:build race

package egressproxy

// raceEnabled: the race detector's shadow memory makes a process's resident size no measure of its own.
const raceEnabled = true
