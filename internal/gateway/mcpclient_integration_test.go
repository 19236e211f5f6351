package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Raw MCP over HTTP, as any client sends it, for tests against a real gateway: the SDK's client would hide the
// statuses and headers the tests look at.

// mcpResult is a tools/call answer: its text, its structured content and whether it is a tool error.
type mcpResult struct {
	Text       string
	Structured map[string]any
	IsError    bool
}

// mcpTool calls tool sessionlessly (protocol 2026-07-28: one POST, no session). It returns the HTTP status,
// the result of a 200 and the raw body of anything else.
func mcpTool(base, key, tool string, args map[string]any) (int, *mcpResult, string, error) {
	a, err := json.Marshal(args)
	if err != nil {
		return 0, nil, "", err
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + string(a) +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	resp, raw, err := mcpPost(base, key, body, map[string]string{"MCP-Protocol-Version": "2026-07-28",
		"Mcp-Method": "tools/call", "Mcp-Name": tool})
	if err != nil || resp.StatusCode != http.StatusOK {
		return httpStatus(resp), nil, string(raw), err
	}
	msg, err := mcpMessage(resp, raw)
	if err != nil {
		return resp.StatusCode, nil, string(raw), err
	}
	var rpc struct {
		Result *struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			StructuredContent map[string]any `json:"structuredContent"`
			IsError           bool           `json:"isError"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg, &rpc); err != nil {
		return resp.StatusCode, nil, string(raw), fmt.Errorf("decoding %s: %w", shorten(msg), err)
	}
	if rpc.Result == nil {
		return resp.StatusCode, nil, string(raw), fmt.Errorf("tools/call %s: no result: %s", tool, shorten(msg))
	}
	r := &mcpResult{Structured: rpc.Result.StructuredContent, IsError: rpc.Result.IsError}
	for _, c := range rpc.Result.Content {
		r.Text += c.Text
	}
	return resp.StatusCode, r, "", nil
}

// mcpInitialize opens a session (protocol 2025-11-25). It returns the response, the session id of a 200 and
// the body of anything else.
func mcpInitialize(base, key string) (*http.Response, string, string, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`
	resp, raw, err := mcpPost(base, key, body, nil)
	if err != nil {
		return nil, "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return resp, "", string(raw), nil
	}
	id := resp.Header.Get("Mcp-Session-Id")
	if id == "" {
		return resp, "", "", fmt.Errorf("initialize answered 200 without Mcp-Session-Id: %s", shorten(raw))
	}
	return resp, id, "", nil
}

// mcpDelete ends session id.
func mcpDelete(base, key, id string) (int, error) {
	req, err := http.NewRequest(http.MethodDelete, base+"/mcp", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Session-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// restCall sends a REST call to the gateway at base and decodes its JSON answer.
func restCall(base, key, method, path, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %d, body: %w", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, m, nil
}

func mcpPost(base, key, body string, hdr map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp, raw, err
}

// mcpMessage is the JSON-RPC message of an answer, sent as JSON or as a server-sent event.
func mcpMessage(resp *http.Response, raw []byte) ([]byte, error) {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return raw, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, len(raw)+1)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, `"jsonrpc"`) {
			return []byte(data), nil
		}
	}
	return nil, fmt.Errorf("no message in the event stream: %s", shorten(raw))
}

func httpStatus(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// shorten shortens what a failure message quotes.
func shorten(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
