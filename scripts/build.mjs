#!/usr/bin/env node
/**
 * `npm run build` (and `prepare`, so `npm ci` builds it): compiles the CLI and
 * everything it loads into plain ES modules in dist/, which bin/taskledger.mjs
 * runs. Why esbuild, bundling, and this layout: docs/adr/0013-built-javascript.md.
 *
 * - Two entries: src/cli/main.ts -> dist/main.js, and the producer client
 *   src/client/index.ts -> dist/client.js (package export `taskledger/client`).
 *   Each command's dynamic
 *   `import('./migrate')` etc. becomes its own chunk, so `taskledger help`
 *   still loads no TypeORM and `start` loads no demo/bench code.
 * - Packages in node_modules stay external (imported at run time, as before);
 *   only this repository's sources (src/, entities/, migrations/, queues/) are
 *   bundled, which is what resolves their extension-less import specifiers.
 * - dist/ is flat: every chunk sits beside main.js, so a module's
 *   `new URL('./spawner-child.mjs', import.meta.url)` resolves to the copy of
 *   the helper placed there.
 * - keepNames: TypeORM and error reports read class names; the bundler must
 *   not rename a class to avoid a collision between two modules.
 *
 * Usage: node scripts/build.mjs [--out DIR]   (default dist/)
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Builds into `outdir` (emptied first). Returns the files written, relative to it. */
export async function buildDist(outdir = join(root, 'dist')) {
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  await build({
    absWorkingDir: root,
    entryPoints: { main: 'src/cli/main.ts', client: 'src/client/index.ts' },
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20.19',
    packages: 'external',
    keepNames: true,
    sourcemap: 'linked',
    // experimentalDecorators / useDefineForClassFields (TypeORM's legacy decorators) come from here.
    tsconfig: join(root, 'tsconfig.json'),
    logLevel: 'warning',
  });
  // Plain JavaScript forked as its own process (src/launch/spawner.ts): copied, not bundled.
  copyFileSync(join(root, 'src/launch/spawner-child.mjs'), join(outdir, 'spawner-child.mjs'));
  compileSpawner(join(outdir, 'spawner-native'));
  return readdirSync(outdir);
}

/**
 * Compiles the native spawner helper (src/launch/spawner-native.c, docs/adr/0027-native-spawner.md) to `out`
 * with the system's C compiler (`$CC`, else `cc`) and checks that it runs. Without a compiler, or where it
 * fails, it warns and leaves no file: src/launch/shared-spawner.ts then uses the Node helper. Returns whether
 * it built one.
 */
export function compileSpawner(out) {
  const cc = process.env.CC || 'cc';
  try {
    execFileSync(cc, ['-O2', '-Wall', '-o', out, join(root, 'src/launch/spawner-native.c')], { stdio: 'pipe' });
    if (execFileSync(out, ['--check'], { encoding: 'utf8' }).trim() !== 'ok') throw new Error('--check failed');
    return true;
  } catch (err) {
    rmSync(out, { force: true });
    const why = String(err.stderr || err.message)
      .trim()
      .split('\n')
      .slice(-3)
      .join(' | ');
    console.warn(`build: no native spawner (${why}); agents and Git start from the Node helper`);
    return false;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--out');
  const out = i > 0 && process.argv[i + 1] ? resolve(process.argv[i + 1]) : undefined;
  const started = Date.now();
  const files = await buildDist(out);
  console.log(
    `built ${files.filter((f) => f.endsWith('.js')).length} modules into ${out ?? 'dist/'} in ${Date.now() - started} ms`,
  );
}
