package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"

	"airlock.dev/airlock/pkg/client"
)

// listDir lists directory p of sandbox id (not recursive) with find, as pkg/client's Files.List does. A path
// that starts with "-" gets "./" first, so that find cannot take it for an option or an action (-delete).
func listDir(ctx context.Context, b Backend, id, p string) ([]client.FileInfo, error) {
	arg := p
	if strings.HasPrefix(arg, "-") {
		arg = "./" + arg
	}
	res, err := b.Exec(ctx, id, Command{Argv: []string{"find", arg, "-mindepth", "1", "-maxdepth", "1", "-printf", `%y\t%s\t%f\0`}})
	if err != nil {
		return nil, err
	}
	if res.Outcome != "exited" {
		return nil, &client.Error{Status: http.StatusBadGateway, Code: "sandbox_lost", Message: "find did not complete: " + res.Outcome + " " + res.Detail}
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(res.Stderr)
		if strings.Contains(msg, "No such file") {
			return nil, &client.Error{Status: http.StatusNotFound, Code: "not_found", Field: "path", Message: "path: " + p + " does not exist"}
		}
		return nil, &client.Error{Status: http.StatusConflict, Code: "conflict", Field: "path", Message: fmt.Sprintf("path: %s: exit %d: %s", p, res.ExitCode, msg)}
	}
	out := []client.FileInfo{}
	for _, rec := range strings.Split(strings.TrimSuffix(res.Stdout, "\x00"), "\x00") {
		parts := strings.SplitN(rec, "\t", 3)
		if len(parts) != 3 {
			continue
		}
		size, _ := strconv.ParseInt(parts[1], 10, 64)
		out = append(out, client.FileInfo{Name: parts[2], Path: path.Join(p, parts[2]), Type: parts[0], IsDir: parts[0] == "d", Size: size})
	}
	return out, nil
}
