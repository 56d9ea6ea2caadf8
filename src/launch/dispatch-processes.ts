/**
 * Which live processes carry a dispatch's idempotency key. The local executor
 * puts the key in the agent's environment (`TASKLEDGER_DISPATCH_KEY`), which
 * every descendant inherits; scanning `/proc/<pid>/environ` therefore finds
 * the agent even after its pid was reused or its first process exited,
 * and finding none is an authenticated absence. Linux only: elsewhere the
 * scan returns null (no proof either way).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';

export const DISPATCH_KEY_ENV = 'TASKLEDGER_DISPATCH_KEY';

const isErrno = (err: unknown, ...codes: string[]): boolean =>
  codes.includes((err as NodeJS.ErrnoException | null)?.code ?? '');

/**
 * Pids of this user's processes whose environment holds `key`, or null when
 * processes cannot be enumerated (no /proc, or an unexpected read error).
 */
export function findDispatchProcesses(key: string): number[] | null {
  if (!existsSync('/proc/self/environ')) return null;
  const uid = process.getuid?.();
  const entry = `${DISPATCH_KEY_ENV}=${key}`;
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // The executor never changes user, so another user's process cannot be one of its agents.
      if (uid !== undefined && uid !== 0 && statSync(`/proc/${name}`).uid !== uid) continue;
      // Entries are NUL-separated; match a whole entry.
      if (readFileSync(`/proc/${name}/environ`, 'utf8').split('\0').includes(entry)) pids.push(Number(name));
    } catch (err) {
      // ENOENT/ESRCH: exited while we looked, or a kernel thread. EACCES: a process this user may not
      // inspect (another namespace, a non-dumpable or setuid program) — never an agent the executor
      // spawned, which runs as this user with an ordinary environment.
      if (isErrno(err, 'ENOENT', 'ESRCH', 'EACCES', 'EPERM')) continue;
      return null;
    }
  }
  return pids;
}
