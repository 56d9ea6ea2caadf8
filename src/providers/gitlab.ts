/**
 * GitLab merge requests through Gitbeaker (`@gitbeaker/rest`):
 * `MergeRequests.show` for the authenticated read, `MergeRequestNotes.all`
 * (every page) / `create` / `remove` for the marker note.
 *
 * Contract:
 * - `ref.baseUrl` is the API root (`https://gitlab.example.com/api/v4`); a
 *   root without the `/api/v4` suffix is taken as the host. `ref.token` is
 *   sent as `PRIVATE-TOKEN`; `ref.remoteSlug` is the project path (or numeric
 *   ID), URL-encoded by Gitbeaker; the contribution ID is the MR IID.
 * - Gitbeaker builds the endpoints, encodes the project path and follows the
 *   `Link: rel="next"` pages; the HTTP exchange is our own one-shot requester
 *   (docs/adr/0004-provider-clients.md): Gitbeaker's default requester
 *   silently re-sends any request answered 429 or 502 up to ten times —
 *   including a note POST, which could post the note twice — and its timeout
 *   spans a whole paginated listing. Ours sends each request exactly once and
 *   aborts it after `timeoutMs`, like the GitHub client.
 * - `ensureLinkComment` lists first and creates only when no note carries the
 *   marker: a retry after an ambiguous create finds the first note.
 */
import { MergeRequestNotes, MergeRequests } from '@gitbeaker/rest';
import { assertCarriesMarker, commentDigest, findMarked, positiveInt, responseDigest } from './digest';
import { invalidReference, toProviderError, type CallKind } from './http-failure';
import type { ContributionInfo, ContributionProvider, ContributionRef, LinkHandle } from './types';

export interface GitlabProviderOptions {
  timeoutMs: number;
}

type RequesterFn = NonNullable<ConstructorParameters<typeof MergeRequests>[0]['requesterFn']>;
type ResourceOptions = Parameters<RequesterFn>[0];
type Requester = ReturnType<RequesterFn>;
type RequestOptions = Parameters<Requester['get']>[1];

/** Why 100: GitLab's largest page, so a busy MR's notes take the fewest requests. */
const PAGE_SIZE = 100;

/** A non-2xx answer from GitLab (the requester's only error besides transport failures). */
class GitlabHttpError extends Error {
  constructor(
    readonly status: number,
    readonly detail: string,
  ) {
    super(`HTTP ${status} ${detail}`);
    this.name = 'GitlabHttpError';
  }
}

function httpStatusOf(err: unknown): { status: number; detail: string } | null {
  return err instanceof GitlabHttpError ? { status: err.status, detail: err.detail } : null;
}

const snake = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function query(params: Record<string, unknown> | undefined): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params ?? {})) {
    if (v === undefined || v === null) continue;
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') {
      throw new Error(`GitLab requester: query parameter ${k} is not a scalar`);
    }
    q.set(snake(k), String(v));
  }
  return q.toString();
}

async function errorDetail(response: Response): Promise<string> {
  const text = await response.text().catch(() => '');
  try {
    const parsed = JSON.parse(text) as { message?: unknown; error?: unknown };
    const d = parsed.message ?? parsed.error ?? '';
    return (typeof d === 'string' ? d : JSON.stringify(d)).slice(0, 200);
  } catch {
    return text.slice(0, 200);
  }
}

