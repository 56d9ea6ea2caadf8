/**
 * The local executor's start marker: one file per session, written before the
 * agent is spawned (`starting`), replaced after the OS started it (`started`,
 * with the pid) or refused it (`refused`). A new marker is created
 * exclusively (hard link of a complete temporary file), so two starts for the
 * same session can never both believe they own it. The exit record is a
 * separate file the executor writes when it sees the agent exit.
 */
import { createHash } from 'node:crypto';
import { linkSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { canonicalJson } from '../canonical/canonical-json';

export type MarkerState = 'starting' | 'started' | 'refused';

export interface StartMarker {
  idempotency_key: string;
  session_id: string;
  /** The dispatch-claim generation that wrote it (0 for markers written before generations were recorded). */
  generation: number;
  state: MarkerState;
  pid: number | null;
  log?: string;
}

export interface ExitRecord {
  pid: number | null;
  code: number | null;
  signal: string | null;
}

export const markerSha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

const isErrno = (err: unknown, code: string): boolean => (err as NodeJS.ErrnoException | null)?.code === code;

/** The marker's text and parsed document, or null when there is none. Unparsable text throws. */
export function readMarker(path: string): { text: string; doc: StartMarker } | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw err;
  }
  const raw = JSON.parse(text) as Partial<StartMarker>;
  if (typeof raw.idempotency_key !== 'string' || typeof raw.state !== 'string') {
    throw new Error(`start marker ${path} is not a marker document`);
  }
  return { text, doc: { ...raw, generation: Number(raw.generation ?? 0), pid: raw.pid ?? null } as StartMarker };
}

/** Replaces the marker atomically (rename); for a marker this start already owns. */
export function replaceMarker(path: string, doc: StartMarker): string {
  const text = canonicalJson(doc);
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
  return text;
}

/** Creates the marker only if none exists; false when another start got there first. */
export function createMarkerExclusive(path: string, doc: StartMarker): boolean {
  const tmp = `${path}.${process.pid}.${doc.generation}.new`;
  writeFileSync(tmp, canonicalJson(doc));
  try {
    linkSync(tmp, path);
    return true;
  } catch (err) {
    if (isErrno(err, 'EEXIST')) return false;
    throw err;
  } finally {
    unlinkSync(tmp);
  }
}

/** Moves a `refused` marker aside so a new start can create its own; false when another start moved it first. */
export function retireMarker(path: string, generation: number): boolean {
  try {
    renameSync(path, `${path}.refused-g${generation}`);
    return true;
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return false;
    throw err;
  }
}

export function writeExitRecord(path: string, record: ExitRecord): void {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, canonicalJson(record));
  renameSync(tmp, path);
}

export function readExitRecord(path: string): ExitRecord | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as ExitRecord;
  } catch (err) {
    if (isErrno(err, 'ENOENT')) return null;
    throw err;
  }
}
