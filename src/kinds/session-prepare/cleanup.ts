/**
 * Cleanup of a transferred `session_prepare` effect: rows only (the prepared
 * session and its resource markers), undone in FinishCleanupJob's
 * transaction under the session's runtime lock, and refused while a runtime
 * exists for the session (something may have started: stop it first).
 */
import { unknownDecision, type CleanupDecision } from '../../cleanup/decision';
import type { CleanupProof } from '../../compensation/cleanup-proof';
import { runtimeExists } from '../../store/effects/row-documents';
import { txReader } from '../../store/effects/row-locks';
import { runtimeLock } from './compensation';

export function cleanPreparedSession(proof: CleanupProof): Promise<CleanupDecision> {
  const sessionId = (proof.detail as { session_id?: unknown }).session_id;
  if (typeof sessionId !== 'string') {
    return Promise.resolve(unknownDecision('proof_invalid', 'the session proof names no session'));
  }
  return Promise.resolve({
    kind: 'rows',
    note: 'prepared session rows',
    extraLocks: [runtimeLock(sessionId)],
    blocked: async (tx) =>
      (await runtimeExists(txReader(tx), sessionId)) ? 'a runtime exists for the session; stop it first' : null,
  });
}