/** Gitbeaker requester that sends each request exactly once, with a per-request timeout. */
function oneShotRequester(timeoutMs: number): RequesterFn {
  return (service: ResourceOptions): Requester => {
    const send =
      (method: string) =>
      async (endpoint: string, options?: RequestOptions): Promise<unknown> => {
        const headers: Record<string, string> = { ...service.headers };
        for (const [name, value] of Object.entries(service.authHeaders)) headers[name] = await value();
        const url = new URL(endpoint, service.url.endsWith('/') ? service.url : `${service.url}/`);
        url.search = query(options?.searchParams);
        let body: string | undefined;
        const raw = options?.body;
        if (raw !== undefined && !(raw instanceof FormData) && Object.keys(raw).length > 0) {
          body = JSON.stringify(Object.fromEntries(Object.entries(raw).map(([k, v]) => [snake(k), v])));
          headers['content-type'] = 'application/json';
        }
        const timeout = AbortSignal.timeout(timeoutMs);
        const response = await fetch(url, {
          method,
          headers,
          body,
          signal: options?.signal ? AbortSignal.any([options.signal, timeout]) : timeout,
        });
        if (!response.ok) throw new GitlabHttpError(response.status, await errorDetail(response));
        const type = (response.headers.get('content-type') ?? '').split(';')[0]!.trim();
        const parsed: unknown =
          response.status === 204 ? null : type === 'application/json' ? await response.json() : await response.text();
        return { body: parsed, headers: Object.fromEntries(response.headers.entries()), status: response.status };
      };
    return {
      get: send('GET'),
      post: send('POST'),
      put: send('PUT'),
      patch: send('PATCH'),
      delete: send('DELETE'),
    } as unknown as Requester;
  };
}

interface Target {
  project: string | number;
  iid: number;
}

function target(ref: ContributionRef, what: string): Target {
  const slug = ref.remoteSlug.replace(/^\/+|\/+$/g, '');
  if (slug.length === 0) throw invalidReference(what, 'empty GitLab project path');
  const iid = positiveInt(ref.contributionId);
  if (iid === null) throw invalidReference(what, `"${ref.contributionId}" is not a merge request IID`);
  const numeric = positiveInt(slug);
  return { project: numeric ?? slug, iid };
}

export function createGitlabProvider(options: GitlabProviderOptions): ContributionProvider {
  const requesterFn = oneShotRequester(options.timeoutMs);
  const config = (ref: ContributionRef) => ({
    host: ref.baseUrl.replace(/\/+$/, '').replace(/\/api\/v4$/, ''),
    token: ref.token,
    requesterFn,
    // 0: no Gitbeaker-level timeout; the requester times out each request.
    queryTimeout: 0,
  });

  async function run<T>(call: CallKind, what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw toProviderError(err, call, `GitLab ${what}`, httpStatusOf);
    }
  }

  async function findLinkComment(ref: ContributionRef, marker: string): Promise<LinkHandle | null> {
    const what = 'list notes';
    const t = target(ref, `GitLab ${what}`);
    const notes = await run('read', what, () =>
      new MergeRequestNotes(config(ref)).all(t.project, t.iid, { perPage: PAGE_SIZE }),
    );
    const found = findMarked(
      notes.map((n) => ({ id: String(n.id), body: n.body ?? '' })),
      marker,
    );
    return found ? { handle: found.id, created: false, responseSha256: commentDigest(ref, found) } : null;
  }

  return {
    async getContribution(ref: ContributionRef): Promise<ContributionInfo> {
      const what = 'get merge request';
      const t = target(ref, `GitLab ${what}`);
      const mr = await run('read', what, () => new MergeRequests(config(ref)).show(t.project, t.iid));
      const info = { id: String(mr.iid), state: String(mr.state), url: String(mr.web_url) };
      return {
        ...info,
        responseSha256: responseDigest({
          provider: 'gitlab',
          remote_slug: ref.remoteSlug,
          contribution_kind: ref.contributionKind,
          ...info,
        }),
      };
    },

    findLinkComment,

    async ensureLinkComment(ref: ContributionRef, marker: string, body: string): Promise<LinkHandle> {
      assertCarriesMarker(marker, body);
      const found = await findLinkComment(ref, marker);
      if (found) return found;
      const what = 'create note';
      const t = target(ref, `GitLab ${what}`);
      const note = await run('write', what, () => new MergeRequestNotes(config(ref)).create(t.project, t.iid, body));
      const created = { id: String(note.id), body: note.body ?? '' };
      return { handle: created.id, created: true, responseSha256: commentDigest(ref, created) };
    },

    async deleteLinkComment(ref: ContributionRef, handle: string): Promise<void> {
      const what = 'delete note';
      const t = target(ref, `GitLab ${what}`);
      const noteId = positiveInt(handle);
      if (noteId === null) throw invalidReference(`GitLab ${what}`, `"${handle}" is not a note ID`);
      await run('write', what, () => new MergeRequestNotes(config(ref)).remove(t.project, t.iid, noteId));
    },
  };
}
