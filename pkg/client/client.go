package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// BaseURL is the gateway's URL without /v1 (default $AIRLOCK_API_URL).
	BaseURL string
	// APIKey is the tenant's key, alk_... (default $AIRLOCK_API_KEY).
	APIKey string
	// HTTPClient sends the requests (default: a client without a timeout; every call takes a context).
	HTTPClient *http.Client
	// MaxRetries bounds the retries of a call the gateway refused with 429 or 503 (default 4; < 0: none).
	MaxRetries int
	// MaxBackoff caps the wait before one retry, also when Retry-After asks for more (default 30s).
	MaxBackoff time.Duration
}

// Client talks to one gateway with one key. It is safe for concurrent use.
type Client struct {
	base       string
	key        string
	hc         *http.Client
	maxRetries int
	maxBackoff time.Duration
}

// New returns a Client; it fails without a base URL or key.
func New(opts Options) (*Client, error) {
	if opts.BaseURL == "" {
		opts.BaseURL = os.Getenv("AIRLOCK_API_URL")
	}
	if opts.APIKey == "" {
		opts.APIKey = os.Getenv("AIRLOCK_API_KEY")
	}
	if opts.BaseURL == "" {
		return nil, errors.New("airlock: no gateway URL: set Options.BaseURL or AIRLOCK_API_URL")
	}
	if opts.APIKey == "" {
		return nil, errors.New("airlock: no API key: set Options.APIKey or AIRLOCK_API_KEY")
	}
	u, err := url.Parse(opts.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("airlock: gateway URL %q is not an http(s) URL", opts.BaseURL)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 4
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	return &Client{
		base: strings.TrimSuffix(strings.TrimSuffix(opts.BaseURL, "/"), "/v1"), key: opts.APIKey,
		hc: opts.HTTPClient, maxRetries: max(opts.MaxRetries, 0), maxBackoff: opts.MaxBackoff,
	}, nil
}

// request is one call: the body is bytes so that a retry can send it again.
type request struct {
	method, path string
	query        url.Values
	body         []byte
	contentType  string
	accept       string
}

// do sends req, retrying 429 (not quota_exceeded) and 503 refusals with backoff. Those answers come before
// the gateway does anything, so even an exec is provably not started; a transport error is never retried,
// as the call may have run. The caller closes the response body of a 2xx answer.
func (c *Client) do(ctx context.Context, req request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 300 {
			return resp, nil
		}
		apiErr := decodeError(resp)
		if !apiErr.retryable() || attempt >= c.maxRetries {
			return nil, apiErr
		}
		wait := min(max(apiErr.RetryAfter, (500*time.Millisecond)<<attempt), c.maxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("airlock: %s %s: waiting to retry after %w: %w", req.method, req.path, apiErr, ctx.Err())
		case <-t.C:
		}
	}
}

func (c *Client) send(ctx context.Context, req request) (*http.Response, error) {
	u := c.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("airlock: building %s %s: %w", req.method, req.path, err)
	}
	hr.Header.Set("Authorization", "Bearer "+c.key)
	if req.body != nil {
		hr.Header.Set("Content-Type", req.contentType)
	}
	if req.accept != "" {
		hr.Header.Set("Accept", req.accept)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("airlock: %s %s: %w", req.method, req.path, err)
	}
	return resp, nil
}

// decodeError reads an error answer and closes its body.
func decodeError(resp *http.Response) *Error {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var env struct {
		Error *Error `json:"error"`
	}
	e := &Error{}
	if json.Unmarshal(raw, &env) == nil && env.Error != nil {
		e = env.Error
	} else {
		e.Code, e.Message = "http_"+resp.Status, strings.TrimSpace(string(raw))
	}
	e.Status, e.RetryAfter = resp.StatusCode, parseRetryAfter(resp.Header)
	return e
}

// call sends a JSON request (in may be nil) and decodes a JSON answer into out (may be nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	req := request{method: method, path: path}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("airlock: encoding %s %s: %w", method, path, err)
		}
		req.body, req.contentType = b, "application/json"
	}
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("airlock: decoding the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// BaseURL is the gateway's URL the client calls (without /v1).
func (c *Client) BaseURL() string { return c.base }
