import { describe, expect, it } from 'vitest';
import { STEP_KINDS } from '../../src/domain/vocab';
import { STEP_KIND_MODULES, defaultStepHandlers, kindModule } from '../../src/kinds/registry';

describe('step-kind registry', () => {
  it('holds exactly one module per step kind, each under its own name', () => {
    expect(Object.keys(STEP_KIND_MODULES).sort()).toEqual([...STEP_KINDS].sort());
    for (const kind of STEP_KINDS) {
      const module = kindModule(kind);
      expect(module.kind).toBe(kind);
      expect(defaultStepHandlers[kind]).toBe(module);
    }
  });

  it('gives every kind a worker, an observer and a Complete verifier', () => {
    for (const kind of STEP_KINDS) {
      const module = kindModule(kind);
      expect(typeof module.perform, kind).toBe('function');
      expect(typeof module.observe, kind).toBe('function');
      expect(typeof module.verifier.verify, kind).toBe('function');
    }
  });

  it('the ledger-only kinds apply in their claim transaction; the kinds with outside effects do not', () => {
    const inClaim = STEP_KINDS.filter((k) => kindModule(k).applyInClaim !== undefined).sort();
    expect(inClaim).toEqual(['launch_intent', 'session_prepare', 'workspace_attachment']);
  });

  it('every kind but the launch intent has an undo and a cleanup performer (V7: an intent is never compensated)', () => {
    for (const kind of STEP_KINDS) {
      const module = kindModule(kind);
      const expected = kind === 'launch_intent' ? 'object' : 'function';
      expect(typeof module.undo, kind).toBe(expected);
      expect(typeof module.cleanup, kind).toBe(expected);
    }
    expect(kindModule('launch_intent').undo).toBeNull();
    expect(kindModule('launch_intent').cleanup).toBeNull();
  });

  it('only kinds with files of their own add a verify pass', () => {
    const withPass = STEP_KINDS.filter((k) => kindModule(k).verifyPass !== undefined);
    expect(withPass).toEqual(['attachment_claim']);
  });
});
