#!/usr/bin/env node
/**
 * The `taskledger` command: runs the built JavaScript in dist/ (`npm run build`,
 * which `npm ci` runs through the `prepare` script). No TypeScript loader at
 * run time: docs/adr/0013-built-javascript.md.
 */
// Stack traces point into src/*.ts (dist/ carries source maps), not into bundled chunks.
process.setSourceMapsEnabled(true);

let main;
try {
  ({ main } = await import('../dist/main.js'));
} catch (err) {
  if (err?.code === 'ERR_MODULE_NOT_FOUND' && String(err.message).includes('dist/main.js')) {
    console.error('taskledger: dist/ is not built; run `npm run build` (npm ci runs it) in the package directory');
    process.exit(1);
  }
  throw err;
}
process.exitCode = await main(process.argv);
