/** The SDK's version: the Makefile's VERSION, like package.json (test/version.test.ts checks all three agree). */
export const VERSION = "0.1.0";
