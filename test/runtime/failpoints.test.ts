/**
 * Named failpoints: inert by default; throw / call / hang actions; `times`
 * and `match`; disarming; closed names; the TASKLEDGER_FAILPOINTS parser and
 * its arming of a real child process (exit code, context match). No database.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  armFailpoint,
  armFailpointsFromSpec,
  disarmAll,
  disarmFailpoint,
  failpoint,
  FAILPOINT_EXIT_CODE,
  FAILPOINT_NAMES,
  FailpointError,
  failpointHits,
  isFailpointArmed,
  parseFailpointSpec,
  type FailpointName,
} from '../../src/failpoints';

afterEach(() => disarmAll());

const settlesWithin = async (p: Promise<unknown>, ms: number): Promise<boolean> => {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const settled = p.then(
    () => true,
    () => true,
  );
  try {
    return await Promise.race([settled, timeout]);
  } finally {
    clearTimeout(timer);
  }
};

describe('failpoints in process', () => {
  it('are inert unless armed', async () => {
    for (const name of FAILPOINT_NAMES) {
      await expect(failpoint(name, { kind: 'fresh_branch_prepare' })).resolves.toBeUndefined();
      await expect(failpoint(name)).resolves.toBeUndefined();
      expect(failpointHits(name)).toBe(0);
      expect(isFailpointArmed(name)).toBe(false);
    }
    // Arming one name leaves the others inert.
    armFailpoint('during_compensation', { kind: 'throw' });
    await expect(failpoint('after_step_claim_commit')).resolves.toBeUndefined();
    expect(failpointHits('after_step_claim_commit')).toBe(0);
  });

  it('throw rejects with a FailpointError naming the failpoint and its context', async () => {
    armFailpoint('after_effect_before_record', { kind: 'throw' });
    const err = await failpoint('after_effect_before_record', { kind: 'session_prepare', attempt: 2 }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FailpointError);
    expect(err).toMatchObject({
      failpoint: 'after_effect_before_record',
      context: { kind: 'session_prepare', attempt: 2 },
    });
    expect(failpointHits('after_effect_before_record')).toBe(1);
    // Armed without `times`: fires every time.
    await expect(failpoint('after_effect_before_record')).rejects.toBeInstanceOf(FailpointError);
    expect(failpointHits('after_effect_before_record')).toBe(2);
  });

  it('call awaits the callback with the context, and propagates its failure', async () => {
    const order: string[] = [];
    armFailpoint('between_complete_phase_a_and_b', {
      kind: 'call',
      fn: async (ctx, name) => {
        await new Promise((r) => setTimeout(r, 5));
        order.push(`${name}:${String(ctx.operationId)}`);
      },
    });
    await failpoint('between_complete_phase_a_and_b', { operationId: 'op-1' });
    order.push('after');
    expect(order).toEqual(['between_complete_phase_a_and_b:op-1', 'after']);

    armFailpoint('during_compensation', {
      kind: 'call',
      fn: () => {
        throw new Error('competing transaction lost');
      },
    });
    await expect(failpoint('during_compensation')).rejects.toThrow('competing transaction lost');
    armFailpoint('during_compensation', { kind: 'call', fn: () => Promise.reject(new Error('async loss')) });
    await expect(failpoint('during_compensation')).rejects.toThrow('async loss');
  });

  it('times fires at most N times, then the failpoint is inert', async () => {
    armFailpoint('after_step_claim_commit', { kind: 'throw' }, { times: 2 });
    await expect(failpoint('after_step_claim_commit')).rejects.toBeInstanceOf(FailpointError);
    expect(isFailpointArmed('after_step_claim_commit')).toBe(true);
    await expect(failpoint('after_step_claim_commit')).rejects.toBeInstanceOf(FailpointError);
    expect(isFailpointArmed('after_step_claim_commit')).toBe(false);
    await expect(failpoint('after_step_claim_commit')).resolves.toBeUndefined();
    expect(failpointHits('after_step_claim_commit')).toBe(2);
  });

  it('match selects contexts; non-matching calls neither fire nor use up times', async () => {
    armFailpoint(
      'after_effect_before_record',
      { kind: 'throw' },
      { times: 1, match: (ctx) => ctx.kind === 'fresh_branch_prepare' },
    );
    await expect(failpoint('after_effect_before_record', { kind: 'session_prepare' })).resolves.toBeUndefined();
    await expect(failpoint('after_effect_before_record')).resolves.toBeUndefined();
    expect(failpointHits('after_effect_before_record')).toBe(0);
    await expect(failpoint('after_effect_before_record', { kind: 'fresh_branch_prepare' })).rejects.toBeInstanceOf(
      FailpointError,
    );
    await expect(failpoint('after_effect_before_record', { kind: 'fresh_branch_prepare' })).resolves.toBeUndefined();
    expect(failpointHits('after_effect_before_record')).toBe(1);
  });

  it('hang never settles', async () => {
    armFailpoint('after_dispatch_claim_before_runtime_start', { kind: 'hang' }, { times: 1 });
    expect(await settlesWithin(failpoint('after_dispatch_claim_before_runtime_start'), 50)).toBe(false);
    expect(failpointHits('after_dispatch_claim_before_runtime_start')).toBe(1);
  });

  it('disarm, disarmAll and re-arming', async () => {
    armFailpoint('after_begin_commit_before_enqueue', { kind: 'throw' });
    armFailpoint('after_complete_before_outbox_delivery', { kind: 'throw' });
    await expect(failpoint('after_begin_commit_before_enqueue')).rejects.toBeInstanceOf(FailpointError);
    disarmFailpoint('after_begin_commit_before_enqueue');
    await expect(failpoint('after_begin_commit_before_enqueue')).resolves.toBeUndefined();
    expect(failpointHits('after_begin_commit_before_enqueue')).toBe(1); // still readable after disarm
    disarmAll();
    await expect(failpoint('after_complete_before_outbox_delivery')).resolves.toBeUndefined();
    // Re-arming replaces the action and resets the count.
    let calls = 0;
    armFailpoint('after_begin_commit_before_enqueue', { kind: 'call', fn: () => void calls++ });
    expect(failpointHits('after_begin_commit_before_enqueue')).toBe(0);
    await failpoint('after_begin_commit_before_enqueue');
    expect([calls, failpointHits('after_begin_commit_before_enqueue')]).toEqual([1, 1]);
  });

  it('rejects unknown names and bad options', () => {
    const bogus = 'after_everything' as FailpointName;
    expect(() => armFailpoint(bogus, { kind: 'throw' })).toThrow(/unknown failpoint/);
    expect(() => disarmFailpoint(bogus)).toThrow(/unknown failpoint/);
    expect(() => failpointHits(bogus)).toThrow(/unknown failpoint/);
    expect(() => armFailpoint('during_compensation', { kind: 'throw' }, { times: 0 })).toThrow(/times/);
    expect(() => armFailpoint('during_compensation', { kind: 'throw' }, { times: 1.5 })).toThrow(/times/);
    expect(() => armFailpoint('during_compensation', { kind: 'exit', code: -1 })).toThrow(/exit code/);
    expect(isFailpointArmed('during_compensation')).toBe(false);
  });
});

describe('TASKLEDGER_FAILPOINTS', () => {
  it('parses the documented form', () => {
    expect(
      parseFailpointSpec(
        'after_effect_before_record=exit:kind=fresh_branch_prepare,between_complete_phase_a_and_b=exit',
      ),
    ).toEqual([
      { name: 'after_effect_before_record', action: { kind: 'exit' }, match: { kind: 'fresh_branch_prepare' } },
      { name: 'between_complete_phase_a_and_b', action: { kind: 'exit' }, match: {} },
    ]);
    expect(
      parseFailpointSpec(
        ' during_compensation = throw : times = 2 : kind = session_prepare , ,after_step_claim_commit=exit:code=3:times=1,after_begin_commit_before_enqueue=hang',
      ),
    ).toEqual([
      { name: 'during_compensation', action: { kind: 'throw' }, times: 2, match: { kind: 'session_prepare' } },
      { name: 'after_step_claim_commit', action: { kind: 'exit', code: 3 }, times: 1, match: {} },
      { name: 'after_begin_commit_before_enqueue', action: { kind: 'hang' }, match: {} },
    ]);
    expect(parseFailpointSpec('')).toEqual([]);
  });

  it.each([
    ['an unknown name', 'after_everything=exit', /unknown failpoint/],
    ['a missing action', 'during_compensation', /name=action/],
    ['an unknown action', 'during_compensation=crash', /not throw, exit or hang/],
    ['call, which needs a function', 'during_compensation=call', /not throw, exit or hang/],
    ['a name armed twice', 'during_compensation=exit,during_compensation=throw', /armed twice/],
    ['a parameter without a value', 'during_compensation=exit:kind', /key=value/],
    ['a bad times', 'during_compensation=exit:times=0', /times/],
    ['a non-numeric code', 'during_compensation=exit:code=x', /code/],
    ['code on a non-exit action', 'during_compensation=throw:code=3', /only to exit/],
    ['a duplicated match key', 'during_compensation=throw:kind=a:kind=b', /twice/],
  ])('rejects %s', (_what, text, message) => {
    expect(() => parseFailpointSpec(text)).toThrow(message);
  });

  it('arms in process with context matching by string equality', async () => {
    armFailpointsFromSpec('after_effect_before_record=throw:kind=fresh_branch_prepare:attempt=2:times=1');
    await expect(failpoint('after_effect_before_record', { kind: 'fresh_branch_prepare' })).resolves.toBeUndefined();
    await expect(
      failpoint('after_effect_before_record', { kind: 'fresh_branch_prepare', attempt: 1 }),
    ).resolves.toBeUndefined();
    await expect(
      failpoint('after_effect_before_record', { kind: 'fresh_branch_prepare', attempt: 2 }),
    ).rejects.toBeInstanceOf(FailpointError);
    expect(isFailpointArmed('after_effect_before_record')).toBe(false);
  });

  const root = fileURLToPath(new URL('../..', import.meta.url));
  const moduleUrl = new URL('../../src/failpoints.ts', import.meta.url).href;

  /** Runs a tiny ESM child with TASKLEDGER_FAILPOINTS set; resolves its exit code and output. */
  function child(spec: string, body: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const script = `const fp = await import(${JSON.stringify(moduleUrl)});\n${body}\nprocess.stdout.write('survived');`;
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', script],
        { cwd: root, env: { ...process.env, TASKLEDGER_FAILPOINTS: spec }, timeout: 60_000 },
        (err, stdout, stderr) => {
          const code = err === null ? 0 : typeof err.code === 'number' ? err.code : null;
          resolve({ code, stdout, stderr });
        },
      );
    });
  }

  it('arms a child process at load: exit fires only for the matching context', async () => {
    const spec = 'after_effect_before_record=exit:kind=fresh_branch_prepare,between_complete_phase_a_and_b=exit:code=7';
    const [skipped, exited, coded, bad] = await Promise.all([
      child(spec, "await fp.failpoint('after_effect_before_record', { kind: 'session_prepare' });"),
      child(spec, "await fp.failpoint('after_effect_before_record', { kind: 'fresh_branch_prepare' });"),
      child(spec, "await fp.failpoint('between_complete_phase_a_and_b');"),
      child('after_everything=exit', ''),
    ]);
    expect(skipped).toMatchObject({ code: 0, stdout: 'survived' });
    expect(exited).toMatchObject({ code: FAILPOINT_EXIT_CODE, stdout: '' });
    expect(exited.stderr).toContain('failpoint after_effect_before_record: exit');
    expect(coded).toMatchObject({ code: 7, stdout: '' });
    expect(bad.code).not.toBe(0);
    expect(bad.stdout).toBe('');
    expect(bad.stderr).toContain('unknown failpoint');
  });
});
