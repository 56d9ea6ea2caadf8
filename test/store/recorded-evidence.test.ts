/**
 * A record's evidence is verified once per process (store/evidence-memo.ts):
 * the bytes a record writes are those of evidence it has just validated, so
 * reading them back (Complete's phases, the next batch's lock needs) neither
 * parses nor validates nor hashes them again — and what is read back is
 * exactly what a fresh verification of the stored bytes gives. Both dialects.
 */
import { describe, expect, it, vi } from 'vitest';
import { evidenceHash } from '../../src/canonical/hash';
import { parseCanonical } from '../../src/canonical/canonical-json';
import * as validate from '../../src/canonical/validate';
import { storedEvidenceOf } from '../../src/store/evidence-memo';
import { useTestDb } from '../support/db';
import { stepRows } from '../support/ledger';
import { createGroupTask, LEDGER_KINDS, loadStep } from '../steps/support';
import { claimAndApplyLedgerSteps } from '../../src/store/ledger-step';
import type { StepKind } from '../../src/domain/vocab';

vi.mock('../../src/canonical/validate', async (actual) => {
  const real = await actual<typeof import('../../src/canonical/validate')>();
  return { ...real, validateStepEvidence: vi.fn(real.validateStepEvidence) };
});

const t = useTestDb();

describe('evidence verified once', () => {
  it("reads a ledger batch's recorded evidence back without validating it again, equal to a fresh verification", async () => {
    // A batch without phase A: nothing in it reads the evidence it records.
    const { c } = await createGroupTask(t.db);
    const row = (await stepRows(t.db, c.operationId)).find((r) => r.kind === 'session_prepare')!;
    const auth = { kind: 'operation', operationId: c.operationId, actor: 'w1' } as const;
    const ref = { kind: row.kind as StepKind, stepKey: row.step_key };
    const batch = await claimAndApplyLedgerSteps(t.db, auth, ref, 'w1', 30_000, LEDGER_KINDS);
    expect(batch.phaseA).toBe('not_asked');
    const all = await Promise.all((await stepRows(t.db, c.operationId)).map((r) => loadStep(t.db, r.id)));
    const rows = all.filter((r) => r.evidence_json !== null);
    expect(rows.map((r) => r.kind).sort()).toEqual(['launch_intent', 'session_prepare', 'workspace_attachment']);
    const validations = vi.mocked(validate.validateStepEvidence);
    validations.mockClear();
    for (const row of rows) {
      const stored = storedEvidenceOf({ ...row, evidence_json: row.evidence_json! });
      // The memo's answer is what verifying the stored bytes from scratch gives.
      expect(stored.sha256).toBe(row.evidence_sha256);
      expect(stored.evidence).toEqual(parseCanonical(row.evidence_json!));
      expect(stored.sha256).toBe(evidenceHash(parseCanonical(row.evidence_json!) as never));
    }
    expect(validations).not.toHaveBeenCalled();
  });
});
