/**
 * The directory holding taskledger's package.json, found by walking up from
 * this module. A fixed `../..` would not do: this code runs from its source
 * (src/…, under vitest) and bundled into a chunk of dist/ (bin/taskledger.mjs),
 * at different depths.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

let cached: string | null = null;

export function packageRoot(): string {
  if (cached !== null) return cached;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest) && (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === 'taskledger')
      return (cached = dir);
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`taskledger's package.json not found above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}
