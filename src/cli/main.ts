/**
 * The `taskledger` command dispatcher (bin/taskledger.mjs calls `main`). Each
 * command lives in its own file and returns its exit code; nothing here
 * calls `process.exit`, so open handles close on their own.
 */
import { EXIT, usage } from './usage';

/** Runs one command line (`argv` as in `process.argv`) and returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const [command, ...args] = argv.slice(2);
  if (command === undefined) {
    console.error(usage());
    return EXIT.USAGE;
  }
  if (command === 'help' || command === '--help' || command === '-h') {
    console.log(usage());
    return EXIT.OK;
  }
  if (command === 'migrate') {
    // Loaded on demand: `help` and usage errors answer without loading TypeORM.
    const { migrateCommand } = await import('./migrate');
    return migrateCommand(args);
  }

  if (command === 'start') {
    const { startCommand } = await import('./start');
    return startCommand(args);
  }

  if (command === 'demo') {
    const { demoCommand } = await import('./demo');
    return demoCommand(args);
  }

  if (command === 'ops') {
    const { opsCommand } = await import('./ops');
    return opsCommand(args);
  }
  if (command === 'verify') {
    const { verifyCommand } = await import('./verify');
    return verifyCommand(args);
  }
  if (command === 'mcp') {
    const { mcpCommand } = await import('./mcp');
    return mcpCommand(args);
  }
  if (command === 'bench') {
    const { benchCommand } = await import('./bench');
    return benchCommand(args);
  }

  console.error(`taskledger: unknown command "${command}"\n\n${usage()}`);
  return EXIT.USAGE;
}
