/**
 * The reference peer, run inside the bench so every ratio compares figures
 * taken in the same session on the same machine: DBOS Transact running a
 * 6-step durable workflow checkpointed in the same PostgreSQL server
 * (`../shared/peers/dbos/run.sh`, or the script `--peer` / TASKLEDGER_BENCH_PEER
 * names).
 *
 * Contract: `findPeerScript(explicit)` returns the script's path or null when
 * none exists (the bench then reports every peer ratio as not measured and
 * says why). `runPeer(script, concurrency, seconds)` runs it once and parses
 * the one JSON line it prints; a peer that fails rejects with its output's
 * tail. The script installs its own dependencies on first use (npm), outside
 * this repository.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { packageRoot } from '../package-root';

export interface PeerRun {
  concurrency: number;
  seconds: number;
  workflows: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  commitsPerWorkflow: number | null;
  /** When the run started (ISO). */
  at: string;
}

/** The repository's parent holds `shared/` in this workplace; elsewhere name the script explicitly. */
const DEFAULT_RELATIVE = '../shared/peers/dbos/run.sh';

export function findPeerScript(explicit: string | null, env: NodeJS.ProcessEnv = process.env): string | null {
  const named = explicit ?? env.TASKLEDGER_BENCH_PEER?.trim() ?? '';
  if (named !== '') return existsSync(named) ? resolve(named) : null;
  const candidate = resolve(packageRoot(), DEFAULT_RELATIVE);
  return existsSync(candidate) ? candidate : null;
}

export function runPeer(script: string, concurrency: number, seconds: number): Promise<PeerRun> {
  const at = new Date().toISOString();
  return new Promise((resolvePromise, reject) => {
    execFile(
      'bash',
      [script, String(concurrency), String(seconds)],
      { timeout: (seconds + 600) * 1000, maxBuffer: 4 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const lines = `${stdout}`.trim().split('\n');
        const last = lines[lines.length - 1] ?? '';
        let parsed: Record<string, unknown> | null = null;
        try {
          parsed = JSON.parse(last) as Record<string, unknown>;
        } catch {
          parsed = null;
        }
        if (err || !parsed || typeof parsed.wf_per_s !== 'number') {
          const tail = `${stdout}\n${stderr}`.trim().split('\n').slice(-8).join('\n');
          reject(new Error(`the peer ${script} failed${err ? ` (${err.message.split('\n')[0]})` : ''}:\n${tail}`));
          return;
        }
        resolvePromise({
          concurrency,
          seconds,
          workflows: Number(parsed.workflows),
          perSecond: parsed.wf_per_s,
          p50Ms: Number(parsed.p50_ms),
          p99Ms: Number(parsed.p99_ms),
          commitsPerWorkflow: typeof parsed.pg_commits_per_wf === 'number' ? parsed.pg_commits_per_wf : null,
          at,
        });
      },
    );
  });
}
