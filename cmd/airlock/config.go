package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"airlock.dev/airlock/pkg/client"
)

// gatewayFlags say where the gateway is and which key to use: flags, else the environment, else the login
// file.
type gatewayFlags struct {
	url, key, configFile string
}

// loginConfig is the login file: JSON, mode 0600 (it holds the key).
type loginConfig struct {
	APIURL string `json:"api_url"`
	APIKey string `json:"api_key"`
}

// defaultConfigPath is $XDG_CONFIG_HOME/airlock/config.json (os.UserConfigDir).
func defaultConfigPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory for the login file (set --config): %w", err)
	}
	return filepath.Join(dir, "airlock", "config.json"), nil
}

func defaultConfigHint() string {
	if p, err := defaultConfigPath(); err == nil {
		return p
	}
	return "$XDG_CONFIG_HOME/airlock/config.json"
}

func (g *gatewayFlags) path() (string, error) {
	if g.configFile != "" {
		return g.configFile, nil
	}
	return defaultConfigPath()
}

// resolve fills URL and key from the flags, the environment and the login file, in that order.
func (g *gatewayFlags) resolve() (url, key string, err error) {
	url, key = g.url, g.key
	if url == "" {
		url = os.Getenv("AIRLOCK_API_URL")
	}
	if key == "" {
		key = os.Getenv("AIRLOCK_API_KEY")
	}
	if url != "" && key != "" {
		return url, key, nil
	}
	p, err := g.path()
	if err != nil {
		return "", "", err
	}
	raw, err := os.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", "", fmt.Errorf("reading the login file: %w", err)
	default:
		var cfg loginConfig
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return "", "", fmt.Errorf("the login file %s is not valid JSON (run 'airlock login' again): %w", p, err)
		}
		if url == "" {
			url = cfg.APIURL
		}
		if key == "" {
			key = cfg.APIKey
		}
	}
	if url == "" {
		return "", "", errors.New("no gateway URL: run 'airlock login --api-url URL --api-key KEY', or set AIRLOCK_API_URL " +
			"(e.g. after 'kubectl -n airlock-system port-forward svc/airlock-gateway 8080:80': http://localhost:8080)")
	}
	if key == "" {
		return "", "", errors.New("no API key: run 'airlock login --api-key KEY' or set AIRLOCK_API_KEY; " +
			"an operator creates one with 'airlock keys create --tenant TENANT'")
	}
	return url, key, nil
}

// client returns the gateway client.
func (g *gatewayFlags) client() (*client.Client, error) {
	url, key, err := g.resolve()
	if err != nil {
		return nil, err
	}
	return client.New(client.Options{BaseURL: url, APIKey: key})
}

func newLoginCmd(g *gatewayFlags, s streams) *cobra.Command {
	var check bool
	c := &cobra.Command{
		Use:   "login --api-url URL --api-key KEY",
		Short: "Save the gateway URL and API key for later commands",
		Long: `Save the gateway URL and API key in the login file (` + defaultConfigHint() + `, mode 0600), after
checking that the gateway accepts the key. AIRLOCK_API_URL and AIRLOCK_API_KEY, and --api-url and --api-key
on any command, take precedence over the file. Without --api-key, the key is read from stdin (so that it
stays out of the shell history).`,
		Example: `  airlock login --api-url http://localhost:8080 --api-key alk_...
  airlock keys create --tenant team-a | airlock login --api-url http://localhost:8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := loginConfig{APIURL: g.url, APIKey: g.key}
			if cfg.APIURL == "" {
				cfg.APIURL = os.Getenv("AIRLOCK_API_URL")
			}
			if cfg.APIURL == "" {
				return usagef("login needs --api-url (the gateway's URL, e.g. http://localhost:8080)")
			}
			if cfg.APIKey == "" {
				var line string
				if _, err := fmt.Fscanln(s.in, &line); err != nil {
					return usagef("login needs --api-key, or the key on stdin")
				}
				cfg.APIKey = strings.TrimSpace(line)
			}
			if check {
				c, err := client.New(client.Options{BaseURL: cfg.APIURL, APIKey: cfg.APIKey})
				if err != nil {
					return err
				}
				if _, err := c.List(cmd.Context()); err != nil {
					return fmt.Errorf("the gateway refused the login (nothing saved): %w", explain(err))
				}
			}
			p, err := g.path()
			if err != nil {
				return err
			}
			if err := writeConfig(p, cfg); err != nil {
				return err
			}
			fmt.Fprintf(s.errOut, "logged in to %s; saved in %s\n", cfg.APIURL, p)
			return nil
		},
	}
	c.Flags().BoolVar(&check, "check", true, "check the key against the gateway before saving")
	return c
}

// writeConfig writes the login file atomically with mode 0600, its directory 0700.
func writeConfig(p string, cfg loginConfig) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("creating the config directory: %w", err)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".config-*.json")
	if err != nil {
		return fmt.Errorf("writing the login file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the login file: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the login file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the login file: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("writing the login file: %w", err)
	}
	return nil
}
