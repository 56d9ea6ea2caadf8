#!/usr/bin/env node
/**
 * The `taskledger` command. The sources are TypeScript run through tsx, so this
 * launcher registers tsx first, pinned to the project's tsconfig.json (TypeORM's
 * legacy decorators depend on it), whatever directory it is started from.
 */
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
const { main } = await import('../src/cli/main.ts');
process.exitCode = await main(process.argv);
