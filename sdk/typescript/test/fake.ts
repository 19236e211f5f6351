import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** A request the fake gateway received. */
export interface Seen {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage["headers"];
  body: Buffer;
  json(): any;
}

export type Handler = (req: Seen, res: ServerResponse) => void | Promise<void>;

/** A local HTTP server that plays the gateway: each test scripts its answers and checks what arrived. */
export async function fakeGateway(handler: Handler) {
  const seen: Seen[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const url = new URL(req.url ?? "/", "http://x");
    const s: Seen = {
      method: req.method ?? "",
      path: url.pathname,
      query: url.searchParams,
      headers: req.headers,
      body: Buffer.concat(chunks),
      json() {
        return JSON.parse(this.body.toString());
      },
    };
    seen.push(s);
    try {
      await handler(s, res);
    } catch (err) {
      res.destroy(err as Error);
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    conn: { apiKey: "alk_test_secret", baseUrl: `http://127.0.0.1:${port}` },
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

export function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { "Content-Type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

export function sandboxView(id: string, status = "ready", extra: Record<string, unknown> = {}) {
  return { id, status, working_dir: "/home/sandbox", created_at: "2026-01-01T00:00:00Z", usage_seconds: 0, ...extra };
}

export function execResult(extra: Record<string, unknown> = {}) {
  return {
    exit_code: 0, duration_ms: 5, stdout: "", stderr: "", truncated: false, outcome: "exited",
    stdout_bytes: 0, stderr_bytes: 0,
    truncation: { stdout: { truncated: false, kept_bytes: 0, omitted_bytes: 0 }, stderr: { truncated: false, kept_bytes: 0, omitted_bytes: 0 } },
    ...extra,
  };
}
