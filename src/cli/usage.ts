/**
 * The command list (shared/design/API.md "Command line"; every command there
 * exists) and the usage text.
 */

export interface CommandInfo {
  name: string;
  synopsis: string;
  summary: string;
}

export const COMMANDS: readonly CommandInfo[] = [
  {
    name: 'migrate',
    synopsis: 'migrate [--create] [--status]',
    summary:
      'runs pending migrations on TASKLEDGER_DB_URL; --create creates the database first, --status only lists applied and pending migrations',
  },
  {
    name: 'start',
    synopsis: 'start [--roles api,admission,steps,complete,reaper,outbox,launch,cleanup]',
    summary: 'runs those roles in this process (all by default)',
  },
  {
    name: 'demo',
    synopsis: 'demo [--tasks N] [--port P] [--keep-running]',
    summary:
      'starts everything in this process, creates a sample workspace and tasks (with faults) over REST, prints a summary and the dashboard address',
  },
  {
    name: 'ops',
    synopsis: 'ops list [--state S] [--workspace W]',
    summary: 'lists creation operations',
  },
  {
    name: 'ops',
    synopsis: 'ops show <operation-id>',
    summary: "shows one operation's timeline",
  },
  {
    name: 'verify',
    synopsis: 'verify [--workspace W] [--no-observe] [--json] [--max-drift N]',
    summary:
      're-derives every stored hash and checks the ledger invariants, re-observes the effects of unfinished creations; reports drift (exit 1)',
  },
  {
    name: 'bench',
    synopsis:
      'bench [--dialect postgres|mysql|both] [--tasks N] [--workers M] [--concurrency C] [--rate R] [--shapes db,git] [--quick]',
    summary:
      'creates tasks end to end through the API with worker processes; reports creations/s, latency to task.created, worker memory and the raw-SQL ceiling (bench --help for every option)',
  },
  {
    name: 'mcp',
    synopsis: 'mcp [--token T] [--roles ...]',
    summary:
      'serves the MCP tools on stdio for the token (else TASKLEDGER_TOKEN); also on the API port at POST /mcp (docs/mcp.md)',
  },
  { name: 'help', synopsis: 'help', summary: 'prints this text' },
];

/** Exit codes: 0 success, 1 the command ran and failed, 2 the command line was wrong. */
export const EXIT = { OK: 0, FAILED: 1, USAGE: 2 } as const;

export function usage(): string {
  const lines = COMMANDS.flatMap((c) => [`  taskledger ${c.synopsis}`, `      ${c.summary}`]);
  return [
    'usage: taskledger <command> [options]',
    '',
    'commands:',
    ...lines,
    '',
    'Configuration comes from the environment (TASKLEDGER_DB_URL, TASKLEDGER_REDIS_URL, ...; see README.md).',
  ].join('\n');
}
