// Print the licence of every package with code in the bundle (read from esbuild's metafile),
// each under a heading with its name, version and licence name.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

const root = process.argv[2];
const meta = JSON.parse(readFileSync(join(root, "dist/meta.json"), "utf8"));
const dirs = new Set();
const [output] = Object.values(meta.outputs);
for (const [input, used] of Object.entries(output.inputs)) {
  if (!used.bytesInOutput) continue;  // read, then tree-shaken away
  const found = input.match(/^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//);
  if (found) dirs.add(found[1]);
}
const parts = [];
for (const dir of [...dirs].sort()) {
  const info = JSON.parse(readFileSync(join(root, dir, "package.json"), "utf8"));
  const file = readdirSync(join(root, dir)).find((name) => /^(licen[cs]e|copying)/i.test(name));
  if (!file) throw new Error(`${info.name} has no licence file`);
  const text = readFileSync(join(root, dir, file), "utf8").trim();
  parts.push(`${info.name} ${info.version} (${info.license})\n\n${text}\n`);
}
process.stdout.write(parts.join("\n" + "-".repeat(72) + "\n\n"));
