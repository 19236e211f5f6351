package runwrap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// outFiles are the numbered files one run tees its output into:
// <dir>/<n>.stdout and <dir>/<n>.stderr, n increasing across runs.
type outFiles struct {
	dir            string
	n              int
	stdout, stderr *os.File
}

// defaultOutDir is $HOME/.airlock/out, or /tmp/.airlock/out when HOME is
// unset or "/" (common for images running as an arbitrary UID).
func defaultOutDir() string {
	if h := os.Getenv("HOME"); h != "" && h != "/" {
		return filepath.Join(h, ".airlock", "out")
	}
	return filepath.Join(os.TempDir(), ".airlock", "out")
}

// openOutFiles claims the next number in dir. O_EXCL on the .stdout file makes
// concurrent runs pick distinct numbers.
func openOutFiles(dir string) (*outFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create output dir: %w", err)
	}
	nums, err := outNumbers(dir)
	if err != nil {
		return nil, err
	}
	n := 1
	if len(nums) > 0 {
		n = nums[len(nums)-1] + 1
	}
	for tries := 0; tries < 1000; tries, n = tries+1, n+1 {
		o := &outFiles{dir: dir, n: n}
		o.stdout, err = os.OpenFile(o.path("stdout"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create stdout file: %w", err)
		}
		o.stderr, err = os.OpenFile(o.path("stderr"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			_ = o.stdout.Close()
			return nil, fmt.Errorf("create stderr file: %w", err)
		}
		return o, nil
	}
	return nil, errors.New("no free output file number")
}

func (o *outFiles) path(stream string) string {
	return filepath.Join(o.dir, strconv.Itoa(o.n)+"."+stream)
}

func (o *outFiles) close() error {
	return errors.Join(o.stdout.Close(), o.stderr.Close())
}

// outNumbers lists the run numbers present in dir, ascending.
func outNumbers(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list output dir: %w", err)
	}
	seen := map[int]bool{}
	for _, e := range ents {
		base, ext, ok := strings.Cut(e.Name(), ".")
		if !ok || (ext != "stdout" && ext != "stderr") {
			continue
		}
		if n, err := strconv.Atoi(base); err == nil && n > 0 {
			seen[n] = true
		}
	}
	nums := make([]int, 0, len(seen))
	for n := range seen {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	return nums, nil
}

// rotateOutFiles deletes all but the newest keep runs' files.
func rotateOutFiles(dir string, keep int) error {
	nums, err := outNumbers(dir)
	if err != nil || len(nums) <= keep {
		return err
	}
	var errs []error
	for _, n := range nums[:len(nums)-keep] {
		for _, s := range []string{"stdout", "stderr"} {
			if err := os.Remove(filepath.Join(dir, strconv.Itoa(n)+"."+s)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
