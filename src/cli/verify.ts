/**
 * `taskledger verify [--workspace W] [--no-observe] [--json] [--max-drift N]`:
 * re-derives every stored hash of the ledger and checks its invariants
 * (verify/checks.ts), re-observes the effects of unfinished creations
 * (verify/observe.ts), and reports drift. Reads only. Progress goes to
 * stderr, the report to stdout. Exit 0: no drift (effects that could not be
 * observed, e.g. with the provider down, are listed but do not fail it); 1:
 * drift found, or the database could not be read; 2: bad usage.
 */
import { parseArgs } from 'node:util';
import { createLogger } from '../log';
import { createProviderRegistry } from '../providers/registry';
import { defaultStepHandlers } from '../kinds/registry';
import { DRIFT_CODES, type Drift, type VerifyReport } from '../verify/drift';
import { verifyLedger } from '../verify/run';
import { withCliDb } from './cli-db';
import { EXIT } from './usage';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const USAGE = 'usage: taskledger verify [--workspace <workspace-id>] [--no-observe] [--json] [--max-drift N]';

const findingLine = (d: Drift) => {
  const about = d.subject === `operation ${d.operation_id}` ? '' : `  ${d.subject}`;
  return `  ${d.code}  operation ${d.operation_id}${about}: ${d.message}`;
};

function render(report: VerifyReport, observe: boolean): string {
  const c = report.counts;
  const lines = [
    `checked ${c.operations} creation operations: ${c.steps} steps, ${c.events} events, ${c.dispatch_claims} dispatch claims, ${c.cleanup_jobs} cleanup jobs` +
      (observe
        ? `; re-observed ${c.observed} effects of unfinished creations`
        : '; effects not re-observed (--no-observe)'),
  ];
  if (c.unobserved > 0) {
    lines.push(
      `UNOBSERVED: ${c.unobserved} effect${c.unobserved === 1 ? '' : 's'} could not be observed (not proven either way):`,
    );
    lines.push(...report.unobserved.map(findingLine));
  }
  const total = report.drift.length + report.more;
  if (total === 0) {
    lines.push(
      c.unobserved > 0
        ? 'no drift in what could be checked: every stored hash re-derives and every invariant holds'
        : 'no drift: every stored hash re-derives and every invariant holds',
    );
    return lines.join('\n');
  }
  const byCode = DRIFT_CODES.filter((code) => (report.drift_by_code[code] ?? 0) > 0).map(
    (code) => `${code} ${report.drift_by_code[code]}`,
  );
  lines.push(`DRIFT: ${total} finding${total === 1 ? '' : 's'} (${byCode.join(', ')})`);
  lines.push(...report.drift.map(findingLine));
  if (report.more > 0) lines.push(`  ... and ${report.more} more (raise --max-drift to list them)`);
  return lines.join('\n');
}

export async function verifyCommand(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        workspace: { type: 'string' },
        'no-observe': { type: 'boolean' },
        json: { type: 'boolean' },
        'max-drift': { type: 'string' },
        help: { type: 'boolean' },
      },
      strict: true,
    }));
  } catch (err) {
    console.error(`taskledger verify: ${(err as Error).message}\n${USAGE}`);
    return EXIT.USAGE;
  }
  if (values.help) {
    console.log(USAGE);
    return EXIT.OK;
  }
  if (values.workspace !== undefined && !UUID.test(values.workspace)) {
    console.error(`taskledger verify: --workspace must be a workspace id (a UUID), got "${values.workspace}"`);
    return EXIT.USAGE;
  }
  const maxDrift = Number(values['max-drift'] ?? 100);
  if (!Number.isInteger(maxDrift) || maxDrift < 0) {
    console.error('taskledger verify: --max-drift must be a whole number ≥ 0');
    return EXIT.USAGE;
  }
  const observe = !values['no-observe'];
  const workspaceId = values.workspace;
  const json = values.json === true;
  return withCliDb('verify', 2, async (db, config) => {
    const effects = observe
      ? {
          db,
          dataDir: config.dataDir,
          providers: createProviderRegistry({ timeoutMs: config.effectTimeoutMs }),
          log: createLogger('taskledger-verify', 'warn'),
          timeoutMs: config.effectTimeoutMs,
        }
      : null;
    // Progress only for a run long enough to wait for: after a second, then at most once a second.
    let lastProgress = Date.now();
    const report = await verifyLedger(
      { db, handlers: defaultStepHandlers, effects },
      { workspaceId, observe, maxDrift, pageSize: 200 },
      (counts, drift) => {
        if (Date.now() - lastProgress < 1000) return;
        lastProgress = Date.now();
        console.error(`verify: ${counts.operations} operations checked, ${drift} drift so far`);
      },
    );
    console.log(json ? JSON.stringify(report, null, 2) : render(report, observe));
    return report.drift.length + report.more === 0 ? EXIT.OK : EXIT.FAILED;
  });
}
