/**
 * The process-wide spawner helper: one per process, started on first use.
 * Which one (`TASKLEDGER_SPAWNER`):
 * - unset or `native`: the C helper (src/launch/native-spawner.ts) built into
 *   dist/ beside the bundle, or the file `TASKLEDGER_SPAWNER_BIN` names; when
 *   there is none (no C compiler at build time) or it does not run here (a
 *   binary built elsewhere), the Node helper, with one warning; `native` set
 *   explicitly and no working binary is an error instead;
 * - `node`: the Node helper (src/launch/spawner-child.mjs);
 * - `inline`: this process itself (forks this process's heap; for hosts
 *   where a second process is not wanted).
 *
 * Contract: `sharedSpawner()` is the agent spawner of this process;
 * `runCommand(cmd)` runs a short command (Git) from it and rejects with
 * `SpawnLost` only when the helper died first.
 */
import { fileURLToPath } from 'node:url';
import { NativeSpawner, usableBinary } from './native-spawner';
import { HelperSpawner, inlineSpawner, runInline, type AgentSpawner, type RunRequest, type RunResult } from './spawner';

interface Helper extends AgentSpawner {
  run(cmd: RunRequest): Promise<RunResult>;
}

const BUILT = fileURLToPath(new URL('./spawner-native', import.meta.url));

let shared: Helper | null = null;

function choose(): Helper {
  const kind = process.env.TASKLEDGER_SPAWNER ?? '';
  if (kind === 'node') return new HelperSpawner();
  const bin = usableBinary(process.env.TASKLEDGER_SPAWNER_BIN ?? BUILT);
  if (bin !== null) return new NativeSpawner(bin);
  const where = process.env.TASKLEDGER_SPAWNER_BIN ?? BUILT;
  if (kind === 'native') throw new Error(`TASKLEDGER_SPAWNER=native, but ${where} is missing or does not run here`);
  process.emitWarning(
    `no working native spawner at ${where} (npm run build with a C compiler makes one): the Node helper starts processes`,
  );
  return new HelperSpawner();
}

function sharedHelper(): Helper {
  shared ??= choose();
  return shared;
}

/** The process-wide agent spawner: this process itself when TASKLEDGER_SPAWNER=inline, else its helper. */
export function sharedSpawner(): AgentSpawner {
  return process.env.TASKLEDGER_SPAWNER === 'inline' ? inlineSpawner : sharedHelper();
}

/** Runs a short command from the process-wide helper, or in this process when TASKLEDGER_SPAWNER=inline. */
export function runCommand(cmd: RunRequest): Promise<RunResult> {
  return process.env.TASKLEDGER_SPAWNER === 'inline' ? runInline(cmd) : sharedHelper().run(cmd);
}
