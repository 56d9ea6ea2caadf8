/**
 * `taskledger verify`'s external-ID release checks, on one operation's rows
 * as read (verify/ledger-page.ts). Pure. What the release's two
 * transactions (store/release-claim.ts, store/release-apply.ts) promise:
 * - a `preparing-release` creation has its `running` release, the one its
 *   `release_operation_id` names, and only such a creation has one;
 * - a `completed` release left no external ID on its task;
 * - `release_applied` only with that completed release of the preparing
 *   holder (a completed holder's release never sets it).
 */
import type { DriftCode } from './drift';
import type { OperationRecord } from './ledger-page';

type Emit = (code: DriftCode, subject: string, message: string) => void;

export function checkReleases(emit: Emit, rec: OperationRecord): void {
  const { op } = rec;
  const own = rec.releases.find((r) => r.id === op.release_operation_id);
  if (op.state === 'preparing-release' && own?.state !== 'running') {
    emit(
      'external_id_release',
      `operation ${op.id}`,
      own ? `preparing-release, but its release ${own.id} is ${own.state}` : 'preparing-release without its release',
    );
  }
  for (const r of rec.releases) {
    const subject = `release ${r.id}`;
    if (r.task_id !== op.task_id) emit('external_id_release', subject, 'names another task than its creation');
    if (r.state === 'running' && op.state !== 'preparing-release') {
      emit('external_id_release', subject, `running, but its creation is ${op.state}`);
    } else if (r.state === 'running' && r !== own) {
      emit('external_id_release', subject, 'running, but its creation is claimed by another release');
    }
    if (r.state === 'completed' && rec.task?.external_id != null) {
      emit('external_id_release', subject, 'completed, but its task still has an external ID');
    }
  }
  if (op.release_applied && (own?.state !== 'completed' || own.holder_state !== 'preparing')) {
    emit('external_id_release', `operation ${op.id}`, 'release_applied without a completed release of it');
  }
}
