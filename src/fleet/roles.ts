/**
 * Fleet roles (`taskledger start --roles ...`): each runs in any number of
 * processes against one database and one Redis.
 */
export const ROLES = ['api', 'admission', 'steps', 'complete', 'reaper', 'outbox', 'launch', 'cleanup'] as const;
export type Role = (typeof ROLES)[number];

export function parseRoles(text: string | undefined): Role[] {
  if (!text || text.trim() === '' || text.trim() === 'all') return [...ROLES];
  const roles = text
    .split(',')
    .map((r) => r.trim())
    .filter((r) => r !== '');
  for (const r of roles) {
    if (!(ROLES as readonly string[]).includes(r)) throw new Error(`unknown role "${r}" (known: ${ROLES.join(', ')})`);
  }
  return [...new Set(roles)] as Role[];
}

/**
 * Worker concurrency per role in one process. Why these numbers: step and
 * complete work is short database transactions, so a few in flight keep two
 * cores and the connection pool busy; Git and provider steps spend their time
 * waiting on I/O; the outbox must stay ordered per workspace, and launch
 * starts processes.
 */
export const CONCURRENCY = {
  dbStep: 8,
  ioStep: 4,
  complete: 8,
  outbox: 2,
  launch: 2,
  admission: 8,
  reaper: 1,
  /** One pass at a time: cleanup jobs are rare and each is Git or provider I/O. */
  cleanup: 1,
} as const;
