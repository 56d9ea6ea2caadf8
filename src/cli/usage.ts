/**
 * The command list (shared/design/API.md "Command line") and the usage text.
 * Commands whose code has not landed yet are listed, marked, and refused with
 * exit code 2, so scripts written against the public names fail loudly.
 */

export interface CommandInfo {
  name: string;
  synopsis: string;
  summary: string;
  /** False until the code behind the command exists. */
  available: boolean;
}

export const COMMANDS: readonly CommandInfo[] = [
  {
    name: 'migrate',
    synopsis: 'migrate [--create] [--status]',
    summary:
      'runs pending migrations on TASKLEDGER_DB_URL; --create creates the database first, --status only lists applied and pending migrations',
    available: true,
  },
  {
    name: 'start',
    synopsis: 'start [--roles api,admission,steps,complete,reaper,outbox,launch,cleanup]',
    summary: 'runs those roles in this process (all by default)',
    available: true,
  },
  {
    name: 'demo',
    synopsis: 'demo [--tasks N] [--port P] [--keep-running]',
    summary:
      'starts everything in this process, creates a sample workspace and tasks (with faults) over REST, prints a summary and the dashboard address',
    available: true,
  },
  {
    name: 'ops',
    synopsis: 'ops list [--state S] [--workspace W]',
    summary: 'lists creation operations',
    available: true,
  },
  {
    name: 'ops',
    synopsis: 'ops show <operation-id>',
    summary: "shows one operation's timeline",
    available: true,
  },
  {
    name: 'verify',
    synopsis: 'verify',
    summary: 're-derives every stored hash and re-observes effects; reports drift',
    available: false,
  },
  {
    name: 'bench',
    synopsis:
      'bench [--dialect postgres|mysql|both] [--tasks N] [--workers M] [--concurrency C] [--rate R] [--shapes db,git] [--quick]',
    summary:
      'creates tasks end to end through the API with worker processes; reports creations/s, latency to task.created, worker memory and the raw-SQL ceiling (bench --help for every option)',
    available: true,
  },
  { name: 'help', synopsis: 'help', summary: 'prints this text', available: true },
];

/** Exit codes: 0 success, 1 the command ran and failed, 2 the command line was wrong or the command is not available. */
export const EXIT = { OK: 0, FAILED: 1, USAGE: 2 } as const;

export function usage(): string {
  const lines = COMMANDS.flatMap((c) => [
    `  taskledger ${c.synopsis}${c.available ? '' : '   [not yet available]'}`,
    `      ${c.summary}`,
  ]);
  return [
    'usage: taskledger <command> [options]',
    '',
    'commands:',
    ...lines,
    '',
    'Configuration comes from the environment (TASKLEDGER_DB_URL, TASKLEDGER_REDIS_URL, ...; see README.md).',
  ].join('\n');
}

/** The refusal printed for a listed command whose code has not landed yet. */
export function notYetAvailable(info: CommandInfo): string {
  const running = [
    ...new Set(COMMANDS.filter((c) => c.available && c.name !== 'help').map((c) => `"taskledger ${c.name}"`)),
  ];
  return `taskledger ${info.name}: not yet available in this version; today ${running.join(', ')} run`;
}
