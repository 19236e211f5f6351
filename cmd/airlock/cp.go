package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"airlock.dev/airlock/pkg/client"
)

// remotePath splits ID:PATH; a local path with a colon is written ./a:b.
func remotePath(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.ContainsAny(id, `/\`) || p == "" {
		return "", "", false
	}
	return id, p, true
}

func newCpCmd(g *gatewayFlags, s streams) *cobra.Command {
	c := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox",
		Long: `Copy one file between this machine and a sandbox: 'cp LOCAL ID:PATH' uploads (parent directories are
created, the file is replaced atomically), 'cp ID:PATH LOCAL' downloads. A relative PATH is relative to the
sandbox's working directory. LOCAL - is stdin or stdout; a LOCAL directory, or a PATH ending in /, takes the
source's file name. Files only, up to the gateway's --max-file-bytes (16 MiB by default): for a directory,
tar it in the sandbox first.`,
		Example: `  airlock cp main.py sbx-7k2q9:/workspace/main.py
  airlock cp data.csv sbx-7k2q9:/workspace/
  airlock cp sbx-7k2q9:/workspace/out.json .
  airlock exec sbx-7k2q9 --sh 'tar czf /tmp/w.tgz -C /workspace .' && airlock cp sbx-7k2q9:/tmp/w.tgz w.tgz
  airlock cp sbx-7k2q9:report.txt - | less`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcID, srcPath, srcRemote := remotePath(args[0])
			dstID, dstPath, dstRemote := remotePath(args[1])
			if srcRemote == dstRemote {
				return usagef("one of SRC and DST must be ID:PATH and the other a local path")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if dstRemote {
				data, err := readLocal(s, args[0])
				if err != nil {
					return err
				}
				if strings.HasSuffix(dstPath, "/") {
					if args[0] == "-" {
						return usagef("uploading stdin needs a file name: %s:%sNAME", dstID, dstPath)
					}
					dstPath += filepath.Base(args[0])
				}
				sbx, err := c.Connect(ctx, dstID)
				if err != nil {
					return explain(err)
				}
				if err := sbx.Files.Write(ctx, dstPath, data); err != nil {
					return fmt.Errorf("%s:%s: %w", dstID, dstPath, err)
				}
				fmt.Fprintf(s.errOut, "copied %d bytes to %s:%s\n", len(data), dstID, dstPath)
				return nil
			}
			sbx, err := c.Connect(ctx, srcID)
			if err != nil {
				return explain(err)
			}
			data, err := sbx.Files.Read(ctx, srcPath)
			if errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("%s:%s: no such file (list the directory with 'airlock exec %s -- ls -la DIR'): %w", srcID, srcPath, srcID, err)
			}
			if err != nil {
				return explain(err)
			}
			if args[1] == "-" {
				_, err := s.out.Write(data)
				return err
			}
			dst := args[1]
			if st, err := os.Stat(dst); err == nil && st.IsDir() {
				dst = filepath.Join(dst, path.Base(srcPath))
			}
			if err := os.WriteFile(dst, data, 0o644); err != nil {
				return fmt.Errorf("writing %s: %w", dst, err)
			}
			fmt.Fprintf(s.errOut, "copied %d bytes to %s\n", len(data), dst)
			return nil
		},
	}
	return c
}

func readLocal(s streams, p string) ([]byte, error) {
	if p == "-" {
		b, err := io.ReadAll(s.in)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return b, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, usagef("%s is a directory: cp copies files; tar it first (tar czf d.tgz %s)", p, p)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return b, nil
}
