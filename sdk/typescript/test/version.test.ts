import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { VERSION } from "@airlock-dev/sdk";

// One version for the whole project: the Makefile's VERSION, which images and binaries carry too.
test("package.json, the SDK's VERSION and the Makefile's VERSION agree", () => {
  const makefile = readFileSync(new URL("../../../../Makefile", import.meta.url), "utf8");
  const want = /^VERSION \?= (\S+)$/m.exec(makefile)?.[1];
  assert.ok(want, "no VERSION in the Makefile");
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  assert.equal(pkg.version, want, "sdk/typescript/package.json version (then regenerate examples/typescript/package-lock.json)");
  assert.equal(VERSION, want, "sdk/typescript/src/version.ts");
});
