/** Asserts a call throws the `invalid_document` ValidationError naming `field`. */
import { expect } from 'vitest';
import { ValidationError } from '../../src/domain/errors';

export function expectInvalid(fn: () => unknown, field: string, message?: string | RegExp): ValidationError {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown, 'expected a ValidationError').toBeInstanceOf(ValidationError);
  const err = thrown as ValidationError;
  expect(err.code).toBe('invalid_document');
  expect(err.field).toBe(field);
  if (message !== undefined) expect(err.message).toMatch(message);
  return err;
}

/** A deep copy of `doc` after `edit`. */
export function mutate<T>(doc: T, edit: (d: any) => void): T {
  const copy = structuredClone(doc);
  edit(copy);
  return copy;
}
