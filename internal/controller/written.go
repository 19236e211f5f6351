package controller

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// writtenVersions remembers, per sandbox, the resourceVersion our last write of it returned, until the cache has
// caught up with it. A reconcile that reads an older copy (the claimed pod's watch event often comes before the
// Sandbox's own) would redo the work of the pass that wrote it and then fail to write with a conflict: in a
// burst of claims that was a third of all status writes. It waits for the watch event of our write instead.
//
// resourceVersions are compared as numbers, which the API server does not promise (they are etcd revisions
// here and in every release so far); one that does not parse is never called stale.
type writtenVersions struct {
	mu sync.Mutex
	m  map[types.NamespacedName]uint64
}

// record notes that we wrote the object at rv.
func (w *writtenVersions) record(key types.NamespacedName, rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[types.NamespacedName]uint64{}
	}
	if v > w.m[key] {
		w.m[key] = v
	}
}

// stale tells whether a copy at rv is older than our last write of it; a copy as new or newer ends the wait.
func (w *writtenVersions) stale(key types.NamespacedName, rv string) bool {
	v, err := strconv.ParseUint(rv, 10, 64)
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.m[key]
	if !ok {
		return false
	}
	if err == nil && v < last {
		return true
	}
	delete(w.m, key)
	return false
}

// forget drops the object's entry: it is gone.
func (w *writtenVersions) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}
