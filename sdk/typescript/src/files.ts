import { AirlockError, ConflictError, ConnectionError, NotFoundError, SandboxLostError } from "./errors.js";
import type { ExecResult } from "./result.js";
import type { Sandbox } from "./sandbox.js";

/** One entry of `files.list`. */
export interface FileEntry {
  name: string;
  /** The directory given to `list` joined with the name. */
  path: string;
  type: "file" | "directory" | "symlink" | "other";
  /** Bytes (of the link itself for a symlink). */
  size: number;
}

/** File transfers run this long at most. */
const transferTimeoutMs = 5 * 60_000;

const types: Record<string, FileEntry["type"]> = { f: "file", d: "directory", l: "symlink" };

/**
 * The sandbox's files. Relative paths are relative to the working directory; absolute paths may be anywhere
 * the sandbox user may write (transfers run as that user, inside the sandbox).
 */
export class Files {
  constructor(private readonly sbx: Sandbox) {}

  /** Writes a file, replacing it atomically; the gateway creates missing parent directories. */
  async write(path: string, data: string | Uint8Array | ArrayBuffer): Promise<{ path: string; bytes: number }> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data instanceof Uint8Array ? data : new Uint8Array(data);
    return this.sbx.transport.json<{ path: string; bytes: number }>({
      method: "PUT", path: `/v1/sandboxes/${encodeURIComponent(this.sbx.id)}/files`, query: { path },
      body, contentType: "application/octet-stream", timeoutMs: transferTimeoutMs,
    });
  }

  /** Reads a file's bytes. */
  async read(path: string): Promise<Uint8Array> {
    const resp = await this.sbx.transport.send({
      method: "GET", path: `/v1/sandboxes/${encodeURIComponent(this.sbx.id)}/files`, query: { path },
      accept: "application/octet-stream", timeoutMs: transferTimeoutMs,
    });
    let data: Uint8Array;
    try {
      data = new Uint8Array(await resp.arrayBuffer());
    } catch (err) {
      throw new ConnectionError(`reading ${path}: the transfer broke: ${(err as Error).message}`, resp.status, "", undefined, { cause: err });
    }
    // A transfer that broke midway is cut short of Content-Length: never hand back a short file as whole.
    const want = resp.headers.get("Content-Length");
    if (want !== null && Number(want) !== data.length) {
      throw new ConnectionError(`reading ${path}: got ${data.length} of ${want} bytes`, resp.status);
    }
    return data;
  }

  /** Reads a file as UTF-8 text. */
  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  /** The entries of a directory (not recursive), sorted by name. */
  async list(path = "."): Promise<FileEntry[]> {
    // GNU find prints each entry's type, size and name; NUL ends a record since names may hold newlines.
    const script = '[ -d "$1" ] || { [ -e "$1" ] && { echo "not a directory" >&2; exit 3; }; exit 2; }\n' +
      "exec find \"$1\" -mindepth 1 -maxdepth 1 -printf '%y\\t%s\\t%f\\0'";
    const r = await this.sbx.exec(["sh", "-c", script, "sh", path], { timeoutSeconds: 60, maxOutputBytes: 1 << 20 });
    this.check(r, "list", path);
    if (r.truncation.stdout.truncated) throw new AirlockError(`list ${path}: too many entries to list`, 0, "too_large");
    const base = path.replace(/\/+$/, "") || "/";
    return r.stdout
      .split("\0")
      .filter((rec) => rec !== "")
      .map((rec) => {
        const [t = "", size = "0", ...rest] = rec.split("\t");
        const name = rest.join("\t");
        return { name, path: base === "/" ? `/${name}` : `${base}/${name}`, type: types[t] ?? "other", size: Number(size) };
      })
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Whether the path exists (a symlink counts if its target does). */
  async exists(path: string): Promise<boolean> {
    const r = await this.sbx.exec(["test", "-e", path], { timeoutSeconds: 30 });
    if (r.outcome !== "exited" || r.exitCode > 1) this.check(r, "test", path);
    return r.exitCode === 0;
  }

  /** Removes a file or a directory with everything in it. A path that does not exist is fine. */
  async remove(path: string): Promise<void> {
    this.check(await this.sbx.exec(["rm", "-rf", "--", path], { timeoutSeconds: 60 }), "remove", path);
  }

  private check(r: ExecResult, op: string, path: string): void {
    if (r.outcome !== "exited") {
      throw new SandboxLostError(`${op} ${path} did not complete: ${r.outcome}${r.detail ? ` (${r.detail})` : ""}`, 502, "sandbox_lost");
    }
    if (r.exitCode === 0) return;
    if (r.exitCode === 2 && op === "list") throw new NotFoundError(`path: ${path} does not exist`, 404, "not_found", "path");
    throw new ConflictError(`${op} ${path}: ${r.stderr.trim() || `exit code ${r.exitCode}`}`, 409, "conflict");
  }
}
