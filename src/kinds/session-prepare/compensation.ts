/**
 * Undo of `session_prepare`: the prepared `task_sessions` row and its
 * resource markers (re-derived from request and owner). One Store
 * transaction deletes them when each is still exactly the prepared row (or
 * already gone) and no `executors_running` row exists for the session.
 * A runtime (something may have started) or a changed row (e.g. the session
 * moved past `prepared`) transfers the complete proof to a cleanup job and
 * deletes nothing. No I/O besides the ledger.
 */
import type { SessionPrepareRequest } from '../../canonical/types';
import { TIER } from '../../db/lock-plan';
import type { OwnedRow } from '../../store/effects/compensate-owned-rows';
import { rowHash, runtimeExists } from '../../store/effects/row-documents';
import { txReader, type LockNeed } from '../../store/effects/row-locks';
import { expectedSessionRows } from './ledger';
import type { CompensationClaim } from '../../store/types';
import { ownerOfClaim, settleRows } from '../../compensation/record';
import type { CompensationUndo } from '../contract';

export function sessionOwnedRows(claim: CompensationClaim): OwnedRow[] {
  const exp = expectedSessionRows(claim.request as SessionPrepareRequest, ownerOfClaim(claim));
  return [
    { table: 'task_sessions', key: exp.session.id, row_sha256: rowHash(exp.session), undone_sha256: null },
    ...exp.markers.map((m) => ({
      table: 'task_resource_markers',
      key: m.resource_key,
      row_sha256: rowHash(m),
      undone_sha256: null,
    })),
  ];
}

export function runtimeLock(sessionId: string): LockNeed {
  return {
    tier: TIER.RUNTIME,
    table: 'executors_running',
    key: `session:${sessionId}`,
    where: 'session_id = ?',
    params: [sessionId],
    mode: 'share',
  };
}

export const undoSessionPrepare: CompensationUndo = (deps, claim) => {
  const req = claim.request as SessionPrepareRequest;
  return settleRows(deps, claim, {
    rows: sessionOwnedRows(claim),
    extraLocks: [runtimeLock(req.session_id)],
    blocked: async (tx) =>
      (await runtimeExists(txReader(tx), req.session_id)) ? 'a runtime exists for the session' : null,
    detail: { session_id: req.session_id },
  });
};
