import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const pkgDir = fileURLToPath(new URL("../..", import.meta.url));

test("npm pack makes a package that installs and imports, with its type declarations and nothing else", () => {
  const tmp = mkdtempSync(join(tmpdir(), "airlock-sdk-pack-"));
  try {
    const [info] = JSON.parse(execFileSync("npm", ["pack", "--json", "--pack-destination", tmp], { cwd: pkgDir, encoding: "utf8" }));
    const files = (info.files as { path: string }[]).map((f) => f.path).sort();
    for (const f of ["package.json", "dist/index.js", "dist/index.d.ts", "dist/sandbox.js", "dist/sandbox.d.ts"]) {
      assert.ok(files.includes(f), `${f} is not in the package: ${files}`);
    }
    assert.deepEqual(files.filter((f) => !f.startsWith("dist/")), ["README.md", "package.json"], "only dist/, the README and package.json");
    assert.equal(info.name, "@airlock-dev/sdk");

    // Installed from the tarball alone: no registry, no dependencies.
    const app = join(tmp, "app");
    execFileSync("mkdir", [app]);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", join(tmp, info.filename)], { cwd: app, stdio: "pipe" });
    const out = execFileSync("node", ["--input-type=module", "-e",
      "import { Sandbox, formatObservation, VERSION } from '@airlock-dev/sdk'; console.log(typeof Sandbox.create, formatObservation({exit_code: 0, duration_ms: 1, stdout: 'hi', stderr: ''}).split('\\n').pop(), VERSION)"],
      { cwd: app, encoding: "utf8" });
    assert.equal(out.trim(), `function hi ${info.version}`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
